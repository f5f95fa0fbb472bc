/**
 * Gives a test the run-time services and event bus of the server it starts: an extra area,
 * mounted last, keeps them. The server helper mounts `AREAS`, so the probe is appended there for
 * this test file (each file runs in its own process).
 */
import { AREAS } from '../../../src/areas.ts';
import { defineArea } from '../../../src/core/area.ts';
import type { EventBus } from '../../../src/core/events.ts';
import type { Services } from '../../../src/core/services.ts';

const seen: { services: Services; events: EventBus }[] = [];
if (!AREAS.some((a) => a.name === 'test-probe')) {
  AREAS.push(defineArea({ name: 'test-probe', mount: ({ services, events }) => void seen.push({ services, events }) }));
}

/** The services and event bus of the most recently started server. */
export function lastServer(): { services: Services; events: EventBus } {
  const s = seen[seen.length - 1];
  if (!s) throw new Error('no server started since the probe was installed');
  return s;
}
