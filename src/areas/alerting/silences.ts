/**
 * Silences: windows during which one notification policy's alerts are not sent
 * (`/accounts/{account_id}/alerting/v3/silences`). Create and update take arrays and are
 * all-or-nothing (every item is checked before anything is written, the writes share one
 * transaction). Create answers the envelope without `result`; update answers the silences it
 * changed; list, get and delete as usual. Deleting a policy deletes its silences.
 * Checks: `policy_id` names a policy of the account; times are ISO 8601 with an offset;
 * `start_time` (default: now) is at most 90 days ahead; `end_time` is after `start_time` and not
 * in the past.
 * The effect (dispatch.ts): an alert raised while a silence of its policy is in force
 * (`start_time` ≤ now < `end_time`) is kept in the history with status `silenced` and never sent.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import type { Req, RouteAuth } from '../../core/router.ts';
import type { Doc } from '../../core/storage/collection.ts';
import { policies, silences, type Silence } from './store.ts';

/** How far ahead a silence may start (the platform's limit). */
export const MAX_START_AHEAD_MS = 90 * 24 * 3600 * 1000;
/** Items per create or update request. */
export const MAX_ITEMS = 100;

const AnyBody = z.unknown();
const isoWithOffset = z.iso.datetime({ offset: true });
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string) => apiError('alerting_invalid', message);

function time(v: unknown, field: string): string {
  if (typeof v !== 'string' || !isoWithOffset.safeParse(v).success) throw bad(`${field}: expected an ISO 8601 date-time such as 2026-07-01T00:00:00Z`);
  return new Date(v).toISOString();
}

function items(body: unknown): Record<string, unknown>[] {
  if (!Array.isArray(body)) throw bad('the request body must be a JSON array of silences');
  if (body.length === 0) throw bad('the request body must hold at least one silence');
  if (body.length > MAX_ITEMS) throw bad(`at most ${MAX_ITEMS} silences per request`);
  return body.map((item, i) => {
    if (!isObj(item)) throw bad(`[${i}]: expected an object`);
    return item;
  });
}

/** Checks a window against `now`; `endGiven` says whether the end time comes from this request. */
function checkWindow(where: string, start: string, end: string, now: Date, startGiven: boolean, endGiven: boolean): void {
  if (startGiven && Date.parse(start) - now.getTime() > MAX_START_AHEAD_MS) throw bad(`${where}start_time: must be within 90 days from now`);
  if (Date.parse(end) <= Date.parse(start)) throw bad(`${where}end_time: must be later than start_time (${start})`);
  if (endGiven && Date.parse(end) <= now.getTime()) throw bad(`${where}end_time: ${end} is in the past`);
}

export function mountSilenceRoutes(
  ctx: AreaContext,
  base: string,
  account: (req: Req<unknown, unknown>) => Promise<string>,
  auth: { read: RouteAuth; edit: RouteAuth },
): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;
  const tags = ['alerting'];

  router.add(
    { method: 'POST', path: `${base}/silences`, operationId: 'createAlertingSilences', summary: 'Create silences (an array of {policy_id, start_time?, end_time}; envelope without result)', auth: auth.edit, body: AnyBody, tags },
    async (req) => {
      const accountId = await account(req);
      const now = clock.now();
      const list = items(req.body).map((item, i) => {
        for (const k of Object.keys(item)) if (!['policy_id', 'start_time', 'end_time'].includes(k)) throw bad(`[${i}].${k}: unknown field`);
        if (typeof item.policy_id !== 'string' || item.policy_id.length === 0) throw bad(`[${i}].policy_id: required (a notification policy id)`);
        if (item.policy_id.length > 64) throw bad(`[${i}].policy_id: not a notification policy id`);
        if (item.end_time === undefined) throw bad(`[${i}].end_time: required`);
        const start = item.start_time === undefined ? now.toISOString() : time(item.start_time, `[${i}].start_time`);
        const end = time(item.end_time, `[${i}].end_time`);
        checkWindow(`[${i}].`, start, end, now, item.start_time !== undefined, true);
        return { policy_id: item.policy_id, start_time: start, end_time: end };
      });
      for (const [i, s] of list.entries()) {
        if (!(await policies.get(db, accountId, s.policy_id))) throw bad(`[${i}].policy_id: policy ${s.policy_id} does not exist`);
      }
      await db.transaction().execute(async (tx) => {
        for (const s of list) {
          const id = hexId();
          await silences.insert(tx, accountId, id, { id, ...s, created_at: now.toISOString(), updated_at: now.toISOString() }, now);
        }
      });
      return req.c.json({ success: true, errors: [], messages: [] });
    },
  );

  router.add(
    { method: 'PUT', path: `${base}/silences`, operationId: 'updateAlertingSilences', summary: 'Change the windows of silences (an array of {id, start_time?, end_time?}; answers them)', auth: auth.edit, body: AnyBody, tags },
    async (req) => {
      const accountId = await account(req);
      const now = clock.now();
      const seen = new Set<string>();
      const parsed = items(req.body).map((item, i) => {
        for (const k of Object.keys(item)) if (!['id', 'start_time', 'end_time'].includes(k)) throw bad(`[${i}].${k}: unknown field${k === 'policy_id' ? ' (the policy of a silence cannot change)' : ''}`);
        if (typeof item.id !== 'string' || item.id.length === 0) throw bad(`[${i}].id: required (a silence id)`);
        if (seen.has(item.id)) throw bad(`[${i}].id: silence ${item.id} is listed twice`);
        seen.add(item.id);
        return {
          id: item.id,
          start: item.start_time === undefined ? undefined : time(item.start_time, `[${i}].start_time`),
          end: item.end_time === undefined ? undefined : time(item.end_time, `[${i}].end_time`),
        };
      });
      const changes: { doc: Doc<Silence>; next: Silence }[] = [];
      for (const [i, p] of parsed.entries()) {
        const doc = await silences.get(db, accountId, p.id);
        if (!doc) throw apiError('alerting_silence_not_found', p.id);
        const next: Silence = { ...doc.body, start_time: p.start ?? doc.body.start_time, end_time: p.end ?? doc.body.end_time, updated_at: now.toISOString() };
        checkWindow(`[${i}].`, next.start_time, next.end_time, now, p.start !== undefined, p.end !== undefined);
        changes.push({ doc, next });
      }
      await db.transaction().execute(async (tx) => {
        for (const { doc, next } of changes) await silences.update(tx, doc, next, now);
      });
      return changes.map((c) => c.next);
    },
  );

  router.add(
    { method: 'GET', path: `${base}/silences`, operationId: 'listAlertingSilences', summary: 'List silences (unpaginated)', auth: auth.read, tags },
    async (req) => {
      const accountId = await account(req);
      const { items: docs } = await silences.list(db, accountId, { order: 'created_on', direction: 'asc' });
      return docs.map((d) => d.body);
    },
  );

  const silenceOf = async (req: Req<unknown, unknown>) => {
    const accountId = await account(req);
    const doc = await silences.get(db, accountId, req.params.silence_id);
    if (!doc) throw apiError('alerting_silence_not_found', req.params.silence_id);
    return { accountId, doc };
  };

  router.add(
    { method: 'GET', path: `${base}/silences/:silence_id`, operationId: 'getAlertingSilence', summary: 'Get a silence', auth: auth.read, params: { silence_id: 'any' }, tags },
    async (req) => (await silenceOf(req)).doc.body,
  );

  router.add(
    { method: 'DELETE', path: `${base}/silences/:silence_id`, operationId: 'deleteAlertingSilence', summary: 'Delete a silence (envelope without result)', auth: auth.edit, params: { silence_id: 'any' }, tags },
    async (req) => {
      const { accountId, doc } = await silenceOf(req);
      await silences.delete(db, accountId, doc.id);
      return req.c.json({ success: true, errors: [], messages: [] });
    },
  );
}

/** The silence of a policy in force at `at`, if any. */
export function silenceInForce(list: Silence[], policyId: string, at: Date): Silence | undefined {
  const t = at.toISOString();
  return list.find((s) => s.policy_id === policyId && s.start_time <= t && t < s.end_time);
}
