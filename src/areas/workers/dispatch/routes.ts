/**
 * Management routes of dispatch namespaces (`/accounts/{account_id}/workers/dispatch/namespaces`),
 * the customer scripts inside them, their tags and static assets, and the asset upload
 * (`/accounts/{account_id}/workers/assets/upload`).
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { AreaContext } from '../../../core/area.ts';
import { requireAccount } from '../../../core/accounts.ts';
import { apiError } from '../../../core/errors.ts';
import { hexId } from '../../../core/ids.ts';
import { assertJsonDepth } from '../../../core/json.ts';
import { boundaryOf, parseMultipart, type MultipartForm } from '../../../core/multipart.ts';
import { pageOf, pageQuery } from '../../../core/pagination.ts';
import { raw } from '../../../core/router.ts';
import type { BlobStore } from '../../../core/storage/blobs.ts';
import { qString } from '../../../core/validate.ts';
import {
  bindingExtensionService,
  RuntimeUnavailable,
  ScriptRegistry,
  type BindingExtension,
} from '../registry.ts';
import {
  checkBindings,
  mainModuleResponse,
  mergeBindings,
  scriptView,
  WORKERS_PERMISSION,
} from '../routes.ts';
import { applyBulkSecrets, BulkSecretsBody } from '../secrets.ts';
import type { StoredBinding, StoredContent } from '../store.ts';
import type { UploadParser } from '../version-routes.ts';
import {
  blobKey,
  buckets,
  checkConfig,
  checkManifest,
  HASH,
  MAX_ASSET_BYTES,
  SESSION_TTL_S,
  type Tokens,
} from './assets.ts';
import type { DispatchRuntime } from './runtime.ts';
import {
  dispatchContents,
  dispatchScripts,
  namespaces,
  scopeOf,
  uploadSessions,
  type DispatchScript,
  type NamespaceRecord,
  type ScriptAssets,
} from './store.ts';

const read = { permission: WORKERS_PERMISSION, level: 'read' } as const;
const edit = { permission: WORKERS_PERMISSION, level: 'edit' } as const;
const tags = ['workers-for-platforms'];
const nsParams = { namespace: 'any' } as const;
const params = { namespace: 'any', script_name: 'any' } as const;
const NAME = /^[a-z0-9_][a-z0-9_-]{0,62}$/;
const TAG = /^[^,\s:]{1,64}$/;
const MAX_TAGS = 8;
const BASE = '/accounts/:account_id/workers/dispatch/namespaces';

const bad = (message: string) => apiError('worker_invalid', message);

function checkName(what: string, name: string): void {
  if (!NAME.test(name))
    throw bad(
      `${what} name ${JSON.stringify(name)} is invalid: use 1 to 63 lowercase letters, digits, dashes and underscores, not starting with a dash`,
    );
}

function checkTags(list: unknown): string[] {
  if (!Array.isArray(list)) throw bad('tags must be an array of strings');
  const out = new Set<string>();
  for (const [i, t] of list.entries()) {
    if (typeof t !== 'string' || !TAG.test(t))
      throw bad(`tags.${i}: a tag is 1 to 64 characters without commas, colons or spaces`);
    out.add(t);
  }
  if (out.size > MAX_TAGS) throw bad(`a script has at most ${MAX_TAGS} tags`);
  return [...out];
}

function view(s: DispatchScript) {
  return {
    ...scriptView(s),
    has_assets: !!s.assets,
    // An assets-only script has no code.
    has_modules: s.main_module !== '',
  };
}

export function mountDispatchRoutes(
  ctx: AreaContext,
  parser: UploadParser,
  runtime: DispatchRuntime,
  blobs: BlobStore,
  tokens: Tokens,
): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;

  async function requireNamespace(accountId: string, name: string) {
    await requireAccount(db, accountId);
    const doc = await namespaces.get(db, accountId, name);
    if (!doc) throw apiError('dispatch_namespace_not_found', name);
    return doc.body;
  }

  /** The customer script a route's `{account_id}/…/{namespace}/scripts/{script_name}` names. */
  const scriptOf = (p: Record<string, string>) => requireScript(p.account_id, p.namespace, p.script_name);

  async function requireScript(accountId: string, nsName: string, name: string) {
    const ns = await requireNamespace(accountId, nsName);
    const doc = await dispatchScripts.get(db, scopeOf(accountId, ns.namespace_id), name);
    if (!doc) throw apiError('dispatch_script_not_found', nsName, name);
    return { ns, doc };
  }

  async function nsView(accountId: string, ns: NamespaceRecord) {
    const { total } = await dispatchScripts.list(db, scopeOf(accountId, ns.namespace_id), {
      limit: 1,
    });
    return {
      ...ns,
      created_by: accountId,
      modified_by: accountId,
      script_count: total,
      trusted_workers: false,
    };
  }

  const runtimeCall = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof RuntimeUnavailable) throw ScriptRegistry.unavailable(err);
      throw err;
    }
  };

  async function removeScript(accountId: string, ns: NamespaceRecord, name: string) {
    const scope = scopeOf(accountId, ns.namespace_id);
    await db.transaction().execute(async (tx) => {
      await dispatchScripts.delete(tx, scope, name);
      await dispatchContents.delete(tx, scope, name);
    });
    await runtime.unload(ns.namespace_id, name).catch((err: unknown) => {
      ctx.log.warn({ err, script: name }, 'could not unload a deleted customer script');
    });
  }

  // ------------------------------------------------------------------ namespaces

  router.add(
    {
      method: 'POST',
      path: BASE,
      operationId: 'namespace-worker-create',
      summary: 'Create a dispatch namespace',
      auth: edit,
      body: z.object({ name: z.string().optional() }).passthrough(),
      tags,
    },
    async (req) => {
      const accountId = req.params.account_id;
      await requireAccount(db, accountId);
      const name = req.body.name ?? `namespace-${hexId().slice(0, 12)}`;
      checkName('Namespace', name);
      if (await namespaces.get(db, accountId, name))
        throw apiError('dispatch_namespace_exists', name);
      const ts = clock.now().toISOString();
      const ns: NamespaceRecord = {
        namespace_id: hexId(),
        namespace_name: name,
        created_on: ts,
        modified_on: ts,
      };
      try {
        await namespaces.insert(db, accountId, name, ns, clock.now());
      } catch {
        throw apiError('dispatch_namespace_exists', name);
      }
      return nsView(accountId, ns);
    },
  );

  router.add(
    {
      method: 'GET',
      path: BASE,
      operationId: 'namespace-worker-list',
      summary: 'List dispatch namespaces',
      auth: read,
      tags,
    },
    async (req) => {
      await requireAccount(db, req.params.account_id);
      const all = await namespaces.all(db, req.params.account_id);
      return Promise.all(all.map((d) => nsView(req.params.account_id, d.body)));
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace`,
      operationId: 'namespace-worker-get-namespace',
      summary: 'A dispatch namespace',
      auth: read,
      params: nsParams,
      tags,
    },
    async (req) =>
      nsView(
        req.params.account_id,
        await requireNamespace(req.params.account_id, req.params.namespace),
      ),
  );

  router.add(
    {
      method: 'DELETE',
      path: `${BASE}/:namespace`,
      operationId: 'namespace-worker-delete-namespace',
      summary: 'Delete a dispatch namespace and every script in it',
      auth: edit,
      params: nsParams,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace } = req.params;
      const ns = await requireNamespace(accountId, namespace);
      const scope = scopeOf(accountId, ns.namespace_id);
      const names = (await dispatchScripts.all(db, scope)).map((d) => d.id);
      await db.transaction().execute(async (tx) => {
        await dispatchScripts.deleteScope(tx, scope);
        await dispatchContents.deleteScope(tx, scope);
        await namespaces.delete(tx, accountId, namespace);
      });
      runtime.forgetNamespace(accountId, namespace);
      for (const n of names) await runtime.unload(ns.namespace_id, n).catch(() => {});
      await blobs.deletePrefix(`dispatch-assets/${ns.namespace_id}`).catch(() => {});
      return { id: ns.namespace_id };
    },
  );

  // ------------------------------------------------------------------ scripts

  /** Splits the `assets` bindings and settings off the metadata the workers parser reads. */
  function assetsOf(form: MultipartForm) {
    const meta = form.metadata;
    const all = Array.isArray(meta.bindings) ? (meta.bindings as StoredBinding[]) : undefined;
    const assetBindings = (all ?? []).filter((b) => b && b.type === 'assets');
    if (assetBindings.length > 1) throw bad('metadata.bindings: at most one assets binding');
    const binding = assetBindings[0]?.name;
    if (
      binding !== undefined &&
      (typeof binding !== 'string' || !/^[A-Za-z_$][\w$]*$/.test(binding))
    )
      throw bad(
        'metadata.bindings: the assets binding needs a name that is a JavaScript identifier',
      );
    const rest = all?.filter((b) => !(b && b.type === 'assets'));
    const stripped: MultipartForm = {
      ...form,
      metadata: { ...meta, ...(all ? { bindings: rest } : {}) },
    };
    const assets = meta.assets as { jwt?: unknown; config?: unknown } | undefined;
    if (
      assets !== undefined &&
      (typeof assets !== 'object' || assets === null || Array.isArray(assets))
    )
      throw bad('metadata.assets must be an object {jwt, config}');
    const keep = meta.keep_assets;
    if (keep !== undefined && typeof keep !== 'boolean')
      throw bad('metadata.keep_assets must be a boolean');
    return { stripped, binding, assets, keep: keep === true };
  }

  async function resolveAssets(
    accountId: string,
    ns: NamespaceRecord,
    name: string,
    spec: ReturnType<typeof assetsOf>,
    prev: DispatchScript | undefined,
  ): Promise<ScriptAssets | undefined> {
    const config = spec.assets?.config !== undefined ? checkConfig(spec.assets.config) : undefined;
    const jwt = spec.assets?.jwt;
    let out: ScriptAssets | undefined;
    if (jwt !== undefined) {
      if (typeof jwt !== 'string') throw bad('metadata.assets.jwt must be a string');
      const claims = tokens.verify(jwt, Math.floor(clock.now().getTime() / 1000));
      const session = await uploadSessions.get(db, accountId, claims.sid);
      if (claims.acct !== accountId || !session)
        throw apiError('assets_token_invalid', 'the asset token belongs to another account');
      if (claims.kind !== 'complete')
        throw bad(
          'metadata.assets.jwt is an upload session token, not a completion token: upload every bucket first',
        );
      if (session.body.namespace_id !== ns.namespace_id || session.body.script_name !== name)
        throw bad(
          `metadata.assets.jwt was issued for script ${session.body.script_name} in another upload session; it does not match this script's manifest`,
        );
      for (const [p, e] of Object.entries(session.body.manifest)) {
        if ((await blobs.size(blobKey(ns.namespace_id, e.hash))) === undefined)
          throw bad(`metadata.assets.jwt: the content of ${p} (${e.hash}) was never uploaded`);
      }
      out = { manifest: session.body.manifest, config: config ?? checkConfig(undefined) };
    } else if (spec.keep && prev?.assets) {
      out = { ...prev.assets, config: config ?? prev.assets.config };
    }
    if (spec.binding !== undefined) {
      if (!out)
        throw bad(
          'metadata.bindings: an assets binding needs assets (metadata.assets.jwt or keep_assets)',
        );
      out.binding = spec.binding;
    } else if (out) delete out.binding;
    return out;
  }

  /**
   * Whether an upload is of an assets-only script: no main module, no module parts, and assets
   * (a completion token, or `keep_assets` over a script that has them).
   */
  function assetsOnly(
    form: MultipartForm,
    spec: ReturnType<typeof assetsOf>,
    prev: DispatchScript | undefined,
  ): boolean {
    const m = form.metadata;
    if (m.main_module !== undefined || m.body_part !== undefined) return false;
    if (form.files.some((f) => f.field !== 'metadata')) return false;
    return spec.assets?.jwt !== undefined || (spec.keep && !!prev?.assets);
  }

  /** The record of an assets-only script: no code, no bindings; its assets are added after. */
  function assetsOnlyScript(
    name: string,
    meta: Record<string, unknown>,
    prev: DispatchScript | undefined,
  ): { script: DispatchScript; content: StoredContent } {
    if (Array.isArray(meta.bindings) && meta.bindings.some((b: { type?: unknown } | null) => !(b && b.type === "assets")))
      throw bad(
        'metadata.bindings: an assets-only script (no main_module) has no code to bind; upload a module with metadata.main_module to use bindings',
      );
    if (Array.isArray(meta.bindings) && meta.bindings.length > 0)
      throw bad(
        'metadata.bindings: an assets binding is read by a script; an assets-only script (no main_module) serves its assets itself',
      );
    const cfg = (meta.assets as { config?: { run_worker_first?: unknown } } | undefined)?.config;
    if (cfg && cfg.run_worker_first !== undefined && cfg.run_worker_first !== false)
      throw bad(
        'metadata.assets.config.run_worker_first needs a script to run: upload a module with metadata.main_module',
      );
    const date = meta.compatibility_date;
    if (date !== undefined && (typeof date !== 'string' || !/^\d{4}-\d{2}-\d{2}$/.test(date)))
      throw bad('metadata.compatibility_date: expected YYYY-MM-DD');
    const flags = meta.compatibility_flags;
    if (flags !== undefined && !(Array.isArray(flags) && flags.every((f) => typeof f === 'string')))
      throw bad('metadata.compatibility_flags: expected an array of strings');
    const ts = clock.now().toISOString();
    const script: DispatchScript = {
      id: name,
      etag: '',
      main_module: '',
      compatibility_date: (date as string | undefined) ?? null,
      compatibility_flags: (flags as string[] | undefined) ?? [],
      bindings: [],
      handlers: [],
      tags: meta.tags !== undefined ? checkTags(meta.tags) : (prev?.tags ?? []),
      schedules: [],
      settings: prev?.settings ?? {},
      created_on: prev?.created_on ?? ts,
      modified_on: ts,
    };
    return { script, content: { modules: [] } };
  }

  async function upload(
    accountId: string,
    nsName: string,
    name: string,
    form: MultipartForm,
    codeOnly: boolean,
  ) {
    await requireAccount(db, accountId);
    checkName('Script', name);
    const ns = await requireNamespace(accountId, nsName);
    const scope = scopeOf(accountId, ns.namespace_id);
    const prev = await dispatchScripts.get(db, scope, name);
    if (codeOnly) {
      if (!prev) throw apiError('dispatch_script_not_found', nsName, name);
      form = {
        ...form,
        metadata: {
          ...form.metadata,
          bindings: prev.body.bindings,
          compatibility_date: prev.body.compatibility_date ?? undefined,
          compatibility_flags: prev.body.compatibility_flags,
          tags: prev.body.tags,
          keep_assets: true,
          ...(prev.body.assets?.binding
            ? {
                bindings: [
                  ...prev.body.bindings,
                  { type: 'assets', name: prev.body.assets.binding },
                ],
              }
            : {}),
        },
      };
    }
    const spec = assetsOf(form);
    const { script, content } = assetsOnly(form, spec, prev?.body)
      ? assetsOnlyScript(name, form.metadata, prev?.body)
      : await parser.parseUpload(accountId, name, spec.stripped, prev?.body);
    if (script.tags.length) script.tags = checkTags(script.tags);
    const assets = await resolveAssets(accountId, ns, name, spec, prev?.body);
    const stored: DispatchScript = { ...script, ...(assets ? { assets } : {}) };
    if (assets)
      stored.etag = createHash('sha256')
        .update(script.etag)
        .update(JSON.stringify(assets))
        .digest('hex');
    await runtimeCall(() => runtime.deploy(accountId, ns, stored, content));
    await db.transaction().execute(async (tx) => {
      const now = clock.now();
      if (prev) await dispatchScripts.update(tx, prev, stored, now);
      else await dispatchScripts.insert(tx, scope, name, stored, now);
      const c = await dispatchContents.get(tx, scope, name);
      if (c) await dispatchContents.update(tx, c, content, now);
      else await dispatchContents.insert(tx, scope, name, content, now);
    });
    return view(stored);
  }

  /**
   * The form of a script upload: multipart (either form), or the JSON `{metadata}` the official
   * client sends when a script has no files (an assets-only script), whatever its content type.
   */
  function uploadForm(contentType: string | undefined, body: Buffer): MultipartForm {
    if (boundaryOf(contentType, body)) return parseMultipart(contentType, body);
    if (!body.toString('utf8', 0, 64).trimStart().startsWith('{'))
      return parseMultipart(contentType, body);
    let value: unknown;
    try {
      assertJsonDepth(body, 'the request body');
      value = JSON.parse(body.toString('utf8'));
    } catch (err) {
      if (err instanceof SyntaxError) throw apiError('invalid_json', err.message);
      throw err;
    }
    const meta = (value as { metadata?: unknown } | null)?.metadata;
    if (!meta || typeof meta !== 'object' || Array.isArray(meta))
      throw bad(
        'expected multipart/form-data, or JSON {"metadata": {...}} for a script without module parts',
      );
    return { metadata: meta as Record<string, unknown>, fields: {}, files: [] };
  }

  router.add(
    {
      method: 'PUT',
      path: `${BASE}/:namespace/scripts/:script_name`,
      operationId: 'namespace-worker-script-upload-worker-module',
      summary: 'Upload a customer script (multipart: metadata + modules; JSON {metadata} for assets only)',
      auth: edit,
      bodyType: 'raw',
      params,
      tags,
    },
    async (req) =>
      upload(
        req.params.account_id,
        req.params.namespace,
        req.params.script_name,
        uploadForm(req.c.req.header('content-type'), req.raw ?? Buffer.alloc(0)),
        false,
      ),
  );

  router.add(
    {
      method: 'PUT',
      path: `${BASE}/:namespace/scripts/:script_name/content`,
      operationId: 'namespace-worker-put-script-content',
      summary: "Replace a customer script's code, keeping its settings",
      auth: edit,
      bodyType: 'multipart',
      params,
      tags,
    },
    async (req) =>
      upload(req.params.account_id, req.params.namespace, req.params.script_name, req.form!, true),
  );

  const ListQuery = z.object({
    ...pageQuery({ perPage: 100, min: 1, max: 100 }),
    tags: qString().optional(),
  });

  /** `tag:yes,other:no` → tags a script must carry and must not carry. */
  function tagFilter(text: string) {
    const yes: string[] = [];
    const no: string[] = [];
    for (const part of text.split(',')) {
      const m = /^([^,:\s]{1,64}):(yes|no)$/.exec(part.trim());
      if (!m)
        throw bad(
          `tags: expected <tag>:yes or <tag>:no (comma-separated), got ${JSON.stringify(part)}`,
        );
      (m[2] === 'yes' ? yes : no).push(m[1]);
    }
    return (s: DispatchScript) =>
      yes.every((t) => s.tags.includes(t)) && !no.some((t) => s.tags.includes(t));
  }

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts`,
      operationId: 'namespace-worker-list-scripts',
      summary: 'List the scripts of a namespace (page, per_page ≤ 100, tags filter)',
      auth: read,
      query: ListQuery,
      params: nsParams,
      tags,
    },
    async (req) => {
      const ns = await requireNamespace(req.params.account_id, req.params.namespace);
      let all = (await dispatchScripts.all(db, scopeOf(req.params.account_id, ns.namespace_id)))
        .map((d) => d.body)
        .sort((a, b) => a.id.localeCompare(b.id));
      if (req.query.tags) all = all.filter(tagFilter(req.query.tags));
      return pageOf(all.map(view), req.query);
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${BASE}/:namespace/scripts`,
      operationId: 'namespace-worker-delete-scripts-by-tag',
      summary: 'Delete every script carrying a tag (tags=<tag>:yes)',
      auth: edit,
      query: z.object({ tags: qString().optional() }),
      params: nsParams,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace } = req.params;
      const ns = await requireNamespace(accountId, namespace);
      if (!req.query.tags) throw bad('tags is required, e.g. ?tags=customer-42:yes');
      const match = tagFilter(req.query.tags);
      const victims = (await dispatchScripts.all(db, scopeOf(accountId, ns.namespace_id)))
        .map((d) => d.body)
        .filter(match);
      for (const s of victims) await removeScript(accountId, ns, s.id);
      return {
        deleted: victims.map((s) => ({ id: s.id })),
        deleted_count: victims.length,
        has_more: false,
      };
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts/:script_name`,
      operationId: 'namespace-worker-script-worker-details',
      summary: 'A customer script',
      auth: read,
      params,
      tags,
    },
    async (req) => {
      const { doc } = await scriptOf(req.params);
      return {
        created_on: doc.body.created_on,
        modified_on: doc.body.modified_on,
        dispatch_namespace: req.params.namespace,
        script: view(doc.body),
      };
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${BASE}/:namespace/scripts/:script_name`,
      operationId: 'namespace-worker-script-delete-worker',
      summary: 'Delete a customer script',
      auth: edit,
      query: z.object({ force: qString().optional() }),
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace, script_name: name } = req.params;
      const { ns } = await requireScript(accountId, namespace, name);
      await removeScript(accountId, ns, name);
      return { id: name };
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts/:script_name/content`,
      operationId: 'namespace-worker-get-script-content',
      summary: "A customer script's main module",
      auth: read,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace, script_name: name } = req.params;
      const { ns, doc } = await requireScript(accountId, namespace, name);
      if (doc.body.main_module === '')
        throw bad(`script ${name} is assets-only: it has no code (its assets are served as they are)`);
      const content = await dispatchContents.get(db, scopeOf(accountId, ns.namespace_id), name);
      return raw(mainModuleResponse(doc.body, content?.body));
    },
  );

  const bindingsView = (s: DispatchScript) => [
    ...s.bindings.map((b) => (b.type === 'secret_text' ? { type: b.type, name: b.name } : b)),
    ...(s.assets?.binding ? [{ type: 'assets', name: s.assets.binding }] : []),
  ];

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts/:script_name/bindings`,
      operationId: 'namespace-worker-get-script-bindings',
      summary: "A customer script's bindings (secrets without their values)",
      auth: read,
      params,
      tags,
    },
    async (req) =>
      bindingsView(
        (await scriptOf(req.params))
          .doc.body,
      ),
  );

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts/:script_name/settings`,
      operationId: 'namespace-worker-get-script-settings',
      summary: "A customer script's settings",
      auth: read,
      params,
      tags,
    },
    async (req) =>
      settingsView(
        (await scriptOf(req.params))
          .doc.body,
      ),
  );

  function settingsView(s: DispatchScript) {
    return {
      bindings: bindingsView(s),
      compatibility_date: s.compatibility_date ?? undefined,
      compatibility_flags: s.compatibility_flags,
      logpush: s.settings?.logpush ?? false,
      observability: s.settings?.observability ?? { enabled: false },
      tags: s.tags,
      tail_consumers: s.settings?.tail_consumers ?? [],
      usage_model: 'standard',
      placement: {},
      ...(s.assets ? { assets: { config: s.assets.config } } : {}),
    };
  }

  /** The body of `PATCH …/settings`: every field optional; absent ones keep their value. */
  const SettingsPatch = z
    .object({
      logpush: z.boolean().optional(),
      observability: z.record(z.string(), z.unknown()).optional(),
      tags: z.array(z.string()).optional().nullable(),
      tail_consumers: z.array(z.unknown()).optional().nullable(),
      bindings: z.array(z.object({ type: z.string(), name: z.string() }).passthrough()).optional(),
      compatibility_date: z
        .string()
        .regex(/^\d{4}-\d{2}-\d{2}$/, 'expected YYYY-MM-DD')
        .optional(),
      compatibility_flags: z.array(z.string()).optional(),
      keep_bindings: z.array(z.string()).optional(),
      // What GET answers, so a read-modify-write round trip is accepted; this server has one
      // usage model and no placement.
      usage_model: z.literal('standard').optional(),
      placement: z.object({}).strict().optional(),
    })
    .strict();

  /**
   * Reads the settings of a PATCH: a multipart `settings` JSON part (what the platform's tools
   * send), the official client's `settings[...]` bracket fields, or a JSON body.
   */
  function settingsOf(contentType: string, body: Buffer) {
    let value: unknown;
    if (/^multipart\//i.test(contentType))
      value = parseMultipart(contentType, body, 'settings').metadata;
    else {
      try {
        value = JSON.parse(body.toString('utf8') || '{}');
      } catch (err) {
        throw apiError('invalid_json', (err as Error).message);
      }
      if (value && typeof value === 'object' && 'settings' in value)
        value = (value as { settings: unknown }).settings;
    }
    const parsed = SettingsPatch.safeParse(value);
    if (!parsed.success)
      throw bad(
        parsed.error.issues
          .map((i) => `settings${i.path.length ? '.' + i.path.join('.') : ''}: ${i.message}`)
          .join('; '),
      );
    return parsed.data;
  }

  router.add(
    {
      method: 'PATCH',
      path: `${BASE}/:namespace/scripts/:script_name/settings`,
      operationId: 'namespace-worker-patch-script-settings',
      summary:
        "Change a customer script's settings or bindings without uploading its code (multipart `settings` part or JSON)",
      auth: edit,
      bodyType: 'raw',
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace, script_name: name } = req.params;
      const { ns, doc } = await requireScript(accountId, namespace, name);
      const patch = settingsOf(req.c.req.header('content-type') ?? '', req.raw ?? Buffer.alloc(0));
      const prev = doc.body;
      const settings = { ...(prev.settings ?? {}) };
      if (patch.logpush !== undefined) settings.logpush = patch.logpush;
      if (patch.observability !== undefined) settings.observability = patch.observability;
      if (patch.tail_consumers !== undefined) settings.tail_consumers = patch.tail_consumers ?? [];
      let next: DispatchScript = {
        ...prev,
        settings,
        tags:
          patch.tags === undefined ? prev.tags : patch.tags === null ? [] : checkTags(patch.tags),
        modified_on: clock.now().toISOString(),
      };
      const codeChange =
        patch.bindings !== undefined ||
        patch.compatibility_date !== undefined ||
        patch.compatibility_flags !== undefined;
      if (codeChange) {
        if (patch.bindings !== undefined) {
          // The assets binding is the script's, not a runtime binding: it renames or drops
          // the binding to the assets the script already has.
          const assetBindings = patch.bindings.filter((b) => b.type === 'assets');
          if (assetBindings.length > 1) throw bad('settings.bindings: at most one assets binding');
          const assetsName = assetBindings[0]?.name;
          if (assetsName !== undefined && !prev.assets)
            throw bad(
              'settings.bindings: an assets binding needs assets; upload them with the script',
            );
          if (assetsName !== undefined && !/^[A-Za-z_$][\w$]*$/.test(assetsName))
            throw bad(
              'settings.bindings: the assets binding needs a name that is a JavaScript identifier',
            );
          const rest = patch.bindings.filter((b) => b.type !== 'assets');
          const bindings = mergeBindings(
            checkBindings(rest, (t) =>
              ctx.services.optional<BindingExtension>(bindingExtensionService(t)),
            ),
            prev.bindings,
            patch.keep_bindings,
          );
          await parser.checkNamespaces(accountId, bindings);
          next = { ...next, bindings };
          if (prev.assets) {
            const assets = { ...prev.assets };
            if (assetsName !== undefined) assets.binding = assetsName;
            else delete assets.binding;
            next.assets = assets;
          }
        }
        next = {
          ...next,
          compatibility_date: patch.compatibility_date ?? next.compatibility_date,
          compatibility_flags: patch.compatibility_flags ?? next.compatibility_flags,
        };
        next.etag = createHash('sha256')
          .update(prev.etag)
          .update(
            JSON.stringify([
              next.bindings,
              next.assets?.binding,
              next.compatibility_date,
              next.compatibility_flags,
            ]),
          )
          .digest('hex');
        const content = await dispatchContents.get(db, scopeOf(accountId, ns.namespace_id), name);
        if (!content) throw apiError('dispatch_script_not_found', namespace, name);
        // Loaded before stored, as an upload: settings a script cannot start with are refused
        // and the running version stays.
        await runtimeCall(() => runtime.deploy(accountId, ns, next, content.body));
      }
      await dispatchScripts.update(db, doc, next, clock.now());
      return settingsView(next);
    },
  );

  // ------------------------------------------------------------------ secrets

  /** Replaces a script's bindings and reloads it (secrets change without a new upload). */
  async function rebind(
    accountId: string,
    nsName: string,
    name: string,
    next: (b: StoredBinding[]) => StoredBinding[],
  ) {
    const { ns, doc } = await requireScript(accountId, nsName, name);
    const scope = scopeOf(accountId, ns.namespace_id);
    const content = await dispatchContents.get(db, scope, name);
    if (!content) throw apiError('dispatch_script_not_found', nsName, name);
    const bindings = next(doc.body.bindings);
    const body: DispatchScript = {
      ...doc.body,
      bindings,
      etag: createHash('sha256')
        .update(doc.body.etag)
        .update(JSON.stringify(bindings))
        .digest('hex'),
      modified_on: clock.now().toISOString(),
    };
    await runtimeCall(() => runtime.deploy(accountId, ns, body, content.body));
    await dispatchScripts.update(db, doc, body, clock.now());
    return body;
  }

  const SecretBody = z.object({
    name: z.string().regex(/^[A-Za-z_$][A-Za-z0-9_$]*$/, 'must be a JavaScript identifier'),
    text: z.string().max(5120),
    type: z.literal('secret_text').default('secret_text'),
  });
  const secretView = (b: StoredBinding) => ({ name: b.name, type: 'secret_text' });

  router.add(
    {
      method: 'PUT',
      path: `${BASE}/:namespace/scripts/:script_name/secrets`,
      operationId: 'namespace-worker-put-script-secrets',
      summary: 'Add or replace a secret of a customer script',
      auth: edit,
      body: SecretBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace, script_name: name } = req.params;
      const { name: secret, text } = req.body;
      if (secret.startsWith('__OUTPOST')) throw bad('names starting with __OUTPOST are reserved');
      await rebind(accountId, namespace, name, (bs) => {
        const clash = bs.find((b) => b.name === secret && b.type !== 'secret_text');
        if (clash) throw bad(`${secret} is already bound as ${clash.type}`);
        return [
          ...bs.filter((b) => b.name !== secret),
          { type: 'secret_text', name: secret, text },
        ];
      });
      return { name: secret, type: 'secret_text' };
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts/:script_name/secrets`,
      operationId: 'namespace-worker-list-script-secrets',
      summary: 'The secrets of a customer script (names only)',
      auth: read,
      params,
      tags,
    },
    async (req) =>
      (
        await scriptOf(req.params)
      ).doc.body.bindings
        .filter((b) => b.type === 'secret_text')
        .map(secretView),
  );

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts/:script_name/secrets/:secret_name`,
      operationId: 'namespace-worker-get-script-secret',
      summary: 'One secret of a customer script (name only)',
      auth: read,
      params: { ...params, secret_name: 'any' },
      tags,
    },
    async (req) => {
      const { doc } = await scriptOf(req.params);
      const b = doc.body.bindings.find(
        (x) => x.type === 'secret_text' && x.name === req.params.secret_name,
      );
      if (!b) throw apiError('worker_secret_not_found', req.params.secret_name);
      return secretView(b);
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${BASE}/:namespace/scripts/:script_name/secrets/:secret_name`,
      operationId: 'namespace-worker-delete-script-secret',
      summary: 'Delete a secret of a customer script',
      auth: edit,
      params: { ...params, secret_name: 'any' },
      query: z.object({ url_encoded: qString().optional() }),
      tags,
    },
    async (req) => {
      const {
        account_id: accountId,
        namespace,
        script_name: name,
        secret_name: secret,
      } = req.params;
      await rebind(accountId, namespace, name, (bs) => {
        if (!bs.some((b) => b.type === 'secret_text' && b.name === secret))
          throw apiError('worker_secret_not_found', secret);
        return bs.filter((b) => !(b.type === 'secret_text' && b.name === secret));
      });
      return null;
    },
  );

  router.add(
    {
      method: 'PATCH',
      path: `${BASE}/:namespace/scripts/:script_name/secrets-bulk`,
      operationId: 'namespace-worker-bulk-update-script-secrets',
      summary: 'Set or delete several secrets of a customer script at once (all or nothing)',
      auth: edit,
      body: BulkSecretsBody,
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace, script_name: name } = req.params;
      let result: ReturnType<typeof applyBulkSecrets>['result'] = {};
      // Like the single-secret PUT: the script is reloaded with every new value before the
      // record changes, so a failure leaves every secret as it was.
      await rebind(accountId, namespace, name, (bs) => {
        const out = applyBulkSecrets(bs, req.body);
        result = out.result;
        return out.bindings;
      });
      return result;
    },
  );

  // ------------------------------------------------------------------ tags

  async function setTags(
    accountId: string,
    nsName: string,
    name: string,
    next: (t: string[]) => string[],
  ) {
    const { doc } = await requireScript(accountId, nsName, name);
    const tagList = checkTags(next(doc.body.tags));
    await dispatchScripts.update(db, doc, { ...doc.body, tags: tagList }, clock.now());
    return tagList;
  }

  router.add(
    {
      method: 'GET',
      path: `${BASE}/:namespace/scripts/:script_name/tags`,
      operationId: 'namespace-worker-get-script-tags',
      summary: "A customer script's tags",
      auth: read,
      params,
      tags,
    },
    async (req) =>
      (await scriptOf(req.params)).doc
        .body.tags,
  );

  router.add(
    {
      method: 'PUT',
      path: `${BASE}/:namespace/scripts/:script_name/tags`,
      operationId: 'namespace-worker-put-script-tags',
      summary: "Replace a customer script's tags",
      auth: edit,
      body: z.array(z.string()),
      params,
      tags,
    },
    async (req) =>
      setTags(req.params.account_id, req.params.namespace, req.params.script_name, () => req.body),
  );

  router.add(
    {
      method: 'PUT',
      path: `${BASE}/:namespace/scripts/:script_name/tags/:tag`,
      operationId: 'namespace-worker-put-script-tag',
      summary: 'Add a tag to a customer script',
      auth: edit,
      params: { ...params, tag: 'any' },
      tags,
    },
    async (req) => {
      await setTags(req.params.account_id, req.params.namespace, req.params.script_name, (t) => [
        ...t,
        req.params.tag,
      ]);
      return null;
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${BASE}/:namespace/scripts/:script_name/tags/:tag`,
      operationId: 'namespace-worker-delete-script-tag',
      summary: 'Remove a tag from a customer script',
      auth: edit,
      params: { ...params, tag: 'any' },
      tags,
    },
    async (req) => {
      await setTags(req.params.account_id, req.params.namespace, req.params.script_name, (t) =>
        t.filter((x) => x !== req.params.tag),
      );
      return null;
    },
  );

  // ------------------------------------------------------------------ static assets

  router.add(
    {
      method: 'POST',
      path: `${BASE}/:namespace/scripts/:script_name/assets-upload-session`,
      operationId: 'namespace-worker-script-update-create-assets-upload-session',
      summary: 'Start an asset upload: answers the buckets of hashes still missing and a token',
      auth: edit,
      body: z.object({ manifest: z.unknown() }).passthrough(),
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, namespace, script_name: name } = req.params;
      checkName('Script', name);
      const ns = await requireNamespace(accountId, namespace);
      const manifest = checkManifest(req.body.manifest);
      const hashes = [...new Set(Object.values(manifest).map((e) => e.hash))];
      const missing: string[] = [];
      for (const h of hashes)
        if ((await blobs.size(blobKey(ns.namespace_id, h))) === undefined) missing.push(h);
      const now = clock.now();
      const exp = Math.floor(now.getTime() / 1000) + SESSION_TTL_S;
      // Expired sessions of this account go when a new one starts.
      for (const d of await uploadSessions.all(db, accountId))
        if (d.body.expires_at < exp - SESSION_TTL_S)
          await uploadSessions.delete(db, accountId, d.id);
      const sid = hexId();
      await uploadSessions.insert(
        db,
        accountId,
        sid,
        {
          account_id: accountId,
          namespace_id: ns.namespace_id,
          script_name: name,
          manifest,
          missing,
          expires_at: exp,
        },
        now,
      );
      // Nothing to upload: the session token is already the completion token.
      const jwt = tokens.sign({
        kind: missing.length ? 'upload' : 'complete',
        sid,
        acct: accountId,
        exp,
      });
      return { jwt, buckets: buckets(missing) };
    },
  );

  router.add(
    {
      method: 'POST',
      path: '/accounts/:account_id/workers/assets/upload',
      operationId: 'worker-assets-upload',
      summary: 'Upload asset contents (multipart fields named by hash) with the session token',
      auth: 'custom',
      authenticate: async (c, p) => {
        const header = c.req.header('authorization') ?? '';
        const m = /^Bearer\s+(\S+)$/i.exec(header);
        if (!m)
          throw apiError(
            'assets_token_invalid',
            'send the upload session token as Authorization: Bearer <jwt>',
          );
        const claims = tokens.verify(m[1], Math.floor(clock.now().getTime() / 1000));
        if (claims.acct !== p.account_id)
          throw apiError('assets_token_invalid', 'the upload token belongs to another account');
        if (claims.kind !== 'upload')
          throw apiError(
            'assets_token_invalid',
            'this is a completion token; uploads need the session token',
          );
        return claims;
      },
      query: z.object({ base64: qString().optional() }),
      bodyType: 'multipart',
      tags,
    },
    async (req) => {
      const claims = req.authenticated as { sid: string; acct: string; exp: number };
      const session = await uploadSessions.get(db, claims.acct, claims.sid);
      if (!session) throw apiError('assets_token_invalid', 'the upload session no longer exists');
      const base64 = req.query.base64 === 'true';
      const wanted = new Map<string, number>();
      for (const e of Object.values(session.body.manifest)) wanted.set(e.hash, e.size);
      const parts: [string, Buffer][] = [];
      for (const f of req.form!.files) parts.push([f.field, f.data]);
      for (const [k, v] of Object.entries(req.form!.fields))
        for (const s of Array.isArray(v) ? v : [v]) parts.push([k, Buffer.from(s, 'utf8')]);
      if (parts.length === 0) throw bad('no files: send multipart fields named by content hash');
      const decoded: [string, Buffer][] = [];
      for (const [hash, data] of parts) {
        if (!HASH.test(hash))
          throw bad(`field ${JSON.stringify(hash)}: expected a 32-hex content hash`);
        if (!wanted.has(hash)) throw bad(`hash ${hash} is not in this upload session's manifest`);
        const bytes = base64 ? Buffer.from(data.toString('utf8'), 'base64') : data;
        if (bytes.length !== wanted.get(hash))
          throw bad(
            `hash ${hash}: ${bytes.length} bytes arrived; the manifest says ${wanted.get(hash)}`,
          );
        if (bytes.length > MAX_ASSET_BYTES)
          throw bad(`hash ${hash}: larger than ${MAX_ASSET_BYTES} bytes`);
        decoded.push([hash, bytes]);
      }
      for (const [hash, bytes] of decoded)
        await blobs.put(blobKey(session.body.namespace_id, hash), new Uint8Array(bytes));
      for (const h of session.body.missing) {
        if ((await blobs.size(blobKey(session.body.namespace_id, h))) === undefined) {
          req.c.status(202);
          return raw(
            Response.json(
              { result: { jwt: null }, success: true, errors: [], messages: [] },
              { status: 202 },
            ),
          );
        }
      }
      return raw(
        Response.json(
          {
            result: {
              jwt: tokens.sign({
                kind: 'complete',
                sid: claims.sid,
                acct: claims.acct,
                exp: claims.exp,
              }),
            },
            success: true,
            errors: [],
            messages: [],
          },
          { status: 201 },
        ),
      );
    },
  );
}
