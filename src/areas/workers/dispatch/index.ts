/**
 * Dispatch namespaces (the platform's Workers for Platforms, spec 002_27fdb1f572b9493b.txt,
 * "Script hosting for platforms"), mounted by the workers area. See docs/workers-for-platforms.md.
 *
 * - Namespaces `/accounts/{a}/workers/dispatch/namespaces` (`GET`/`POST`, `GET`/`DELETE /{name}`)
 *   and customer scripts in them (`…/{ns}/scripts`: `PUT /{name}` in both multipart forms the
 *   account scripts take, list with `page`/`per_page` ≤ 100 and a `tags=<tag>:yes` filter, get,
 *   `content`, `settings` (GET and PATCH), `bindings`, `secrets`, delete, delete by tag, tags).
 *   Uploads are loaded into the runtime before they are stored: a script that does not parse,
 *   throws at the top level or has no handler is refused with 400 with the runtime's message.
 * - Static assets: `…/scripts/{s}/assets-upload-session {manifest}` → `{jwt, buckets}` (only
 *   hashes the namespace does not hold), `POST /accounts/{a}/workers/assets/upload?base64=true`
 *   with the session token → completion token (201) once every bucket arrived (202 before), then
 *   deploy with `metadata.assets.jwt`; served with content types, ETags, `html_handling`,
 *   `not_found_handling` and `run_worker_first`; an `assets` binding fetches them from the script.
 * - The `dispatch_namespace` binding: `env.NS.get(name, args, {limits: {cpuMs, subRequests},
 *   outbound})` (runtime.ts). Each customer script is its own runtime tenant (own process); a
 *   call is piped from the dispatcher's runtime through Node to the customer's without Fetch API
 *   objects (the binding's `serve`). The installed workerd offers a Worker Loader, which would run
 *   customers inside the dispatcher's process; it is not used because a CPU overrun can only be
 *   stopped by killing a process, and that must not take the dispatcher and the other customers
 *   with it.
 *
 * LIMITATIONS: a customer script is a workerd process (about 50 MB; `--runtime-max-instances`
 * caps how many run, idle ones stop and start again in ~0.3 s on their next request); the CPU
 * limit is enforced by the host's watchdog, so it acts after `cpuMs` plus the runtime's CPU slack;
 * assets-only scripts (no main module) and service-worker scripts are not offered; a server keeps
 * which version of a customer script it has loaded in memory, so with several nodes a re-upload
 * reaches the other nodes' running copy only when that copy restarts; a dispatched call still
 * crosses Node once (the runtime → Node binding → customer's runtime).
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
