/** A small typed event emitter: `on` returns the function that removes the listener. */
export declare class Emitter<Events extends Record<string, unknown[]>> {
    #private;
    on<K extends keyof Events>(event: K, listener: (...args: Events[K]) => void): () => void;
    emit<K extends keyof Events>(event: K, ...args: Events[K]): void;
    clear(): void;
}
