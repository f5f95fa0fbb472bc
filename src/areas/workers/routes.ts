/**
 * Script upload and management under `/accounts/{account_id}/workers/scripts`: upload (multipart,
 * JSON `metadata` part or bracket fields), list, get content, delete, and cron schedules.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { requireAccount } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import type { FilePart, MultipartForm } from '../../core/multipart.ts';
import type { Deployer } from './versions.ts';
import type { UploadParser } from './version-routes.ts';
import { raw } from '../../core/router.ts';
import { CronError, parseCron } from './cron.ts';
import type { ScriptModule } from './host.ts';
import {
  bindingExtensionService,
  RuntimeUnavailable,
  ScriptRegistry,
  scriptIdOf,
  type BindingExtension,
} from './registry.ts';
import { WRAPPER_MODULE } from './wrapper.ts';
import { scriptSubdomains, workerDomains } from './triggers.ts';
import { KV_SERVICE, type KvService } from '../kv/index.ts';
import {
  requireScript,
  scriptContents,
  scripts,
  type StoredBinding,
  type StoredContent,
  type StoredModule,
  type StoredScript,
} from './store.ts';

export const WORKERS_PERMISSION = 'workers_scripts';
const read = { permission: WORKERS_PERMISSION, level: 'read' } as const;
const edit = { permission: WORKERS_PERMISSION, level: 'edit' } as const;
const tags = ['workers'];
const params = { script_name: 'any' } as const;

const SCRIPT_NAME = /^[a-z0-9_][a-z0-9_-]{0,62}$/;
const BINDING_NAME = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const MAX_SCRIPT_BYTES = 10 * 1024 * 1024;
/** Binding types this server wires into scripts. */
const SUPPORTED_BINDINGS = new Set([
  'workflow',
  'plain_text',
  'secret_text',
  'json',
  'kv_namespace',
  'images',
  'browser',
]);

const Metadata = z
  .object({
    main_module: z.string().min(1).optional(),
    body_part: z.string().optional(),
    bindings: z.array(z.object({ type: z.string(), name: z.string() }).passthrough()).optional(),
    compatibility_date: z
      .string()
      .regex(/^\d{4}-\d{2}-\d{2}$/, 'expected YYYY-MM-DD')
      .optional(),
    compatibility_flags: z.array(z.string()).optional(),
    tags: z.array(z.string()).optional(),
    keep_bindings: z.array(z.string()).optional(),
    logpush: z.boolean().optional(),
    observability: z.record(z.string(), z.unknown()).optional(),
    tail_consumers: z.array(z.unknown()).optional(),
  })
  .passthrough();

/**
 * The bindings a new upload runs with: its own, plus the previous version's secrets, those of the
 * types in `keep_bindings`, and those named by `{type: 'inherit', name}`.
 */
export function mergeBindings(
  next: StoredBinding[],
  prev: StoredBinding[],
  keep: string[] | undefined,
): StoredBinding[] {
  const out: StoredBinding[] = [];
  for (const [i, b] of next.entries()) {
    if (b.type !== 'inherit') {
      out.push(b);
      continue;
    }
    const old = prev.find((p) => p.name === b.name);
    if (!old)
      throw bad(
        `bindings.${i}: ${b.name} is inherited but the previous version has no such binding`,
      );
    out.push(old);
  }
  // Secrets outlive uploads, as on the platform: they are set and deleted through the secrets
  // routes, and an upload that does not name one keeps it.
  const kept = new Set([...(keep ?? []), 'secret_text']);
  const names = new Set(out.map((b) => b.name));
  for (const p of prev) if (kept.has(p.type) && !names.has(p.name)) out.push(p);
  return out;
}

export function etagOf(
  content: StoredContent,
  bindings: StoredBinding[],
  date: string | null | undefined,
  flags: string[] | undefined,
): string {
  return createHash('sha256')
    .update(JSON.stringify({ modules: content.modules, bindings, d: date, f: flags }))
    .digest('hex');
}

/** Where an upload came from, as the platform reports it (`last_deployed_from`, `source`). */
export function sourceOf(userAgent: string | undefined): string {
  return /wrangler/i.test(userAgent ?? '') ? 'wrangler' : 'api';
}

export function annotationsOf(metadata: Record<string, unknown>): Record<string, string> {
  const a = metadata.annotations;
  if (!a || typeof a !== 'object') return {};
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(a as Record<string, unknown>))
    if (typeof v === 'string') out[k] = v;
  return out;
}

const ScheduleBody = z.array(z.object({ cron: z.string().min(1) }));

function bad(message: string) {
  return apiError('worker_invalid', message);
}

function moduleType(file: FilePart, isMain: boolean): ScriptModule['type'] | undefined {
  const type = file.type.split(';')[0].trim().toLowerCase();
  const name = file.filename || file.field;
  if (type === 'application/javascript+module' || type === 'text/javascript+module') return 'esm';
  if (type === 'application/javascript' || type === 'text/javascript')
    return isMain || !name.endsWith('.cjs') ? 'esm' : 'commonjs';
  if (type === 'application/wasm') return 'wasm';
  if (type === 'text/plain') return 'text';
  if (type === 'application/octet-stream') return 'data';
  if (type === 'application/json') return 'text';
  if (type === 'application/source-map') return undefined;
  if (isMain) return 'esm';
  return 'data';
}

/** Finds the area that implements a binding type beyond the ones this area knows. */
export type ExtensionLookup = (type: string) => BindingExtension | undefined;

export function checkBindings(
  raw: unknown[] | undefined,
  extension: ExtensionLookup,
): StoredBinding[] {
  const out: StoredBinding[] = [];
  const names = new Set<string>();
  for (const [i, b] of (raw ?? []).entries()) {
    const binding = b as StoredBinding;
    if (!BINDING_NAME.test(binding.name))
      throw bad(
        `bindings.${i}.name: ${JSON.stringify(binding.name)} is not a valid JavaScript identifier`,
      );
    if (binding.name.startsWith('__OUTPOST'))
      throw bad(`bindings.${i}.name: names starting with __OUTPOST are reserved`);
    if (names.has(binding.name)) throw bad(`bindings.${i}.name: ${binding.name} is bound twice`);
    names.add(binding.name);
    const ext = extension(binding.type);
    const problem = ext?.check(binding);
    if (problem) throw bad(`bindings.${i}.${problem}`);
    if (!SUPPORTED_BINDINGS.has(binding.type) && !ext) {
      throw bad(
        `bindings.${i}.type: ${binding.type} bindings are not supported by this server (supported: ${[...SUPPORTED_BINDINGS].join(', ')})`,
      );
    }
    if (binding.type === 'workflow') {
      if (typeof binding.workflow_name !== 'string' || binding.workflow_name.length === 0)
        throw bad(`bindings.${i}.workflow_name is required`);
      if (binding.class_name !== undefined && typeof binding.class_name !== 'string')
        throw bad(`bindings.${i}.class_name must be a string`);
      if (binding.script_name !== undefined && typeof binding.script_name !== 'string')
        throw bad(`bindings.${i}.script_name must be a string`);
    }
    if (
      (binding.type === 'plain_text' || binding.type === 'secret_text') &&
      typeof binding.text !== 'string'
    ) {
      throw bad(`bindings.${i}.text must be a string`);
    }
    if (
      binding.type === 'kv_namespace' &&
      (typeof binding.namespace_id !== 'string' || !/^[0-9a-f]{32}$/.test(binding.namespace_id))
    )
      throw bad(`bindings.${i}.namespace_id must be the 32-hex id of a key-value namespace`);
    if (binding.type === 'json' && !('json' in binding))
      throw bad(`bindings.${i}.json is required`);
    out.push(binding);
  }
  return out;
}

function detectHandlers(source: string): string[] {
  const handlers = ['fetch'];
  if (/\bscheduled\b/.test(source)) handlers.push('scheduled');
  return handlers;
}

const MODULE_CONTENT_TYPES: Record<StoredModule['type'], string> = {
  esm: 'application/javascript+module; charset=utf-8',
  commonjs: 'application/javascript; charset=utf-8',
  text: 'text/plain; charset=utf-8',
  data: 'application/octet-stream',
  wasm: 'application/wasm',
};

/**
 * A script's main module as the platform answers a content download: the raw bytes with the
 * module's content type, the script's ETag, and `cf-entrypoint` naming the module (the name a
 * re-upload must give as `main_module`).
 */
export function mainModuleResponse(
  script: Pick<StoredScript, 'main_module' | 'etag'>,
  content: StoredContent | undefined,
): Response {
  const main = content?.modules.find((m) => m.name === script.main_module);
  return new Response(Buffer.from(main?.content ?? '', 'base64'), {
    headers: {
      'content-type': MODULE_CONTENT_TYPES[main?.type ?? 'esm'] ?? MODULE_CONTENT_TYPES.esm,
      etag: `"${script.etag}"`,
      'cf-entrypoint': script.main_module,
    },
  });
}

export function scriptView(s: StoredScript) {
  return {
    id: s.id,
    etag: s.etag,
    created_on: s.created_on,
    modified_on: s.modified_on,
    handlers: s.handlers,
    compatibility_date: s.compatibility_date ?? undefined,
    compatibility_flags: s.compatibility_flags,
    has_assets: false,
    has_modules: true,
    logpush: false,
    usage_model: 'standard',
    tags: s.tags,
    placement_mode: undefined,
    startup_time_ms: 0,
  };
}

export function mountWorkersRoutes(
  ctx: AreaContext,
  registry: ScriptRegistry,
  deployer: Deployer,
): UploadParser {
  const { router, clock } = ctx;
  const db = ctx.database.db;
  const extensionOf: ExtensionLookup = (t) =>
    ctx.services.optional<BindingExtension>(bindingExtensionService(t));

  function checkName(name: string) {
    if (!SCRIPT_NAME.test(name)) {
      throw bad(
        `Script name ${JSON.stringify(name)} is invalid: use up to 63 lowercase letters, digits, dashes and underscores`,
      );
    }
  }

  async function checkNamespaces(accountId: string, bindings: StoredBinding[]) {
    const kv = ctx.services.optional<KvService>(KV_SERVICE);
    for (const [i, b] of bindings.entries()) {
      if (b.type !== 'kv_namespace') continue;
      if (!kv) throw bad(`bindings.${i}: key-value namespaces are not available on this server`);
      if (!(await kv.exists(accountId, String(b.namespace_id))))
        throw bad(
          `bindings.${i}.namespace_id: there is no key-value namespace ${String(b.namespace_id)} in this account; create it first`,
        );
    }
  }

  /** Reads an upload form (script or version) into a script record and its modules. */
  async function parseUpload(
    accountId: string,
    name: string,
    form: MultipartForm,
    prev: StoredScript | undefined,
  ): Promise<{ script: StoredScript; content: StoredContent }> {
    const parsed = Metadata.safeParse(form.metadata);
    if (!parsed.success) {
      throw bad(
        parsed.error.issues.map((i) => `metadata.${i.path.join('.')}: ${i.message}`).join('; '),
      );
    }
    const meta = parsed.data;
    if (meta.body_part && !meta.main_module) {
      throw bad(
        'Service-worker scripts (body_part) are not supported: upload an ES module script with metadata.main_module',
      );
    }
    const mainName = meta.main_module?.replace(/^\.\//, '');
    if (!mainName) throw bad('metadata.main_module is required');
    const files = form.files.filter((f) => f.field !== 'metadata');
    const modules: StoredModule[] = [];
    let total = 0;
    for (const f of files) {
      const modName = (f.filename || f.field).replace(/^\.\//, '');
      const type = moduleType(f, modName === mainName);
      if (!type) continue;
      if (modules.some((m) => m.name === modName)) throw bad(`module ${modName} is uploaded twice`);
      if (modName === WRAPPER_MODULE || modName.startsWith('__outpost'))
        throw bad(`module name ${modName} is reserved`);
      total += f.data.length;
      modules.push({ name: modName, type, content: f.data.toString('base64') });
    }
    if (total > MAX_SCRIPT_BYTES)
      throw bad(`The script is ${total} bytes; the limit is ${MAX_SCRIPT_BYTES} bytes`);
    const main = modules.find((m) => m.name === mainName);
    if (!main)
      throw bad(
        `main_module ${mainName} is not among the uploaded parts (${modules.map((m) => m.name).join(', ') || 'none'})`,
      );
    if (main.type !== 'esm')
      throw bad(`main_module ${main.name} must be an ES module (application/javascript+module)`);
    const bindings = mergeBindings(
      checkBindings(meta.bindings, extensionOf),
      prev?.bindings ?? [],
      meta.keep_bindings,
    );
    await checkNamespaces(accountId, bindings);
    const content: StoredContent = { modules };
    const ts = clock.now().toISOString();
    const script: StoredScript = {
      id: name,
      etag: etagOf(content, bindings, meta.compatibility_date, meta.compatibility_flags),
      main_module: main.name,
      compatibility_date: meta.compatibility_date ?? null,
      compatibility_flags: meta.compatibility_flags ?? [],
      bindings,
      handlers: detectHandlers(Buffer.from(main.content, 'base64').toString('utf8')),
      tags: meta.tags ?? prev?.tags ?? [],
      schedules: prev?.schedules ?? [],
      settings: {
        ...(prev?.settings ?? {}),
        ...(meta.logpush !== undefined ? { logpush: meta.logpush } : {}),
        ...(meta.observability !== undefined ? { observability: meta.observability } : {}),
        ...(meta.tail_consumers !== undefined ? { tail_consumers: meta.tail_consumers } : {}),
      },
      created_on: prev?.created_on ?? ts,
      modified_on: ts,
    };
    return { script, content };
  }

  router.add(
    {
      method: 'PUT',
      path: '/accounts/:account_id/workers/scripts/:script_name',
      operationId: 'worker-script-upload-worker-module',
      summary: 'Upload a module script (multipart: metadata + modules)',
      auth: edit,
      bodyType: 'multipart',
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, script_name: name } = req.params;
      await requireAccount(db, accountId);
      checkName(name);
      const prev = await scripts.get(db, accountId, name);
      const { script, content } = await parseUpload(accountId, name, req.form!, prev?.body);
      const deployed = await deployer.deploy(accountId, script, content, {
        source: sourceOf(req.c.req.header('user-agent')),
        annotations: annotationsOf(req.form!.metadata),
      });
      return { ...scriptView(deployed.script), deployment_id: deployed.versionId };
    },
  );

  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/scripts',
      operationId: 'worker-script-list-workers',
      summary: 'List scripts',
      auth: read,
      tags,
    },
    async (req) => {
      await requireAccount(db, req.params.account_id);
      return (await scripts.all(db, req.params.account_id)).map((d) => scriptView(d.body));
    },
  );

  // The script download and the client's `content/v2` answer the same main module.
  for (const [path, operationId] of [
    ['/accounts/:account_id/workers/scripts/:script_name', 'worker-script-download-worker'],
    ['/accounts/:account_id/workers/scripts/:script_name/content/v2', 'worker-script-get-content'],
  ] as const) {
    router.add(
      {
        method: 'GET',
        path,
        operationId,
        summary: "A script's main module (raw, with its content type and cf-entrypoint)",
        auth: read,
        params,
        tags,
      },
      async (req) => {
        const { account_id: accountId, script_name: name } = req.params;
        const doc = await requireScript(db, accountId, name);
        const content = await scriptContents.get(db, accountId, name);
        return raw(mainModuleResponse(doc.body, content?.body));
      },
    );
  }

  router.add(
    {
      method: 'DELETE',
      path: '/accounts/:account_id/workers/scripts/:script_name',
      operationId: 'worker-script-delete-worker',
      summary: 'Delete a script',
      auth: edit,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, script_name: name } = req.params;
      await requireScript(db, accountId, name);
      const domains = (await workerDomains.findBy(db, 'service', name)).filter(
        (d) => d.scopeId === accountId,
      );
      await db.transaction().execute(async (tx) => {
        await scripts.delete(tx, accountId, name);
        await scriptContents.delete(tx, accountId, name);
        await scriptSubdomains.delete(tx, accountId, name);
        for (const d of domains) await workerDomains.delete(tx, accountId, d.id);
        await deployer.forget(tx, accountId, name);
      });
      await registry.triggersChanged?.({ kind: 'domains' });
      await registry.triggersChanged?.({ kind: 'subdomains' });
      registry.dropSchedules(accountId, name);
      try {
        await registry.unload(accountId, name);
      } catch (err) {
        if (!(err instanceof RuntimeUnavailable))
          ctx.log.warn({ err, script: name }, 'could not unload a deleted script');
      }
      return { id: name };
    },
  );

  // The script's own fetch handler, reached through the API port (a workers.dev-style address for
  // local use): `/_outpost/accounts/{account_id}/workers/scripts/{script_name}/invoke/<path>`.
  // The caller's API token is checked and not passed on.
  const invokePath = '/_outpost/accounts/:account_id/workers/scripts/:script_name/invoke';
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const) {
    for (const path of [invokePath, `${invokePath}/*`]) {
      router.add(
        {
          method,
          path,
          operationId: `worker-script-invoke-${method.toLowerCase()}${path.endsWith('*') ? '-path' : ''}`,
          summary: "Send a request to a script's fetch handler",
          auth: read,
          bodyType: 'raw',
          params,
          tags,
        },
        async (req) => {
          const { account_id: accountId, script_name: name } = req.params;
          await requireScript(db, accountId, name);
          const url = new URL(req.c.req.url);
          const prefix = `/accounts/${accountId}/workers/scripts/${name}/invoke`;
          const at = url.pathname.indexOf(prefix);
          const rest = at >= 0 ? url.pathname.slice(at + prefix.length) : '/';
          const headers = new Headers(req.c.req.raw.headers);
          for (const h of ['authorization', 'x-auth-email', 'x-auth-key', 'host', 'content-length'])
            headers.delete(h);
          const target = new Request(`https://${name}.workers.dev${rest || '/'}${url.search}`, {
            method,
            headers,
            body:
              method === 'GET' || (req.raw?.length ?? 0) === 0
                ? undefined
                : new Uint8Array(req.raw!),
          });
          try {
            if (!registry.isLive(accountId, name)) await registry.ensureLoaded(accountId, name);
            return raw(await registry.requireHost().fetch(accountId, scriptIdOf(name), target));
          } catch (err) {
            if (err instanceof RuntimeUnavailable) throw ScriptRegistry.unavailable(err);
            throw err;
          }
        },
      );
    }
  }

  const schedulesView = (s: StoredScript) => ({ schedules: s.schedules });

  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/scripts/:script_name/schedules',
      operationId: 'worker-cron-trigger-get-cron-triggers',
      summary: "A script's cron triggers",
      auth: read,
      params,
      tags,
    },
    async (req) =>
      schedulesView((await requireScript(db, req.params.account_id, req.params.script_name)).body),
  );

  router.add(
    {
      method: 'PUT',
      path: '/accounts/:account_id/workers/scripts/:script_name/schedules',
      operationId: 'worker-cron-trigger-update-cron-triggers',
      summary: "Replace a script's cron triggers",
      auth: edit,
      body: ScheduleBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, script_name: name } = req.params;
      const doc = await requireScript(db, accountId, name);
      for (const [i, s] of req.body.entries()) {
        try {
          parseCron(s.cron);
        } catch (err) {
          if (err instanceof CronError) throw bad(`${i}.cron: ${err.message}`);
          throw err;
        }
      }
      const now = clock.now();
      const ts = now.toISOString();
      const before = new Map(doc.body.schedules.map((s) => [s.cron, s]));
      const schedules = req.body.map((s) => ({
        cron: s.cron.trim(),
        created_on: before.get(s.cron.trim())?.created_on ?? ts,
        modified_on: ts,
      }));
      const next = { ...doc.body, schedules };
      await scripts.update(db, doc, next, now);
      registry.armSchedules(accountId, next);
      return schedulesView(next);
    },
  );
  return { parseUpload, checkNamespaces };
}
