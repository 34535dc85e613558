import { realTimers } from "./timers.js";
/**
 * Sends at most one value per `intervalMs`, the latest always: a value pushed within the interval
 * of the last send waits for the interval's end, and is replaced by any pushed meanwhile. The
 * last value pushed is always sent (unless cancelled), never one before it after it.
 */
export class LatestWinsThrottle {
    #send;
    #intervalMs;
    #timers;
    #lastSentAt = Number.NEGATIVE_INFINITY;
    #waiting = null;
    #timer = null;
    constructor(send, intervalMs = 50, timers = realTimers) {
        this.#send = send;
        this.#intervalMs = intervalMs;
        this.#timers = timers;
    }
    /** Whether a value waits to be sent. */
    get pending() {
        return this.#waiting !== null;
    }
    push(value) {
        this.#waiting = { value };
        if (this.#timer !== null)
            return; // sent at the interval's end, the latest then
        const wait = this.#lastSentAt + this.#intervalMs - this.#timers.now();
        if (wait <= 0) {
            this.flush();
        }
        else {
            this.#timer = this.#timers.setTimeout(() => {
                this.#timer = null;
                this.flush();
            }, wait);
        }
    }
    /** Sends the waiting value now, if any. */
    flush() {
        if (this.#timer !== null) {
            this.#timers.clearTimeout(this.#timer);
            this.#timer = null;
        }
        const waiting = this.#waiting;
        if (waiting === null)
            return;
        this.#waiting = null;
        this.#lastSentAt = this.#timers.now();
        this.#send(waiting.value);
    }
    /** Drops the waiting value. */
    cancel() {
        if (this.#timer !== null)
            this.#timers.clearTimeout(this.#timer);
        this.#timer = null;
        this.#waiting = null;
    }
}
