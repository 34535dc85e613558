/** A small typed event emitter: `on` returns the function that removes the listener. */
export class Emitter {
    #listeners = new Map();
    on(event, listener) {
        let set = this.#listeners.get(event);
        if (set === undefined)
            this.#listeners.set(event, (set = new Set()));
        const stored = listener;
        set.add(stored);
        return () => {
            set.delete(stored);
        };
    }
    emit(event, ...args) {
        for (const listener of [...(this.#listeners.get(event) ?? [])]) {
            try {
                listener(...args);
            }
            catch (error) {
                // One listener's fault neither stops the others nor the client.
                queueMicrotask(() => {
                    throw error;
                });
            }
        }
    }
    clear() {
        this.#listeners.clear();
    }
}
