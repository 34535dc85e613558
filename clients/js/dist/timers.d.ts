/** The clock and timers a piece of logic runs on: the real ones, or a test's. */
export interface Timers {
    now(): number;
    setTimeout(callback: () => void, ms: number): unknown;
    clearTimeout(handle: unknown): void;
}
export declare const realTimers: Timers;
