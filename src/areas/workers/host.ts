/**
 * The script host this area loads scripts into: the runtime's `ScriptHost`, provided under the
 * service name `runtime`. It is looked up when a script is first needed, so this area works (stores
 * uploads) on a server without a runtime too.
 */
import type { Services } from '../../core/services.ts';
import { RUNTIME, type ScriptHost } from '../../runtime/index.ts';

export type {
  Binding as HostBinding,
  LoadOptions,
  NodeBinding,
  ScriptHost,
  ScriptModule,
} from '../../runtime/index.ts';

export function findHost(services: Services): ScriptHost | undefined {
  return services.optional<ScriptHost>(RUNTIME);
}
