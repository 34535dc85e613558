type Listener = (...args: never[]) => void;

/** A small typed event emitter: `on` returns the function that removes the listener. */
export class Emitter<Events extends Record<string, unknown[]>> {
  readonly #listeners = new Map<keyof Events, Set<Listener>>();

  on<K extends keyof Events>(event: K, listener: (...args: Events[K]) => void): () => void {
    let set = this.#listeners.get(event);
    if (set === undefined) this.#listeners.set(event, (set = new Set()));
    const stored = listener as unknown as Listener;
    set.add(stored);
    return () => {
      set.delete(stored);
    };
  }

  emit<K extends keyof Events>(event: K, ...args: Events[K]): void {
    for (const listener of [...(this.#listeners.get(event) ?? [])]) {
      try {
        (listener as unknown as (...a: Events[K]) => void)(...args);
      } catch (error) {
        // One listener's fault neither stops the others nor the client.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  clear(): void {
    this.#listeners.clear();
  }
}
