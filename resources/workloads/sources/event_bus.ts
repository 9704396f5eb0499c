// A typed publish/subscribe bus for UI events.
type Handler<T> = (payload: T) => void;

export interface Events {
  "user:login": { id: string; name: string };
  "user:logout": { id: string };
  "cart:add": { sku: string; quantity: number };
  "cart:clear": Record<string, never>;
}

export class EventBus<E extends Record<string, unknown>> {
  private handlers: { [K in keyof E]?: Set<Handler<E[K]>> } = {};

  on<K extends keyof E>(event: K, handler: Handler<E[K]>): () => void {
    const set = this.handlers[event] ?? new Set<Handler<E[K]>>();
    set.add(handler);
    this.handlers[event] = set;
    return () => this.off(event, handler);
  }

  off<K extends keyof E>(event: K, handler: Handler<E[K]>): void {
    this.handlers[event]?.delete(handler);
  }

  emit<K extends keyof E>(event: K, payload: E[K]): number {
    const set = this.handlers[event];
    if (!set) {
      return 0;
    }
    for (const handler of set) {
      try {
        handler(payload);
      } catch (err) {
        console.error(`handler for ${String(event)} failed`, err);
      }
    }
    return set.size;
  }
}

export const bus = new EventBus<Events>();
