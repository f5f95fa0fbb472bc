/**
 * Account-script calls of the official client beyond upload and versions: a code-only
 * replacement (`PUT …/content`; `GET …/content/v2` is served with the download in routes.ts), search
 * (`GET /workers/scripts-search`) and the account's Workers settings (`/workers/account-settings`).
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { requireAccount } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { pageOf, pageQuery } from '../../core/pagination.ts';
import { defineCollection, VersionConflict } from '../../core/storage/collection.ts';
import { qString } from '../../core/validate.ts';
import {
  annotationsOf,
  scriptView,
  sourceOf,
  WORKERS_PERMISSION,
} from './routes.ts';
import { requireScript, scripts, type StoredScript } from './store.ts';
import type { UploadParser } from './version-routes.ts';
import type { Deployer } from './versions.ts';

const read = { permission: WORKERS_PERMISSION, level: 'read' } as const;
const edit = { permission: WORKERS_PERMISSION, level: 'edit' } as const;
const tags = ['workers'];
const params = { script_name: 'any' } as const;
const base = '/accounts/:account_id/workers/scripts/:script_name';

/** Account-wide Workers settings. They are kept and answered; scripts run the same either way. */
interface AccountSettings {
  default_usage_model: string;
  green_compute: boolean;
}
const accountSettings = defineCollection<AccountSettings>({ kind: 'worker_account_settings' });
const SETTINGS_ID = 'settings';
const DEFAULT_SETTINGS: AccountSettings = { default_usage_model: 'standard', green_compute: false };
const USAGE_MODELS = ['standard', 'bundled', 'unbound'] as const;

const AccountSettingsBody = z
  .object({
    default_usage_model: z
      .enum(USAGE_MODELS, { error: `must be one of ${USAGE_MODELS.join(', ')}` })
      .optional(),
    green_compute: z.boolean({ error: 'must be true or false' }).optional(),
  })
  .strict();

const SearchQuery = z.object({
  ...pageQuery({ perPage: 50, min: 1, max: 100 }),
  name: qString(z.string().max(63, 'at most 63 characters')).optional(),
  id: qString(z.string().regex(/^[0-9a-f]{32}$/, 'must be a 32-hex script id')).optional(),
  order_by: qString(
    z.enum(['created_on', 'modified_on', 'name'], {
      error: 'must be created_on, modified_on or name',
    }),
  ).optional(),
});

/**
 * A script's id in search answers and the services view (the platform's "tag"): 32 hex digits,
 * stable for the life of the script (an upload does not change it; delete and re-create does).
 */
export function scriptTag(accountId: string, s: Pick<StoredScript, 'id' | 'created_on'>): string {
  return createHash('sha256')
    .update(`${accountId}/${s.id}/${s.created_on}`)
    .digest('hex')
    .slice(0, 32);
}

export function mountAccountRoutes(
  ctx: AreaContext,
  deployer: Deployer,
  parser: UploadParser,
): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;

  async function accountScript(accountId: string, name: string) {
    await requireAccount(db, accountId);
    return requireScript(db, accountId, name);
  }

  router.add(
    {
      method: 'PUT',
      path: `${base}/content`,
      operationId: 'worker-script-put-content',
      summary: "Replace a script's code, keeping its bindings, secrets and settings",
      auth: edit,
      bodyType: 'multipart',
      params,
      tags,
    },
    async (req) => {
      const { account_id: accountId, script_name: name } = req.params;
      const prev = (await accountScript(accountId, name)).body;
      const form = req.form!;
      const meta = form.metadata;
      // The module names may come in the metadata part or in the client's headers.
      const mainModule = meta.main_module ?? req.c.req.header('cf-worker-main-module-part');
      const bodyPart = meta.body_part ?? req.c.req.header('cf-worker-body-part');
      if (bodyPart !== undefined && mainModule === undefined)
        throw apiError(
          'worker_invalid',
          'Service-worker scripts (body_part) are not supported: send an ES module with metadata.main_module',
        );
      if (typeof mainModule !== 'string' || mainModule === '')
        throw apiError(
          'worker_invalid',
          'metadata.main_module is required (or the CF-WORKER-MAIN-MODULE-PART header): the name of the part holding the main module',
        );
      // Everything but the code is the live script's: its bindings (secrets included, through
      // keep_bindings), compatibility settings and tags; the upload parser and the deployer do
      // the rest exactly as for a full upload (load first, then a new version and deployment).
      const { script, content } = await parser.parseUpload(
        accountId,
        name,
        {
          ...form,
          metadata: {
            main_module: mainModule,
            bindings: [],
            keep_bindings: [...new Set(prev.bindings.map((b) => b.type))],
            compatibility_date: prev.compatibility_date ?? undefined,
            compatibility_flags: prev.compatibility_flags,
            tags: prev.tags,
          },
        },
        prev,
      );
      const deployed = await deployer.deploy(accountId, script, content, {
        source: sourceOf(req.c.req.header('user-agent')),
        annotations: annotationsOf(meta),
      });
      return scriptView(deployed.script);
    },
  );

  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/scripts-search',
      operationId: 'worker-script-search-workers',
      summary: 'Search scripts by name (substring) or id',
      auth: read,
      query: SearchQuery,
      tags,
    },
    async (req) => {
      const accountId = req.params.account_id;
      await requireAccount(db, accountId);
      const q = req.query;
      const needle = q.name?.toLowerCase();
      const order = q.order_by ?? 'name';
      const found = (await scripts.all(db, accountId))
        .map((d) => ({
          id: scriptTag(accountId, d.body),
          script_name: d.body.id,
          service_name: d.body.id,
          environment_name: 'production',
          environment_is_default: true,
          created_on: d.body.created_on,
          modified_on: d.body.modified_on,
        }))
        .filter(
          (s) =>
            (needle === undefined || s.script_name.includes(needle)) &&
            (q.id === undefined || s.id === q.id),
        )
        .sort((a, b) => {
          const ka = order === 'name' ? a.script_name : a[order];
          const kb = order === 'name' ? b.script_name : b[order];
          return ka < kb ? -1 : ka > kb ? 1 : a.script_name < b.script_name ? -1 : 1;
        });
      return pageOf(found, q);
    },
  );

  async function currentSettings(accountId: string) {
    const doc = await accountSettings.get(db, accountId, SETTINGS_ID);
    return { doc, body: { ...DEFAULT_SETTINGS, ...doc?.body } };
  }

  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/account-settings',
      operationId: 'worker-account-settings-fetch-worker-account-settings',
      summary: "The account's Workers settings",
      auth: read,
      tags,
    },
    async (req) => {
      await requireAccount(db, req.params.account_id);
      return (await currentSettings(req.params.account_id)).body;
    },
  );

  router.add(
    {
      method: 'PUT',
      path: '/accounts/:account_id/workers/account-settings',
      operationId: 'worker-account-settings-create-worker-account-settings',
      summary: "Change the account's Workers settings (fields left out keep their value)",
      auth: edit,
      body: AccountSettingsBody,
      tags,
    },
    async (req) => {
      const accountId = req.params.account_id;
      await requireAccount(db, accountId);
      const { doc, body } = await currentSettings(accountId);
      const next: AccountSettings = {
        default_usage_model: req.body.default_usage_model ?? body.default_usage_model,
        green_compute: req.body.green_compute ?? body.green_compute,
      };
      const now = clock.now();
      if (doc) await accountSettings.update(db, doc, next, now);
      else {
        try {
          await accountSettings.insert(db, accountId, SETTINGS_ID, next, now);
        } catch (err) {
          // Two first writes at once: the loser answers as a concurrent update does (409, retry)
          // rather than with the store's unique-key error.
          const raced = await accountSettings.get(db, accountId, SETTINGS_ID);
          if (!raced) throw err;
          throw new VersionConflict(
            `the Workers settings of account ${accountId} were changed concurrently`,
          );
        }
      }
      return next;
    },
  );
}
