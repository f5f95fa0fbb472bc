/**
 * The change-event bus. In-process by default; areas publish `(topic, payload)` after a commit and
 * other areas subscribe instead of importing each other's internals.
 */
import { EventEmitter } from 'node:events';

export interface EventBus {
  publish(topic: string, payload: unknown): void;
  subscribe(topic: string, listener: (payload: unknown) => void): () => void;
  /** True if anything listens: hot paths skip building payloads nobody reads. */
  listening(topic: string): boolean;
}

export function createEventBus(): EventBus {
  const emitter = new EventEmitter();
  emitter.setMaxListeners(0);
  return {
    publish: (topic, payload) => {
      emitter.emit(topic, payload);
    },
    subscribe: (topic, listener) => {
      emitter.on(topic, listener);
      return () => emitter.off(topic, listener);
    },
    listening: (topic) => emitter.listenerCount(topic) > 0,
  };
}
