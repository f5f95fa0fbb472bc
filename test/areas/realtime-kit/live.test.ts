/**
 * The join path over the signalling WebSocket (the `ws` client, no media): token checks before the
 * upgrade, waitlist with host approval, chat, polls, REST mute and kick taking effect on live
 * sockets, the session lifecycle, and the webhooks those produce — received by a real HTTP server
 * that verifies each signature with the published key, with retries on 5xx only.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SignJWT, decodeJwt } from 'jose';
import { generateKeyPairSync } from 'node:crypto';
import { manualClock } from '../../../src/core/clock.ts';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { sdk } from '../../support/sdk.ts';
import { addParticipant, connect, createApp, createMeeting, startReceiver, startWithReceiver, until, type Fixture, type Receiver } from './support.ts';

let t: TestServer;
let f: Fixture;
let receiver: Receiver;
let stop: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ t, f, receiver, stop } = await startWithReceiver('live'));
});
afterAll(async () => stop?.());

describe('tokens at the door', () => {
  it('refuses a missing, forged or deleted participant token and an inactive meeting', async () => {
    const meetingId = await createMeeting(t, f);
    const p = await addParticipant(t, f, meetingId, 'door-1', 'group_call_host');
    await expect(connect(t, '')).rejects.toMatchObject({ status: 401 });
    const claims = decodeJwt(p.token);
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const forged = await new SignJWT({ ...claims }).setProtectedHeader({ alg: 'RS256' }).sign(privateKey);
    await expect(connect(t, forged)).rejects.toMatchObject({ status: 401 });
    await expect(connect(t, p.token.slice(0, -4) + 'AAAA')).rejects.toMatchObject({ status: 401 });

    const ok = await connect(t, p.token);
    ok.ws.close();
    await t.call('DELETE', `${f.base}/meetings/${meetingId}/participants/${p.id}`);
    const gone = await connect(t, p.token).catch((e) => e);
    expect(gone.status).toBe(401);
    expect(gone.body).toContain('deleted');

    const q = await addParticipant(t, f, meetingId, 'door-2', 'group_call_host');
    await t.call('PATCH', `${f.base}/meetings/${meetingId}`, { status: 'INACTIVE' });
    await expect(connect(t, q.token)).rejects.toMatchObject({ status: 403 });
  });

  it('refuses an expired token', async () => {
    const clock = manualClock(new Date());
    const s = await startTestServer({}, { clock });
    try {
      const g = await createApp(s);
      const meetingId = await createMeeting(s, g);
      const p = await addParticipant(s, g, meetingId, 'late', 'group_call_host');
      clock.advance(86_401_000);
      const err = await connect(s, p.token).catch((e) => e);
      expect(err.status).toBe(401);
      expect(err.body).toContain('expired');
    } finally {
      await s.stop();
    }
  });
});

describe('a meeting, live', () => {
  it('host, waitlist approval, chat, polls, mute, kick, session end and signed webhooks', async () => {
    const meetingId = await createMeeting(t, f, { title: 'Live one' });
    const hook = await t.call('POST', `${f.base}/webhooks`, {
      name: 'all',
      url: `${receiver.url}/fail-once`,
      events: ['meeting.started', 'meeting.ended', 'meeting.participantJoined', 'meeting.participantLeft'],
    });
    expect(hook.status).toBe(201);
    const rejecting = await t.call('POST', `${f.base}/webhooks`, { name: 'rejects', url: `${receiver.url}/reject`, events: ['session.started'] });
    expect(rejecting.status).toBe(201);

    const hostP = await addParticipant(t, f, meetingId, 'host', 'group_call_host', 'Hana');
    const guestP = await addParticipant(t, f, meetingId, 'guest', 'group_call_participant', 'Gus');
    const host = await connect(t, hostP.token);
    const joined = await host.request({ t: 'join' });
    expect(joined.ok).toBe(true);
    expect(joined.data).toMatchObject({ state: 'joined', self: { userId: hostP.id, name: 'Hana', isHost: true }, peers: [] });
    const sessionId = joined.data.meta.sessionId;

    const active = { body: (await sdk(t).realtimeKit.activeSession.getActiveSession(meetingId, { account_id: t.accountId, app_id: f.appId })) as any };
    expect(active.body.data).toMatchObject({ id: sessionId, associated_id: meetingId, status: 'LIVE', live_participants: 1, meeting_display_name: 'Live one' });

    // The guest's preset waits for a host.
    const guest = await connect(t, guestP.token);
    const waiting = await guest.request({ t: 'join', name: 'Gus G.' });
    expect(waiting.data).toEqual({ state: 'waitlisted' });
    const added = await host.next((e) => e.t === 'waitlistUpdate' && e.added);
    expect(added.added.name).toBe('Gus G.');
    // A guest cannot admit anyone or chat before joining.
    expect((await guest.request({ t: 'chat', kind: 'text', text: 'hi' })).error.code).toBe('not_joined');
    const accept = await host.request({ t: 'waitlist.accept', peerId: added.added.id });
    expect(accept.ok).toBe(true);
    const guestJoined = await guest.next((e) => e.t === 'joined');
    expect(guestJoined.peers.map((p: any) => p.userId)).toEqual([hostP.id]);
    expect((await host.next((e) => e.t === 'peerJoined')).peer.userId).toBe(guestP.id);

    // Chat round trip; oversized and malformed messages are refused with a reason.
    const sent = await guest.request({ t: 'chat', kind: 'text', text: 'hello there' });
    expect(sent.data).toMatchObject({ type: 'text', message: 'hello there', displayName: 'Gus G.' });
    expect((await host.next((e) => e.t === 'chat')).message.message).toBe('hello there');
    const big = await guest.request({ t: 'chat', kind: 'text', text: 'x'.repeat(4001) });
    expect(big.error).toMatchObject({ code: 'too_large', message: expect.stringContaining('4000') });
    const img = await guest.request({ t: 'chat', kind: 'image', data: 'data:text/html;base64,PGI+' });
    expect(img.error.code).toBe('invalid');
    const pixel = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
    expect((await guest.request({ t: 'chat', kind: 'image', data: pixel })).data.type).toBe('image');
    guest.ws.send('not json');
    expect((await guest.next((e) => e.t === 'error')).code).toBe('invalid');

    // Polls: the guest's preset may vote but not create; one vote each.
    expect((await guest.request({ t: 'poll.create', question: 'Q?', options: ['a', 'b'] })).error.code).toBe('forbidden');
    const poll = await host.request({ t: 'poll.create', question: 'Lunch?', options: ['pizza', 'soup'] });
    expect(poll.ok).toBe(true);
    const voted = await guest.request({ t: 'poll.vote', pollId: poll.data.id, index: 1 });
    expect(voted.data.options[1]).toMatchObject({ text: 'soup', count: 1 });
    expect((await guest.request({ t: 'poll.vote', pollId: poll.data.id, index: 0 })).error.code).toBe('conflict');
    expect((await host.next((e) => e.t === 'poll' && e.poll.options[1].count === 1)).poll.voted).toEqual([guestP.id]);
    const restPoll = (await sdk(t).realtimeKit.activeSession.createPoll(meetingId, { account_id: t.accountId, app_id: f.appId, question: 'From REST?', options: ['yes', 'no'], anonymous: true })) as any;
    expect(restPoll.data).toMatchObject({ action: 'create-poll', poll: { question: 'From REST?' } });
    expect((await guest.next((e) => e.t === 'poll' && e.poll.question === 'From REST?')).poll.anonymous).toBe(true);

    // The whiteboard plugin: activated by the host, strokes reach the guest.
    expect((await host.request({ t: 'plugin.activate', pluginId: 'whiteboard' })).ok).toBe(true);
    await host.request({ t: 'plugin.data', pluginId: 'whiteboard', data: { x0: 1, y0: 2, x1: 3, y1: 4 } });
    expect((await guest.next((e) => e.t === 'plugin' && e.data)).data).toEqual({ x0: 1, y0: 2, x1: 3, y1: 4 });

    // REST mute reaches the live socket; mute-all without allow_unmute locks audio.
    await guest.request({ t: 'media', audioEnabled: true });
    const mute = await t.call('POST', `${f.base}/meetings/${meetingId}/active-session/mute`, { participant_ids: [guestP.id], custom_participant_ids: [] });
    expect(mute.body.data.participants.map((p: any) => p.id)).toEqual([guestP.id]);
    expect(await guest.next((e) => e.t === 'muted')).toMatchObject({ allowUnmute: true });
    const muteAll = await t.call('POST', `${f.base}/meetings/${meetingId}/active-session/mute-all`, { allow_unmute: false });
    expect(muteAll.body.data).toEqual({ action: 'mute-all', muted_participants_count: 2 });
    await guest.next((e) => e.t === 'muted' && e.allowUnmute === false);
    expect((await guest.request({ t: 'media', audioEnabled: true })).error.code).toBe('forbidden');

    // Kick by the spec's body form: the guest's socket closes, the host sees it leave.
    const kick = await t.call('POST', `${f.base}/meetings/${meetingId}/active-session/kick`, { user_ids: [guestP.id] });
    expect(kick.status).toBe(200);
    expect(kick.body.data.participants.map((p: any) => p.custom_participant_id)).toEqual(['guest']);
    expect((await guest.next((e) => e.t === 'kicked')).reason).toBe('KICKED');
    expect((await guest.closed).code).toBe(4001);
    expect((await host.next((e) => e.t === 'peerLeft')).reason).toBe('kicked');

    // Stats reported by a client are the session participant's call statistics.
    expect((await host.request({ t: 'stats', stats: { video: { packetsLost: 0, framesDecoded: 10 } } })).ok).toBe(true);

    // The last one out ends the session (keep-alive capped at 0 for this server).
    await host.request({ t: 'leave' });
    await host.closed;
    const ended = await until(async () => {
      const r = await t.call('GET', `${f.base}/sessions/${sessionId}`);
      return r.body.data.status === 'ENDED' && r.body.data;
    }, 5000, 'session end');
    expect(ended).toMatchObject({ max_concurrent_participants: 2, live_participants: 0, ended_at: expect.any(String) });
    expect((await t.call('GET', `${f.base}/meetings/${meetingId}/active-session`)).status).toBe(404);
    const list = await t.call('GET', `${f.base}/sessions?associated_id=${meetingId}`);
    expect(list.body.data.sessions.map((s: any) => s.id)).toEqual([sessionId]);
    const peers = await t.call('GET', `${f.base}/sessions/${sessionId}/participants`);
    expect(peers.body.data.participants.map((p: any) => p.custom_participant_id).sort()).toEqual(['guest', 'host']);
    expect(peers.body.data.participants.every((p: any) => p.left_at)).toBe(true);
    const hostPeer = peers.body.data.participants.find((p: any) => p.custom_participant_id === 'host');
    const detail = await t.call('GET', `${f.base}/sessions/${sessionId}/participants/${hostPeer.id}`);
    expect(detail.body.data.participant.quality_stats).toMatchObject({ video: { framesDecoded: 10 } });
    // The same through the official client.
    const cf = sdk(t);
    const ids = { account_id: t.accountId, app_id: f.appId };
    const viaSdk = (await cf.realtimeKit.sessions.getSessionDetails(sessionId, ids)) as any;
    expect(viaSdk.data).toMatchObject({ id: sessionId, status: 'ENDED' });
    const sdkPeers = (await cf.realtimeKit.sessions.getSessionParticipants(sessionId, ids)) as any;
    expect(sdkPeers.data.participants).toHaveLength(2);
    const report = (await cf.realtimeKit.sessions.getParticipantDataFromPeerID(hostPeer.id, ids)) as any;
    expect(report.data.participant).toMatchObject({ id: hostPeer.id, custom_participant_id: 'host', quality_stats: { video: { framesDecoded: 10 } } });
    const sdkList = (await cf.realtimeKit.sessions.getSessions(f.appId, { account_id: t.accountId, status: 'ENDED' })) as any;
    expect(sdkList.data.sessions.map((s: any) => s.id)).toContain(sessionId);

    // Webhooks: each event once after a 500 (retried with the same rtk-uuid), all signatures valid.
    const okDeliveries = await until(() => {
      const d = receiver.deliveries.filter((x) => x.path === '/fail-once');
      const events = d.map((x) => x.body.event);
      // Six events, each answered 500 once and then delivered: twelve requests.
      return events.includes('meeting.ended') && d.length >= 12 && d;
    }, 8000, 'webhook deliveries');
    expect(okDeliveries).toHaveLength(12);
    expect(okDeliveries.every((d) => d.verified)).toBe(true);
    const byId = new Map<string, string[]>();
    for (const d of okDeliveries) byId.set(String(d.headers['rtk-uuid']), [...(byId.get(String(d.headers['rtk-uuid'])) ?? []), d.body.event]);
    expect([...byId.values()].every((v) => v.length === 2)).toBe(true);
    const events = [...byId.values()].map((v) => v[0]).sort();
    expect(events).toEqual(['meeting.ended', 'meeting.participantJoined', 'meeting.participantJoined', 'meeting.participantLeft', 'meeting.participantLeft', 'meeting.started'].sort());
    expect(okDeliveries.every((d) => d.headers['rtk-webhook-id'] === hook.body.data.id)).toBe(true);
    const started = okDeliveries.find((d) => d.body.event === 'meeting.started')!.body;
    expect(started.meeting).toMatchObject({ id: meetingId, sessionId, title: 'Live one', status: 'LIVE', organizedBy: { id: f.appId, name: 'live' } });
    const endedHook = okDeliveries.find((d) => d.body.event === 'meeting.ended')!.body;
    expect(endedHook).toMatchObject({ reason: 'ALL_PARTICIPANTS_LEFT', meeting: { status: 'ENDED', endedAt: expect.any(String) } });
    const left = [...new Map(okDeliveries.filter((d) => d.body.event === 'meeting.participantLeft').map((d) => [d.headers['rtk-uuid'], d.body.participant.customParticipantId])).values()];
    expect(left.sort()).toEqual(['guest', 'host']);
    // A 400 is a failed delivery, never retried.
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.deliveries.filter((x) => x.path === '/reject').map((x) => x.body.event)).toEqual(['meeting.started']);
  });

  it('a deleted participant is disconnected at once; kick-all empties the meeting', async () => {
    const meetingId = await createMeeting(t, f);
    const a = await addParticipant(t, f, meetingId, 'a', 'group_call_host');
    const b = await addParticipant(t, f, meetingId, 'b', 'webinar_presenter');
    const ca = await connect(t, a.token);
    await ca.request({ t: 'join' });
    const cb = await connect(t, b.token);
    await cb.request({ t: 'join' });
    await t.call('DELETE', `${f.base}/meetings/${meetingId}/participants/${b.id}`);
    expect((await cb.closed).code).toBe(4001);
    // A waitlisted participant the host turns away is told so and disconnected.
    const w = await addParticipant(t, f, meetingId, 'w', 'group_call_participant');
    const cw = await connect(t, w.token);
    expect((await cw.request({ t: 'join' })).data.state).toBe('waitlisted');
    const waiting = await ca.next((e) => e.t === 'waitlistUpdate' && e.added?.userId === w.id);
    expect((await ca.request({ t: 'waitlist.reject', peerId: waiting.added.id })).ok).toBe(true);
    await cw.next((e) => e.t === 'rejected');
    expect((await cw.closed).code).toBe(4003);
    expect((await ca.request({ t: 'waitlist.accept', peerId: waiting.added.id })).error.code).toBe('not_found');
    // A hidden participant (as a recording's page is) is not one of "all".
    expect((await t.call('POST', `${f.base}/presets`, { name: 'unseen', permissions: { hidden_participant: true } })).status).toBe(201);
    const h = await addParticipant(t, f, meetingId, 'h', 'unseen');
    const ch = await connect(t, h.token);
    await ch.request({ t: 'join' });
    const muted = await t.call('POST', `${f.base}/meetings/${meetingId}/active-session/mute-all`, { allow_unmute: true });
    expect(muted.status).toBe(200);
    await ca.next((e) => e.t === 'muted');
    const all = { body: (await sdk(t).realtimeKit.activeSession.kickAllParticipants(meetingId, { account_id: t.accountId, app_id: f.appId })) as any };
    expect(all.body.data).toEqual({ action: 'kick-all', kicked_participants_count: 1 });
    expect((await ca.closed).code).toBe(4001);
    expect(ch.events.some((e) => e.t === 'muted' || e.t === 'kicked')).toBe(false);
    ch.ws.close();
  });
});

describe('webhook outbox', () => {
  it('an undelivered event survives a restart and is delivered by the next process', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dataDir = mkdtempSync(join(tmpdir(), 'rtk-outbox-'));
    // A port nobody listens on yet: deliveries fail with a network error and are retried.
    const probe = await startReceiver(() => '');
    const port = probe.port;
    await probe.close();
    const first = await startTestServer({ meetingsKeepAliveCap: 0, meetingsWebhookBackoffMs: 60_000 }, { dataDir });
    try {
      const g = await createApp(first, 'durable');
      await first.call('POST', `${g.base}/webhooks`, { name: 'late', url: `http://127.0.0.1:${port}/`, events: ['meeting.started', 'meeting.ended'] });
      const meetingId = await createMeeting(first, g);
      const p = await addParticipant(first, g, meetingId, 'x', 'group_call_host');
      const c = await connect(first, p.token);
      await c.request({ t: 'join' });
      // The process stops with the participant still in the meeting.
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      // Stop without dropping the PostgreSQL schema: the next process opens the same database.
      await first.server.stop();
    }
    const key = { pem: '' };
    const late = await startReceiver(() => key.pem, port);
    const second = await startTestServer({ meetingsWebhookBackoffMs: 50, databaseSchema: first.config.databaseSchema }, { dataDir });
    try {
      key.pem = (await fetch(`${second.url}/.well-known/webhooks.json`).then((r) => r.json())).data.publicKey;
      // The failed attempt scheduled its retry a minute later; a new process retries every
      // pending delivery when it starts.
      const got = await until(() => late.deliveries.find((d) => d.body.event === 'meeting.started'), 8000, 'redelivery after restart');
      expect(got.verified).toBe(true);
      expect(got.body.meeting).toMatchObject({ status: 'LIVE', organizedBy: { name: 'durable' } });
      // The session the stopped process left LIVE is ended by the new one, with its webhook.
      const ended = await until(() => late.deliveries.find((d) => d.body.event === 'meeting.ended'), 8000, 'meeting.ended after restart');
      expect(ended.verified).toBe(true);
      expect(ended.body.meeting).toMatchObject({ id: got.body.meeting.id, sessionId: got.body.meeting.sessionId, status: 'ENDED' });
      const session = await second.call('GET', `/accounts/${second.accountId}/realtime/kit/${got.body.meeting.organizedBy.id}/sessions/${got.body.meeting.sessionId}`);
      expect(session.body.data).toMatchObject({ status: 'ENDED', ended_at: expect.any(String) });
    } finally {
      await second.stop();
      await late.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
