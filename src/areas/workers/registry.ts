/**
 * Uploaded scripts in the runtime: builds the load options (generated wrapper, modules, bindings),
 * loads a script when it is first needed after a start, reloads it after a redeploy, and runs its
 * internal entry points (workflow attempts, cron triggers). Offered to other areas as the `workers`
 * service.
 */
import { randomBytes } from 'node:crypto';
import type { AreaContext } from '../../core/area.ts';
import { apiError, ApiError, CODES } from '../../core/errors.ts';
import { imagesBinding } from '../images/index.ts';
import { CronScheduler, parseCron } from './cron.ts';
import { BROWSER_SERVICE, type BrowserBindings } from '../browser-rendering/index.ts';
import { findHost, type HostBinding, type LoadOptions, type ScriptHost } from './host.ts';
import { networkFetch, type InvocationInfo } from '../../runtime/index.ts';
import type { TriggersChange } from './triggers.ts';
import {
  scriptContents,
  scripts,
  toHostModules,
  type StoredBinding,
  type StoredContent,
  type StoredScript,
} from './store.ts';
import { KV_SERVICE, type KvService } from '../kv/index.ts';
import {
  ENGINE_BINDING,
  KV_BINDING_PREFIX,
  SCHEDULED_PATH,
  SECRET_HEADER,
  wrapperSource,
  WRAPPER_MODULE,
} from './wrapper.ts';

export const WORKERS_SERVICE = 'workers';
/** Wall-clock budget of one request to a script (a workflow attempt is one request). */
export const ATTEMPT_WALL_MS = 16 * 60_000;
/** Resident-set growth of a script's runtime instance that counts as a memory overrun. */
export const SCRIPT_MEMORY_MB = 1024;
/** An attempt older than this stops after its current step and is replayed at once. */
export const ATTEMPT_YIELD_MS = 5 * 60_000;

/** What the workflows area plugs in: the engine's end of the service binding. */
export interface WorkflowsBridge {
  handle(accountId: string, scriptName: string, req: Request): Promise<Response>;
}
export const WORKFLOWS_BRIDGE_SERVICE = 'workflows.bridge';

/**
 * A binding type another area implements (service `workers.binding.<type>`): the Node bindings it
 * needs and a script-side function `(env, out, waitUntil) => settle?` that puts its object into
 * `out` and may return a function whose promise the response waits for (calls still in flight).
 */
export interface BindingExtension {
  check(binding: StoredBinding): string | undefined;
  bindings(accountId: string, binding: StoredBinding): Record<string, HostBinding>;
  shim(binding: StoredBinding): string;
}
export const bindingExtensionService = (type: string): string => `workers.binding.${type}`;

/** Called after a script is stored (workflow definitions follow their bindings). */
export type DeployHook = (accountId: string, script: StoredScript) => Promise<void>;

export class RuntimeUnavailable extends Error {}

export function scriptIdOf(name: string): string {
  return `worker-${name}`;
}

export class ScriptRegistry {
  /** Authenticates the engine's calls into wrappers; new per server, so per runtime. */
  readonly secret = randomBytes(24).toString('hex');
  readonly deployHooks: DeployHook[] = [];
  readonly cron: CronScheduler;
  /** Sees every `fetch()` a script makes (set by the edge integration; default: the network). */
  outbound?: (req: Request, info: InvocationInfo) => Promise<Response>;
  /** Tells the routing views (this node's and the others') that triggers changed. */
  triggersChanged?: (change: TriggersChange) => Promise<void>;
  private readonly loaded = new Map<string, string>();
  private readonly loading = new Map<string, Promise<void>>();

  constructor(private readonly ctx: AreaContext) {
    const log = ctx.log.child({ area: 'workers' });
    this.cron = new CronScheduler(
      () => ctx.clock.now().getTime(),
      ctx.config.workflowsPollMs,
      (err, cron) => log.warn({ err, cron }, 'a cron trigger failed'),
    );
  }

  host(): ScriptHost | undefined {
    return findHost(this.ctx.services);
  }

  requireHost(): ScriptHost {
    const host = this.host();
    if (!host) throw new RuntimeUnavailable('the script runtime is not available on this server');
    return host;
  }

  /** The runtime load options for a stored script. */
  loadOptions(accountId: string, script: StoredScript, content: StoredContent): LoadOptions {
    const workflows: Record<string, string> = {};
    const kv: Record<string, string> = {};
    const bindings: Record<string, HostBinding> = {};
    const extensions: string[] = [];
    const kvService = this.ctx.services.optional<KvService>(KV_SERVICE);
    const images: string[] = [];
    const browsers: string[] = [];
    const browser = this.ctx.services.optional<BrowserBindings>(BROWSER_SERVICE);
    for (const b of script.bindings) {
      if (b.type === 'workflow') workflows[b.name] = String(b.workflow_name);
      else if (b.type === 'kv_namespace' && kvService) {
        kv[b.name] = `${KV_BINDING_PREFIX}${b.name}`;
        bindings[kv[b.name]] = kvService.binding(String(b.namespace_id));
      } else if (b.type === 'browser' && browser) {
        bindings[b.name] = browser.binding(accountId);
        browsers.push(b.name);
      } else if (b.type === 'plain_text' || b.type === 'secret_text')
        bindings[b.name] = { type: 'text', value: String(b.text ?? '') };
      else if (b.type === 'json') bindings[b.name] = { type: 'json', value: b.json };
      else if (b.type === 'images') {
        images.push(b.name);
        bindings[b.name] = imagesBinding();
      } else {
        const ext = this.ctx.services.optional<BindingExtension>(bindingExtensionService(b.type));
        if (ext) extensions.push(ext.shim(b));
        if (ext) Object.assign(bindings, ext.bindings(accountId, b));
      }
    }
    bindings[ENGINE_BINDING] = {
      type: 'service',
      fetch: (req) => this.bridge(accountId, script.id, req),
    };
    const modules = toHostModules(content);
    modules.unshift({
      name: WRAPPER_MODULE,
      type: 'esm',
      content: wrapperSource({
        userMain: script.main_module,
        secret: this.secret,
        workflows,
        extensions,
        kv,
        images,
        browsers,
      }),
    });
    return {
      modules,
      mainModule: WRAPPER_MODULE,
      ...(script.compatibility_date ? { compatibilityDate: script.compatibility_date } : {}),
      compatibilityFlags: script.compatibility_flags,
      bindings,
      // A workflow attempt is one long request: its CPU budget is the platform's per-step one, and
      // its wall budget outlasts the longest default step (attempts yield well before it). Every
      // running instance of a workflow executes in this script's one isolate, so its memory
      // allowance is that of many requests at once.
      limits: { cpuMs: 30_000, wallMs: ATTEMPT_WALL_MS, memoryMb: SCRIPT_MEMORY_MB },
      outbound: (req, info) => (this.outbound ? this.outbound(req, info) : networkFetch(req)),
    };
  }

  private async bridge(accountId: string, scriptName: string, req: Request): Promise<Response> {
    const bridge = this.ctx.services.optional<WorkflowsBridge>(WORKFLOWS_BRIDGE_SERVICE);
    if (!bridge) {
      return Response.json({
        error: { name: 'Error', message: 'Workflows are not available on this server' },
      });
    }
    return bridge.handle(accountId, scriptName, req);
  }

  /** Loads (or replaces) a script in the runtime; throws ApiError on a load failure. */
  async load(accountId: string, script: StoredScript, content: StoredContent): Promise<void> {
    const host = this.requireHost();
    const key = `${accountId}/${script.id}`;
    try {
      await host.load(
        accountId,
        scriptIdOf(script.id),
        this.loadOptions(accountId, script, content),
      );
    } catch (err) {
      this.loaded.delete(key);
      throw apiError(
        'worker_invalid',
        `Uncaught error while loading the script: ${(err as Error).message ?? String(err)}`,
      );
    }
    this.loaded.set(key, script.etag);
  }

  /** Makes sure the stored version of a script runs in the runtime. */
  async ensureLoaded(accountId: string, name: string): Promise<StoredScript> {
    const host = this.requireHost();
    const key = `${accountId}/${name}`;
    const pending = this.loading.get(key);
    if (pending) await pending;
    const doc = await scripts.get(this.ctx.database.db, accountId, name);
    if (!doc) throw apiError('worker_not_found', name);
    if (this.loaded.get(key) === doc.body.etag && host.has(accountId, scriptIdOf(name)))
      return doc.body;
    const job = (async () => {
      const content = await scriptContents.get(this.ctx.database.db, accountId, name);
      if (!content) throw apiError('worker_not_found', name);
      await this.load(accountId, doc.body, content.body);
    })();
    this.loading.set(key, job);
    try {
      await job;
    } finally {
      if (this.loading.get(key) === job) this.loading.delete(key);
    }
    return doc.body;
  }

  /** Fast path for hot callers: the loaded etag when the script is live, else undefined. */
  isLive(accountId: string, name: string): boolean {
    const host = this.host();
    return (
      !!host && this.loaded.has(`${accountId}/${name}`) && host.has(accountId, scriptIdOf(name))
    );
  }

  /** Sends an internal request to a script's wrapper. */
  async internalFetch(
    accountId: string,
    name: string,
    path: string,
    body: unknown,
  ): Promise<Response> {
    if (!this.isLive(accountId, name)) await this.ensureLoaded(accountId, name);
    const host = this.requireHost();
    const req = new Request(`http://outpost.internal${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', [SECRET_HEADER]: this.secret },
      body: JSON.stringify(body),
    });
    return host.fetch(accountId, scriptIdOf(name), req);
  }

  async unload(accountId: string, name: string): Promise<void> {
    this.loaded.delete(`${accountId}/${name}`);
    const host = this.host();
    if (host?.has(accountId, scriptIdOf(name))) await host.unload(accountId, scriptIdOf(name));
  }

  /** Replaces a script's cron triggers with its stored schedules. */
  armSchedules(accountId: string, script: StoredScript): void {
    const log = this.ctx.log.child({ area: 'workers' });
    this.cron.set(
      `script:${accountId}/${script.id}`,
      script.schedules.map((s) => ({
        cron: parseCron(s.cron),
        fire: async (scheduledTime) => {
          const res = await this.internalFetch(accountId, script.id, SCHEDULED_PATH, {
            cron: s.cron,
            scheduledTime,
          });
          const out = (await res.json().catch(() => ({}))) as {
            outcome?: string;
            error?: { message: string };
          };
          if (out.outcome !== 'ok')
            log.warn(
              { script: script.id, cron: s.cron, error: out.error?.message },
              'scheduled handler failed',
            );
        },
      })),
    );
  }

  dropSchedules(accountId: string, name: string): void {
    this.cron.set(`script:${accountId}/${name}`, []);
  }

  /** The HTTP status for a failure to reach the runtime. */
  static unavailable(err: RuntimeUnavailable): ApiError {
    return new ApiError(503, [
      { code: CODES.worker_runtime_unavailable.code, message: err.message },
    ]);
  }
}
