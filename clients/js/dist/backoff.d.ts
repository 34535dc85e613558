/** How long to wait before a reconnect or a new subscribe: exponential, capped, with jitter. */
export interface BackoffOptions {
    /** The first wait, before jitter; default 500 ms. */
    baseMs?: number;
    /** The longest wait, before jitter; default 30 s. */
    maxMs?: number;
}
/**
 * The wait before attempt `attempt` (0 for the first retry): min(max, base * 2^attempt), of which
 * the second half is random ("equal jitter"). Never 0, so a refusing service is never hammered;
 * random, so the tabs a restart closed at once do not all come back in the same millisecond.
 */
export declare function backoffDelay(attempt: number, { baseMs, maxMs }?: BackoffOptions, random?: () => number): number;
