/**
 * Thin handlers for a script's versions, deployments, secrets and settings, and the service view
 * (`/accounts/{account_id}/workers/services/{name}`) that deploy tools read first.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import { parseMultipart, type MultipartForm } from '../../core/multipart.ts';
import type { Req } from '../../core/router.ts';
import { checkBindings, etagOf, mergeBindings, sourceOf } from './routes.ts';
import { scriptTag } from './account-routes.ts';
import { applyBulkSecrets, BulkSecretsBody, versionTags } from './secrets.ts';
import { bindingExtensionService, type BindingExtension } from './registry.ts';
import {
  scriptContents,
  scripts,
  type StoredBinding,
  type StoredContent,
  type StoredScript,
} from './store.ts';
import {
  AUTHOR_EMAIL,
  scriptDeployments,
  scriptVersions,
  versionContents,
  versionScope,
  type Deployer,
  type StoredVersion,
} from './versions.ts';

const read = { permission: 'workers_scripts', level: 'read' } as const;
const edit = { permission: 'workers_scripts', level: 'edit' } as const;
const tags = ['workers'];
const params = { script_name: 'any' } as const;
const base = '/accounts/:account_id/workers/scripts/:script_name';

const SecretBody = z.object({
  name: z
    .string({ error: 'name is required' })
    .regex(/^[A-Za-z_$][A-Za-z0-9_$]*$/, 'name must be a JavaScript identifier'),
  text: z.string({ error: 'text is required' }).max(5 * 1024, 'secrets are at most 5 KiB'),
  type: z.enum(['secret_text'], { error: 'type must be secret_text' }).optional(),
});
const DeploymentBody = z.object({
  strategy: z.literal('percentage', { error: 'strategy must be "percentage"' }).optional(),
  versions: z
    .array(z.object({ version_id: z.string(), percentage: z.number().min(0).max(100) }))
    .min(1, 'versions must name at least one version'),
  annotations: z.record(z.string(), z.string().optional()).optional(),
});
const ScriptSettingsBody = z.object({
  logpush: z.boolean().optional(),
  observability: z.record(z.string(), z.unknown()).optional(),
  tags: z.array(z.string()).optional().nullable(),
  tail_consumers: z.array(z.unknown()).optional().nullable(),
});
const SettingsBody = ScriptSettingsBody.extend({
  bindings: z.array(z.object({ type: z.string(), name: z.string() }).passthrough()).optional(),
  compatibility_date: z
    .string()
    .regex(/^\d{4}-\d{2}-\d{2}$/, 'expected YYYY-MM-DD')
    .optional(),
  compatibility_flags: z.array(z.string()).optional(),
  keep_bindings: z.array(z.string()).optional(),
});

/** Bindings as they may be shown: secret values never leave the server. */
export function bindingsView(bindings: StoredBinding[]) {
  return bindings.map((b) => (b.type === 'secret_text' ? { type: b.type, name: b.name } : b));
}

function versionView(v: StoredVersion) {
  return {
    id: v.id,
    number: v.number,
    metadata: {
      author_email: AUTHOR_EMAIL,
      author_id: '',
      created_on: v.created_on,
      modified_on: v.created_on,
      source: v.source,
      has_preview: false,
      hasPreview: false,
    },
    annotations: { 'workers/triggered_by': 'upload', ...v.annotations },
    resources: {
      script: { etag: v.script.etag, handlers: v.script.handlers, last_deployed_from: v.source },
      script_runtime: {
        compatibility_date: v.script.compatibility_date ?? undefined,
        compatibility_flags: v.script.compatibility_flags,
        usage_model: 'standard',
        limits: { cpu_ms: 30_000 },
      },
      bindings: bindingsView(v.script.bindings),
    },
    startup_time_ms: 0,
  };
}

function settingsView(s: StoredScript) {
  const settings = s.settings ?? {};
  return {
    logpush: settings.logpush ?? false,
    observability: settings.observability ?? { enabled: false },
    tags: s.tags,
    tail_consumers: settings.tail_consumers ?? [],
  };
}

export function mountVersionRoutes(
  ctx: AreaContext,
  deployer: Deployer,
  uploadParser: UploadParser,
): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;

  async function live(req: Req<unknown, unknown>) {
    const { account_id: accountId, script_name: name } = req.params;
    const doc = await scripts.get(db, accountId, name);
    if (!doc) throw apiError('worker_not_found', name);
    return doc;
  }
  async function liveContent(accountId: string, name: string) {
    const content = await scriptContents.get(db, accountId, name);
    if (!content) throw apiError('worker_not_found', name);
    return content.body;
  }
  /** Redeploys the live script with new bindings or runtime settings, as a new version. */
  async function redeploy(
    req: Req<unknown, unknown>,
    next: StoredScript,
    annotations?: Record<string, string>,
  ) {
    const { account_id: accountId, script_name: name } = req.params;
    const content = await liveContent(accountId, name);
    next.etag = etagOf(content, next.bindings, next.compatibility_date, next.compatibility_flags);
    return deployer.deploy(accountId, next, content, {
      source: sourceOf(req.c.req.header('user-agent')),
      annotations,
    });
  }

  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/services/:script_name',
      operationId: 'worker-environment-get-service',
      summary: 'A script as a service with its default environment',
      auth: read,
      params,
      tags,
    },
    async (req) => {
      const s = (await live(req)).body;
      const script = {
        id: s.id,
        tag: scriptTag(req.params.account_id, s),
        tags: s.tags,
        etag: s.etag,
        handlers: s.handlers,
        last_deployed_from: s.last_deployed_from ?? 'api',
        compatibility_date: s.compatibility_date ?? undefined,
        compatibility_flags: s.compatibility_flags,
        usage_model: 'standard',
        created_on: s.created_on,
        modified_on: s.modified_on,
      };
      return {
        id: s.id,
        default_environment: {
          environment: 'production',
          created_on: s.created_on,
          modified_on: s.modified_on,
          script,
        },
        environments: [
          { environment: 'production', created_on: s.created_on, modified_on: s.modified_on },
        ],
        created_on: s.created_on,
        modified_on: s.modified_on,
      };
    },
  );

  // ---- versions ----------------------------------------------------------------------------
  router.add(
    {
      method: 'GET',
      path: `${base}/versions`,
      operationId: 'worker-versions-list-versions',
      summary: "A script's versions, newest first",
      auth: read,
      params,
      tags,
    },
    async (req) => {
      await live(req);
      const scope = versionScope(req.params.account_id, req.params.script_name);
      const items = (await scriptVersions.all(db, scope))
        .map((d) => d.body)
        .sort((a, b) => b.number - a.number);
      return { items: items.map(versionView) };
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${base}/versions/:version_id`,
      operationId: 'worker-versions-get-version-detail',
      summary: 'One version',
      auth: read,
      params: { ...params, version_id: 'uuid' },
      tags,
    },
    async (req) => {
      await live(req);
      const scope = versionScope(req.params.account_id, req.params.script_name);
      const doc = await scriptVersions.get(db, scope, req.params.version_id);
      if (!doc) throw apiError('worker_version_not_found', req.params.version_id);
      return versionView(doc.body);
    },
  );
  router.add(
    {
      method: 'POST',
      path: `${base}/versions`,
      operationId: 'worker-versions-upload-version',
      summary: 'Upload a version without deploying it',
      auth: edit,
      bodyType: 'multipart',
      params,
      tags,
    },
    async (req) => {
      const prev = (await live(req)).body;
      const { script, content } = await uploadParser.parseUpload(
        req.params.account_id,
        req.params.script_name,
        req.form!,
        prev,
      );
      const meta = req.form!.metadata;
      const annotations: Record<string, string> = {};
      if (meta.annotations && typeof meta.annotations === 'object')
        for (const [k, v] of Object.entries(meta.annotations as Record<string, unknown>))
          if (typeof v === 'string') annotations[k] = v;
      const version = await deployer.storeVersion(
        req.params.account_id,
        script,
        content,
        sourceOf(req.c.req.header('user-agent')),
        annotations,
      );
      return versionView(version);
    },
  );

  // ---- deployments -------------------------------------------------------------------------
  router.add(
    {
      method: 'GET',
      path: `${base}/deployments`,
      operationId: 'worker-deployments-list-deployments',
      summary: "A script's deployments, newest first",
      auth: read,
      params,
      tags,
    },
    async (req) => {
      await live(req);
      const scope = versionScope(req.params.account_id, req.params.script_name);
      const deployments = (await scriptDeployments.all(db, scope))
        .map((d) => d.body)
        .sort((a, b) => (a.created_on < b.created_on ? 1 : a.created_on > b.created_on ? -1 : 0));
      // `deployments` is the platform's field; the official client's pager reads `items`.
      return { deployments, items: deployments };
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${base}/deployments/:deployment_id`,
      operationId: 'worker-deployments-get-deployment',
      summary: 'One deployment',
      auth: read,
      params: { ...params, deployment_id: 'uuid' },
      tags,
    },
    async (req) => {
      await live(req);
      const scope = versionScope(req.params.account_id, req.params.script_name);
      const doc = await scriptDeployments.get(db, scope, req.params.deployment_id);
      if (!doc) throw apiError('worker_version_not_found', req.params.deployment_id);
      return doc.body;
    },
  );
  router.add(
    {
      method: 'POST',
      path: `${base}/deployments`,
      operationId: 'worker-deployments-create-deployment',
      summary: 'Deploy a version',
      auth: edit,
      body: DeploymentBody,
      params,
      tags,
    },
    async (req) => {
      await live(req);
      const { account_id: accountId, script_name: name } = req.params;
      const serving = req.body.versions.filter((v) => v.percentage > 0);
      if (serving.length !== 1 || serving[0].percentage !== 100)
        throw apiError(
          'worker_invalid',
          'Outpost serves one version at a time: send exactly one version with percentage 100 (gradual deployments are not supported)',
        );
      const scope = versionScope(accountId, name);
      const version = await scriptVersions.get(db, scope, serving[0].version_id);
      const content = await versionContents.get(db, scope, serving[0].version_id);
      if (!version || !content) throw apiError('worker_version_not_found', serving[0].version_id);
      const annotations: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.body.annotations ?? {}))
        if (typeof v === 'string') annotations[k] = v;
      const out = await deployer.deploy(accountId, version.body.script, content.body, {
        source: sourceOf(req.c.req.header('user-agent')),
        annotations,
        version: version.body,
      });
      const dep = await scriptDeployments.get(db, scope, out.deploymentId);
      return dep!.body;
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${base}/deployments/:deployment_id`,
      operationId: 'worker-deployments-delete-deployment',
      summary: 'Delete a deployment other than the latest one',
      auth: edit,
      params: { ...params, deployment_id: 'uuid' },
      tags,
    },
    async (req) => {
      const s = (await live(req)).body;
      const scope = versionScope(req.params.account_id, req.params.script_name);
      const all = (await scriptDeployments.all(db, scope)).sort((a, b) =>
        a.body.created_on < b.body.created_on ? 1 : a.body.created_on > b.body.created_on ? -1 : 0,
      );
      if (!all.some((d) => d.id === req.params.deployment_id))
        throw apiError('worker_deployment_not_found', req.params.deployment_id);
      // The latest deployment is the one serving traffic; removing it would leave the live
      // script without the record of how it got there. Scripts deployed before the live record
      // named its deployment fall back to the newest by time.
      const latest = s.deployment_id ?? all[0].id;
      if (req.params.deployment_id === latest)
        throw apiError(
          'worker_invalid',
          `Deployment ${req.params.deployment_id} is the latest deployment of ${req.params.script_name}, which serves traffic, and cannot be deleted; deploy another version first`,
        );
      await scriptDeployments.delete(db, scope, req.params.deployment_id);
      return null;
    },
  );

  // ---- secrets -----------------------------------------------------------------------------
  router.add(
    {
      method: 'GET',
      path: `${base}/secrets`,
      operationId: 'worker-script-list-secrets',
      summary: "A script's secrets (names only)",
      auth: read,
      params,
      tags,
    },
    async (req) =>
      (await live(req)).body.bindings
        .filter((b) => b.type === 'secret_text')
        .map((b) => ({ name: b.name, type: b.type })),
  );
  router.add(
    {
      method: 'GET',
      path: `${base}/secrets/:secret_name`,
      operationId: 'worker-script-get-secret',
      summary: 'One secret (name only)',
      auth: read,
      params: { ...params, secret_name: 'any' },
      tags,
    },
    async (req) => {
      const b = (await live(req)).body.bindings.find(
        (x) => x.type === 'secret_text' && x.name === req.params.secret_name,
      );
      if (!b) throw apiError('worker_secret_not_found', req.params.secret_name);
      return { name: b.name, type: b.type };
    },
  );
  router.add(
    {
      method: 'PUT',
      path: `${base}/secrets`,
      operationId: 'worker-script-put-secret',
      summary: 'Add or replace a secret (deploys a new version)',
      auth: edit,
      body: SecretBody,
      params,
      tags,
    },
    async (req) => {
      const s = (await live(req)).body;
      const taken = s.bindings.find((b) => b.name === req.body.name && b.type !== 'secret_text');
      if (taken)
        throw apiError(
          'worker_invalid',
          `${req.body.name} is already bound as ${taken.type}; choose another name for the secret`,
        );
      const bindings = s.bindings.filter((b) => b.name !== req.body.name);
      bindings.push({ type: 'secret_text', name: req.body.name, text: req.body.text });
      await redeploy(req, { ...s, bindings });
      return { name: req.body.name, type: 'secret_text' };
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: `${base}/secrets/:secret_name`,
      operationId: 'worker-script-delete-secret',
      summary: 'Delete a secret (deploys a new version)',
      auth: edit,
      params: { ...params, secret_name: 'any' },
      tags,
    },
    async (req) => {
      const s = (await live(req)).body;
      if (!s.bindings.some((b) => b.type === 'secret_text' && b.name === req.params.secret_name))
        throw apiError('worker_secret_not_found', req.params.secret_name);
      await redeploy(req, {
        ...s,
        bindings: s.bindings.filter((b) => b.name !== req.params.secret_name),
      });
      return null;
    },
  );

  router.add(
    {
      method: 'PATCH',
      path: `${base}/secrets-bulk`,
      operationId: 'worker-script-bulk-update-secrets',
      summary: 'Set or delete several secrets at once (all or nothing; deploys a new version)',
      auth: edit,
      body: BulkSecretsBody,
      params,
      tags,
    },
    async (req) => {
      const s = (await live(req)).body;
      const { bindings, result } = applyBulkSecrets(s.bindings, req.body);
      // Like the single-secret PUT: a new version with the new bindings, loaded before it is
      // stored, so the running script sees every new value at once or none of them.
      await redeploy(req, { ...s, bindings }, versionTags(req.body));
      return result;
    },
  );

  // ---- settings ----------------------------------------------------------------------------
  router.add(
    {
      method: 'GET',
      path: `${base}/script-settings`,
      operationId: 'worker-script-settings-get-settings',
      summary: 'Settings that do not change the code',
      auth: read,
      params,
      tags,
    },
    async (req) => settingsView((await live(req)).body),
  );
  router.add(
    {
      method: 'PATCH',
      path: `${base}/script-settings`,
      operationId: 'worker-script-settings-patch-settings',
      summary: 'Change settings that do not change the code',
      auth: edit,
      body: ScriptSettingsBody,
      params,
      tags,
    },
    async (req) => {
      const doc = await live(req);
      const next = applySettings(doc.body, req.body);
      await scripts.update(db, doc, next, clock.now());
      return settingsView(next);
    },
  );
  router.add(
    {
      method: 'GET',
      path: `${base}/settings`,
      operationId: 'worker-script-get-settings',
      summary: "A script's settings and bindings",
      auth: read,
      params,
      tags,
    },
    async (req) => fullSettingsView((await live(req)).body),
  );
  router.add(
    {
      method: 'PATCH',
      path: `${base}/settings`,
      operationId: 'worker-script-patch-settings',
      summary: "Change a script's settings or bindings (multipart `settings` part or JSON)",
      auth: edit,
      bodyType: 'raw',
      params,
      tags,
    },
    async (req) => {
      const doc = await live(req);
      const type = req.c.req.header('content-type') ?? '';
      // One store, three forms: a multipart `settings` JSON part (the platform's tools), the
      // official client's `settings[...]` bracket fields, or JSON (bare or under `settings`).
      let rawSettings: unknown;
      try {
        if (/^multipart\//i.test(type)) {
          const form = parseMultipart(type, req.raw ?? Buffer.alloc(0), 'settings');
          const file = form.files.find((f) => f.field === 'settings');
          rawSettings =
            Object.keys(form.metadata).length === 0 && file
              ? JSON.parse(file.data.toString('utf8'))
              : form.metadata;
        } else {
          rawSettings = JSON.parse((req.raw ?? Buffer.alloc(0)).toString('utf8') || '{}');
          if (
            rawSettings &&
            typeof rawSettings === 'object' &&
            !Array.isArray(rawSettings) &&
            'settings' in rawSettings
          )
            rawSettings = (rawSettings as { settings: unknown }).settings;
        }
      } catch (err) {
        if (err instanceof SyntaxError) throw apiError('invalid_json', err.message);
        throw err;
      }
      const parsed = SettingsBody.safeParse(rawSettings);
      if (!parsed.success)
        throw apiError(
          'worker_invalid',
          parsed.error.issues.map((i) => `settings.${i.path.join('.')}: ${i.message}`).join('; '),
        );
      const b = parsed.data;
      let next = applySettings(doc.body, b);
      const codeChange =
        b.bindings !== undefined ||
        b.compatibility_date !== undefined ||
        b.compatibility_flags !== undefined;
      if (!codeChange) {
        await scripts.update(db, doc, next, clock.now());
        return fullSettingsView(next);
      }
      next = {
        ...next,
        bindings: b.bindings
          ? mergeBindings(
              checkBindings(b.bindings, (t) =>
                ctx.services.optional<BindingExtension>(bindingExtensionService(t)),
              ),
              doc.body.bindings,
              b.keep_bindings ?? ['secret_text'],
            )
          : next.bindings,
        compatibility_date: b.compatibility_date ?? next.compatibility_date,
        compatibility_flags: b.compatibility_flags ?? next.compatibility_flags,
      };
      await uploadParser.checkNamespaces(req.params.account_id, next.bindings);
      const out = await redeploy(req, next);
      return fullSettingsView(out.script);
    },
  );
}

function applySettings(s: StoredScript, b: z.infer<typeof ScriptSettingsBody>): StoredScript {
  const settings = { ...(s.settings ?? {}) };
  if (b.logpush !== undefined) settings.logpush = b.logpush;
  if (b.observability !== undefined) settings.observability = b.observability;
  if (b.tail_consumers !== undefined) settings.tail_consumers = b.tail_consumers ?? [];
  return { ...s, settings, tags: b.tags === undefined ? s.tags : (b.tags ?? []) };
}

function fullSettingsView(s: StoredScript) {
  return {
    ...settingsView(s),
    bindings: bindingsView(s.bindings),
    compatibility_date: s.compatibility_date ?? undefined,
    compatibility_flags: s.compatibility_flags,
    placement: {},
    usage_model: 'standard',
    limits: { cpu_ms: 30_000 },
  };
}

/** What the upload routes share with these: the parser of upload forms and the namespace check. */
export interface UploadParser {
  parseUpload(
    accountId: string,
    name: string,
    form: MultipartForm,
    prev: StoredScript | undefined,
  ): Promise<{ script: StoredScript; content: StoredContent }>;
  checkNamespaces(accountId: string, bindings: StoredBinding[]): Promise<void>;
}
