/**
 * Dispatch namespaces (the platform's Workers for Platforms, spec 002_27fdb1f572b9493b.txt,
 * "Script hosting for platforms"), mounted by the workers area. See docs/workers-for-platforms.md.
 *
 * - Namespaces `/accounts/{a}/workers/dispatch/namespaces` (`GET`/`POST`, `GET`/`DELETE /{name}`)
 *   and customer scripts in them (`…/{ns}/scripts`: `PUT /{name}` in both multipart forms the
 *   account scripts take, list with `page`/`per_page` ≤ 100 and a `tags=<tag>:yes` filter, get,
 *   `content`, `settings` (GET and PATCH), `bindings`, `secrets`, `secrets-bulk`, delete, delete
 *   by tag, tags).
 *   Uploads are loaded into the runtime before they are stored: a script that does not parse,
 *   throws at the top level or has no handler is refused with 400 with the runtime's message.
 * - Static assets: `…/scripts/{s}/assets-upload-session {manifest}` → `{jwt, buckets}` (only
 *   hashes the namespace does not hold), `POST /accounts/{a}/workers/assets/upload?base64=true`
 *   with the session token → completion token (201) once every bucket arrived (202 before), then
 *   deploy with `metadata.assets.jwt`; served with content types, ETags, `html_handling`,
 *   `not_found_handling` and `run_worker_first`; an `assets` binding fetches them from the script.
 *   `assets.config._redirects` / `_headers` (the files' text) answer before the script (rules.ts).
 *   An upload with assets and no module is an assets-only script: nothing is loaded in the
 *   runtime and its assets answer every request.
 * - The `dispatch_namespace` binding: `env.NS.get(name, args, {limits: {cpuMs, subRequests},
 *   outbound})` (runtime.ts). Customer scripts are guests of a small pool of runtime processes
 *   (two workerd processes, each with a Worker Loader): a new script is loaded into its pool's
 *   loader in milliseconds instead of starting a process, and a thousand customers cost a thousand
 *   isolates, not a thousand processes. A call is piped from the dispatcher's runtime through Node
 *   to the pool, which hands it to the guest (the binding's `serve`); Node stays in that path
 *   because it opens the invocation the limits, the outbound script and the watchdog hang on.
 *
 * Why a pool plus quarantine: a CPU overrun can only be stopped by killing a process (the loader
 *   has no CPU limit of its own that this runtime version confirms), and a pool's process runs
 *   every guest on one thread. So the watchdog kills the pool; the invocation silent the longest
 *   (the one holding the thread) fails with `Worker exceeded CPU time limit.`, the other in-flight
 *   calls never ran and bodiless ones are sent again to the restarted pool, and the offending
 *   customer runs in its own process from then on (the previous design, kept for it). Measured:
 *   the loop test's other customer answers after the pool restart (~0.3 s later than with one
 *   process per customer) instead of at once; the dispatcher (its own process) is untouched.
 *
 * LIMITATIONS: while a pooled guest spins, the other guests of its pool wait for the kill (cpuMs
 * plus the runtime's CPU slack) and the restart; an in-flight call with a body in that pool fails
 * with `Worker is unavailable.`; a guest waiting only on a timer while another spins may be taken
 * for the spinner (it fails, the spinner is sent again and caught next time); the pools'
 * memory is not watched per guest; quarantine is remembered per server until it restarts; the
 * CPU limit acts after `cpuMs` plus the runtime's CPU slack; service-worker scripts are not
 * offered; `_redirects`/`_headers` lines the platform would skip are refused; a server keeps which version of a customer script
 * it has loaded in memory, so with several nodes a re-upload reaches the other nodes when their
 * copy is reloaded; a dispatched call still crosses Node once (dispatcher's runtime → Node →
 * pool); a direct workerd-to-workerd path would need the invocation opened without Node.
 */
import { join } from 'node:path';
import type { AreaContext } from '../../../core/area.ts';
import { BlobStore } from '../../../core/storage/blobs.ts';
import { bindingExtensionService, type ScriptRegistry } from '../registry.ts';
import type { UploadParser } from '../version-routes.ts';
import { Tokens } from './assets.ts';
import { mountDispatchRoutes } from './routes.ts';
import { DispatchRuntime } from './runtime.ts';

export { assetHash } from './assets.ts';

export function mountDispatch(
  ctx: AreaContext,
  registry: ScriptRegistry,
  parser: UploadParser,
): void {
  const blobs = new BlobStore(join(ctx.config.dataDir, 'blobs'));
  const tokens = new Tokens(join(ctx.config.dataDir, 'keys', 'dispatch-assets.key'));
  const runtime = new DispatchRuntime(ctx, registry, blobs);
  ctx.services.provide(bindingExtensionService('dispatch_namespace'), runtime.extension());
  mountDispatchRoutes(ctx, parser, runtime, blobs, tokens);
}
