/**
 * The `runtime` area: creates the server's `ScriptHost` and provides it as service `'runtime'`.
 * Mounted after the edge; stopped before it, which disposes every runtime instance.
 */
import { defineArea } from '../core/area.ts';
import { createScriptHost, RUNTIME, type ScriptHost } from './index.ts';

export default defineArea({
  name: 'runtime',
  mount(ctx) {
    const { config } = ctx;
    const host = createScriptHost({
      log: ctx.log.child({ area: 'runtime' }),
      cpuSlackMs: config.runtimeCpuSlackMs,
      memoryFloorMb: config.runtimeMemoryFloorMb,
      wallTimeoutMs: config.runtimeWallTimeoutMs,
      maxInstances: config.runtimeMaxInstances,
    });
    ctx.services.provide<ScriptHost>(RUNTIME, host);
    return { stop: () => host.close() };
  },
});
