/**
 * Meeting platform REST: the official client's `realtimeKit.*` methods and raw requests in both
 * body forms against a live server; every bad input answers `{success: false, error}` with the
 * status the platform uses. Participant tokens are checked with the published key.
 */
import { createPublicKey } from 'node:crypto';
import { importSPKI, jwtVerify, decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let account_id: string;
let appId: string;
let base: string;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  account_id = t.accountId;
  const created = (await cf.realtimeKit.apps.post({ account_id, name: 'rest app' })) as any;
  appId = created.data.app.id;
  base = `/accounts/${account_id}/realtime/kit/${appId}`;
});
afterAll(() => t?.stop());

describe('apps and presets', () => {
  it('creates an app with the six default presets; lists apps', async () => {
    expect(appId).toMatch(/^[0-9a-f-]{36}$/);
    const list = (await cf.realtimeKit.apps.get({ account_id })) as any;
    expect(list.success).toBe(true);
    expect(list.data.map((a: any) => a.id)).toContain(appId);
    expect(list.paging.total_count).toBeGreaterThanOrEqual(1);
    const presets = (await cf.realtimeKit.presets.get(appId, { account_id, per_page: 50 } as any)) as any;
    expect(presets.data.map((p: any) => p.name).sort()).toEqual(
      ['group_call_host', 'group_call_participant', 'livestream_host', 'livestream_viewer', 'webinar_presenter', 'webinar_viewer'].sort(),
    );
    const host = presets.data.find((p: any) => p.name === 'group_call_host');
    const one = (await cf.realtimeKit.presets.getPresetByID(host.id, { account_id, app_id: appId })) as any;
    expect(one.data.permissions).toMatchObject({ accept_waiting_requests: true, kick_participant: true, waiting_room_type: 'SKIP' });
    expect(one.data.config.view_type).toBe('GROUP_CALL');
  });

  it('preset create (201), name conflict (409), patch, delete', async () => {
    const made = await t.call('POST', `${base}/presets`, { name: 'quiet', config: { view_type: 'WEBINAR' }, permissions: { chat: { public: { can_send: false } } } });
    expect(made.status).toBe(201);
    expect(made.body.data).toMatchObject({ name: 'quiet', config: { view_type: 'WEBINAR' }, permissions: { chat: { public: { can_send: false } } } });
    const again = await t.call('POST', `${base}/presets`, { name: 'quiet' });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ success: false, error: { code: 409, message: expect.stringContaining('quiet') } });
    const patched = (await cf.realtimeKit.presets.update(made.body.data.id, { account_id, app_id: appId, name: 'quieter' } as any)) as any;
    expect(patched.data.name).toBe('quieter');
    const bad = await t.call('POST', `${base}/presets`, { name: 'x', config: { view_type: 'THEATRE' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain('view_type');
    const del = await t.call('DELETE', `${base}/presets/${made.body.data.id}`);
    expect(del.status).toBe(200);
    expect((await t.call('GET', `${base}/presets/${made.body.data.id}`)).status).toBe(404);
  });

  it('an app that does not exist is 404; no credentials is 401', async () => {
    const r = await t.call('GET', `/accounts/${account_id}/realtime/kit/00000000-0000-4000-8000-000000000000/meetings`);
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ success: false, error: { code: 404, message: expect.stringContaining('not found') } });
    expect((await t.call('GET', `${base}/meetings`, undefined, { authorization: '' })).status).toBe(401);
  });
});

describe('permissions', () => {
  it('Realtime Kit Read may list but not create; other permissions are 403; another account is 403', async () => {
    const acct = { [`com.cloudflare.api.account.${account_id}`]: '*' };
    const reader = { authorization: `Bearer ${await createToken(t, ['Realtime Kit Read'], acct)}` };
    expect((await t.call('GET', `${base}/meetings`, undefined, reader)).status).toBe(200);
    const denied = await t.call('POST', `${base}/meetings`, { title: 'no' }, reader);
    expect(denied.status).toBe(403);
    const dns = { authorization: `Bearer ${await createToken(t, ['DNS Read'], acct)}` };
    expect((await t.call('GET', `${base}/meetings`, undefined, dns)).status).toBe(403);
    const elsewhere = { authorization: `Bearer ${await createToken(t, ['Realtime Kit Write'], { [`com.cloudflare.api.account.${'a'.repeat(32)}`]: '*' })}` };
    expect((await t.call('GET', `${base}/meetings`, undefined, elsewhere)).status).toBe(403);
    // A writer of this account reaches only this account's apps.
    const writer = { authorization: `Bearer ${await createToken(t, ['Realtime Kit Write'], acct)}` };
    expect((await t.call('POST', `${base}/meetings`, { title: 'yes' }, writer)).status).toBe(201);
    expect((await t.call('GET', `/accounts/${'b'.repeat(32)}/realtime/kit/${appId}/meetings`, undefined, writer)).status).toBe(403);
  });
});

describe('meetings', () => {
  it('create, get, list with filters, PATCH and PUT through the official client', async () => {
    const a = (await cf.realtimeKit.meetings.create(appId, { account_id, title: 'Weekly sync', session_keep_alive_time_in_secs: 120 })) as any;
    expect(a.success).toBe(true);
    expect(a.data).toMatchObject({ title: 'Weekly sync', status: 'ACTIVE', record_on_start: false, session_keep_alive_time_in_secs: 120 });
    const b = (await cf.realtimeKit.meetings.create(appId, { account_id, title: 'Design review' })) as any;
    const got = (await cf.realtimeKit.meetings.getMeetingByID(a.data.id, { account_id, app_id: appId })) as any;
    expect(got.data).toEqual(a.data);

    const search = (await cf.realtimeKit.meetings.get(appId, { account_id, search: 'weekly' })) as any;
    expect(search.data.map((m: any) => m.id)).toEqual([a.data.id]);
    expect(search.paging).toEqual({ total_count: 1, start_offset: 1, end_offset: 1 });

    const patched = (await cf.realtimeKit.meetings.updateMeetingByID(b.data.id, { account_id, app_id: appId, status: 'INACTIVE', record_on_start: true })) as any;
    expect(patched.data).toMatchObject({ status: 'INACTIVE', record_on_start: true, title: 'Design review' });
    const inactive = (await cf.realtimeKit.meetings.get(appId, { account_id, status: 'INACTIVE' })) as any;
    expect(inactive.data.map((m: any) => m.id)).toEqual([b.data.id]);

    const replaced = (await cf.realtimeKit.meetings.replaceMeetingByID(a.data.id, { account_id, app_id: appId, title: 'Renamed' })) as any;
    expect(replaced.data).toMatchObject({ title: 'Renamed', session_keep_alive_time_in_secs: 60, status: 'ACTIVE' });

    const paged = await t.call('GET', `${base}/meetings?per_page=1&page_no=2`);
    expect(paged.body.data).toHaveLength(1);
    expect(paged.body.paging).toMatchObject({ start_offset: 2, end_offset: 2 });
    const window = await t.call('GET', `${base}/meetings?start_time=2000-01-01T00:00:00Z&end_time=2001-01-01T00:00:00Z`);
    expect(window.body.data).toEqual([]);
  });

  it('bad input: range, type, malformed JSON, unknown meeting, bad query', async () => {
    const range = await t.call('POST', `${base}/meetings`, { session_keep_alive_time_in_secs: 5 });
    expect(range.status).toBe(400);
    expect(range.body.error.message).toContain('session_keep_alive_time_in_secs');
    const type = await t.call('POST', `${base}/meetings`, { title: 42 });
    expect(type.status).toBe(400);
    expect(type.body.error.message).toContain('title');
    const json = await t.call('POST', `${base}/meetings`, '{"title": ');
    expect(json.status).toBe(400);
    expect(json.body.success).toBe(false);
    const unknown = await t.call('GET', `${base}/meetings/00000000-0000-4000-8000-000000000000`);
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.message).toContain('Meeting');
    const q = await t.call('GET', `${base}/meetings?status=SOMETIMES`);
    expect(q.status).toBe(400);
    const big = await t.call('POST', `${base}/meetings`, { title: 'x'.repeat(5000) });
    expect(big.status).toBe(400);
  });
});

describe('participants and tokens', () => {
  let meetingId: string;
  beforeAll(async () => {
    meetingId = ((await cf.realtimeKit.meetings.create(appId, { account_id, title: 'People' })) as any).data.id;
  });

  it('add returns a token signed with the published key; get, list, edit, refresh, delete', async () => {
    const added = (await cf.realtimeKit.meetings.addParticipant(meetingId, { account_id, app_id: appId, custom_participant_id: 'u-1', preset_name: 'group_call_host', name: 'Ada' })) as any;
    expect(added.data).toMatchObject({ custom_participant_id: 'u-1', preset_name: 'group_call_host', name: 'Ada' });
    const claims = decodeJwt(added.data.token);
    expect(claims).toMatchObject({ meetingId, orgId: appId, participantId: added.data.id });
    expect(claims.exp! - claims.iat!).toBe(86400);

    const published = await fetch(`${t.url}/.well-known/webhooks.json`).then((r) => r.json());
    expect(published.success).toBe(true);
    const key = await importSPKI(published.data.publicKey, 'RS256');
    await expect(jwtVerify(added.data.token, key)).resolves.toBeTruthy();
    expect(createPublicKey(published.data.publicKey).asymmetricKeyType).toBe('rsa');

    const got = (await cf.realtimeKit.meetings.getMeetingParticipant(added.data.id, { account_id, app_id: appId, meeting_id: meetingId })) as any;
    expect(got.data).not.toHaveProperty('token');
    expect(got.data.name).toBe('Ada');
    const list = (await cf.realtimeKit.meetings.getMeetingParticipants(meetingId, { account_id, app_id: appId })) as any;
    expect(list.data.map((p: any) => p.id)).toEqual([added.data.id]);

    const edited = (await cf.realtimeKit.meetings.editParticipant(added.data.id, { account_id, app_id: appId, meeting_id: meetingId, name: 'Ada L.' })) as any;
    expect(edited.data.name).toBe('Ada L.');
    expect(decodeJwt(edited.data.token).participantId).toBe(added.data.id);
    const refreshed = (await cf.realtimeKit.meetings.refreshParticipantToken(added.data.id, { account_id, app_id: appId, meeting_id: meetingId })) as any;
    expect(decodeJwt(refreshed.data.token).participantId).toBe(added.data.id);

    const deleted = (await cf.realtimeKit.meetings.deleteMeetingParticipant(added.data.id, { account_id, app_id: appId, meeting_id: meetingId })) as any;
    expect(deleted.data).toMatchObject({ custom_participant_id: 'u-1', preset_id: expect.any(String) });
    expect((await t.call('GET', `${base}/meetings/${meetingId}/participants/${added.data.id}`)).status).toBe(404);
  });

  it('spec form (name, preset_name, custom_participant_id); bad input names the field', async () => {
    const r = await t.call('POST', `${base}/meetings/${meetingId}/participants`, { name: 'Bo', preset_name: 'webinar_viewer', custom_participant_id: 'u-2' });
    expect(r.status).toBe(201);
    const dup = await t.call('POST', `${base}/meetings/${meetingId}/participants`, { preset_name: 'webinar_viewer', custom_participant_id: 'u-2' });
    expect(dup.status).toBe(409);
    const missing = await t.call('POST', `${base}/meetings/${meetingId}/participants`, { name: 'C', preset_name: 'webinar_viewer' });
    expect(missing.status).toBe(400);
    expect(missing.body.error.message).toContain('custom_participant_id');
    const preset = await t.call('POST', `${base}/meetings/${meetingId}/participants`, { preset_name: 'nope', custom_participant_id: 'u-3' });
    expect(preset.status).toBe(400);
    expect(preset.body.error.message).toContain('preset_name');
    const noMeeting = await t.call('POST', `${base}/meetings/00000000-0000-4000-8000-000000000000/participants`, { preset_name: 'webinar_viewer', custom_participant_id: 'u-3' });
    expect(noMeeting.status).toBe(404);
  });

  it('active session is 404 while nobody has joined; kick validates its body', async () => {
    const r = await cf.realtimeKit.activeSession.getActiveSession(meetingId, { account_id, app_id: appId }).catch((e) => e);
    expect(r).toBeInstanceOf(Cloudflare.NotFoundError);
    const kick = await t.call('POST', `${base}/meetings/${meetingId}/active-session/kick`, {});
    expect(kick.status).toBe(400);
    const muteAll = await t.call('POST', `${base}/meetings/${meetingId}/active-session/mute-all`, { allow_unmute: 'yes' });
    expect(muteAll.status).toBe(400);
  });
});

describe('webhooks', () => {
  it('CRUD through the official client; spec names are aliases; URL must be http(s)', async () => {
    const made = (await cf.realtimeKit.webhooks.createWebhook(appId, { account_id, name: 'hook', url: 'https://example.com/hook', events: ['meeting.started', 'meeting.participantJoined'] })) as any;
    expect(made.data).toMatchObject({ name: 'hook', url: 'https://example.com/hook', enabled: true, events: ['meeting.started', 'meeting.participantJoined'] });
    const spec = await t.call('POST', `${base}/webhooks`, { url: 'http://127.0.0.1:9/x', events: ['session.started', 'session.ended'] });
    expect(spec.status).toBe(201);
    expect(spec.body.data).toMatchObject({ name: '127.0.0.1:9', events: ['meeting.started', 'meeting.ended'] });

    const all = (await cf.realtimeKit.webhooks.getWebhooks(appId, { account_id })) as any;
    expect(all.data.map((w: any) => w.id).sort()).toEqual([made.data.id, spec.body.data.id].sort());
    const edited = (await cf.realtimeKit.webhooks.editWebhook(made.data.id, { account_id, app_id: appId, enabled: false })) as any;
    expect(edited.data.enabled).toBe(false);
    const replaced = (await cf.realtimeKit.webhooks.replaceWebhook(made.data.id, { account_id, app_id: appId, name: 'h2', url: 'http://example.com/2', events: ['meeting.ended'] })) as any;
    expect(replaced.data).toMatchObject({ name: 'h2', enabled: true, events: ['meeting.ended'] });
    const one = (await cf.realtimeKit.webhooks.getWebhookByID(made.data.id, { account_id, app_id: appId })) as any;
    expect(one.data.url).toBe('http://example.com/2');
    await cf.realtimeKit.webhooks.deleteWebhook(made.data.id, { account_id, app_id: appId });
    await cf.realtimeKit.webhooks.deleteWebhook(spec.body.data.id, { account_id, app_id: appId });
    expect((await t.call('GET', `${base}/webhooks/${made.data.id}`)).status).toBe(404);

    for (const url of ['ftp://example.com/x', 'javascript:alert(1)', 'not a url']) {
      const bad = await t.call('POST', `${base}/webhooks`, { url, events: ['meeting.started'] });
      expect(bad.status).toBe(400);
      expect(bad.body.error.message).toContain('url');
    }
    const event = await t.call('POST', `${base}/webhooks`, { url: 'https://example.com', events: ['meeting.exploded'] });
    expect(event.status).toBe(400);
    expect(event.body.error.message).toContain('meeting.exploded');
  });
});

describe('sessions', () => {
  it('lists none for a fresh app; unknown session is 404', async () => {
    const s = (await cf.realtimeKit.sessions.getSessions(appId, { account_id })) as any;
    expect(s.data).toEqual({ sessions: [] });
    const r = await t.call('GET', `${base}/sessions/00000000-0000-4000-8000-000000000000`);
    expect(r.status).toBe(404);
  });
});
