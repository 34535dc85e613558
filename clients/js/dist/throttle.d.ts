import { type Timers } from "./timers.js";
/**
 * Sends at most one value per `intervalMs`, the latest always: a value pushed within the interval
 * of the last send waits for the interval's end, and is replaced by any pushed meanwhile. The
 * last value pushed is always sent (unless cancelled), never one before it after it.
 */
export declare class LatestWinsThrottle<T> {
    #private;
    constructor(send: (value: T) => void, intervalMs?: number, timers?: Timers);
    /** Whether a value waits to be sent. */
    get pending(): boolean;
    push(value: T): void;
    /** Sends the waiting value now, if any. */
    flush(): void;
    /** Drops the waiting value. */
    cancel(): void;
}
