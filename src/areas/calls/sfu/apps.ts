/**
 * Media forwarding apps under the management API: `/accounts/{account_id}/calls/apps`. An app's
 * `secret` is the bearer of its media-forwarding host; it is returned only by create.
 */
import { timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import type { AreaContext } from '../../../core/area.ts';
import { apiError } from '../../../core/errors.ts';
import { hexId, secret } from '../../../core/ids.ts';
import { defineCollection, type Doc } from '../../../core/storage/collection.ts';
import type { Executor } from '../../../core/storage/db.ts';

export interface SfuApp {
  uid: string;
  name: string;
  secret: string;
  created: string;
  modified: string;
}

export const sfuApps = defineCollection<SfuApp>({ kind: 'sfu_app' });

const AppBody = z.object({ name: z.string().max(200).optional() });
const APP_ID = { app_id: 'hex32' } as const;

/** What an app lookup by the media host found: the app, or why the caller is refused. */
export type AppCheck = { ok: true; app: SfuApp } | { ok: false; reason: 'not_found' | 'unauthorized' };

/** Checks `Authorization: Bearer <secret>` against the app named in the path. */
export async function checkAppSecret(db: Executor, appId: string, authorization: string | undefined): Promise<AppCheck> {
  // No credentials at all is refused before anything about the path is revealed; a bearer for an
  // app that does not exist is the platform's not_found (there is no secret to compare it with).
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  if (!m) return { ok: false, reason: 'unauthorized' };
  const doc = /^[0-9a-f]{32}$/.test(appId) ? await sfuApps.findById(db, appId) : undefined;
  if (!doc) return { ok: false, reason: 'not_found' };
  const given = Buffer.from(m[1]);
  const want = Buffer.from(doc.body.secret);
  if (given.length !== want.length || !timingSafeEqual(given, want)) return { ok: false, reason: 'unauthorized' };
  return { ok: true, app: doc.body };
}

export function mountAppRoutes(ctx: AreaContext, onDelete: (appId: string) => void): void {
  const { router, database, clock } = ctx;
  const db = database.db;
  const read = { permission: 'calls', level: 'read' } as const;
  const edit = { permission: 'calls', level: 'edit' } as const;
  const tags = ['calls'];
  const view = (a: SfuApp) => ({ uid: a.uid, name: a.name, created: a.created, modified: a.modified });
  const mustGet = async (accountId: string, uid: string): Promise<Doc<SfuApp>> => {
    const doc = await sfuApps.get(db, accountId, uid);
    if (!doc) throw apiError('sfu_app_not_found', uid);
    return doc;
  };

  router.add(
    { method: 'GET', path: '/accounts/:account_id/calls/apps', operationId: 'calls-apps-list', summary: 'List media forwarding apps', auth: read, tags },
    async ({ params }) => (await sfuApps.all(db, params.account_id)).map((d) => view(d.body)),
  );
  router.add(
    { method: 'POST', path: '/accounts/:account_id/calls/apps', operationId: 'calls-apps-create-a-new-app', summary: 'Create a media forwarding app (the `secret` is returned only here)', auth: edit, body: AppBody.optional(), status: 201, tags },
    async ({ params, body }) => {
      const now = clock.now().toISOString();
      const app: SfuApp = { uid: hexId(), name: body?.name ?? '', secret: secret(64), created: now, modified: now };
      await sfuApps.insert(db, params.account_id, app.uid, app, clock.now());
      return { ...view(app), secret: app.secret };
    },
  );
  router.add(
    { method: 'GET', path: '/accounts/:account_id/calls/apps/:app_id', operationId: 'calls-apps-retrieve-app-details', summary: 'Media forwarding app details', auth: read, params: APP_ID, tags },
    async ({ params }) => view((await mustGet(params.account_id, params.app_id)).body),
  );
  router.add(
    { method: 'PUT', path: '/accounts/:account_id/calls/apps/:app_id', operationId: 'calls-apps-update-app-details', summary: 'Rename a media forwarding app', auth: edit, params: APP_ID, body: AppBody, tags },
    async ({ params, body }) => {
      const doc = await mustGet(params.account_id, params.app_id);
      const now = clock.now();
      const next = { ...doc.body, name: body.name ?? doc.body.name, modified: now.toISOString() };
      return view((await sfuApps.update(db, doc, next, now)).body);
    },
  );
  router.add(
    { method: 'DELETE', path: '/accounts/:account_id/calls/apps/:app_id', operationId: 'calls-apps-delete-app', summary: 'Delete a media forwarding app (its live sessions are closed)', auth: edit, params: APP_ID, tags },
    async ({ params }) => {
      const doc = await mustGet(params.account_id, params.app_id);
      await sfuApps.delete(db, doc.scopeId, doc.id);
      onDelete(doc.id);
      return view(doc.body);
    },
  );
}
