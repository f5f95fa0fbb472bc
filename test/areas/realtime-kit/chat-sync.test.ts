/**
 * Chat export: a session that had chat messages is followed, when it ends, by `meeting.chatSynced`
 * through the webhook outbox (signature checked with the published key); its link serves the
 * chat as CSV and refuses a changed signature; `…/sessions/{id}/chat` answers a fresh link; a
 * session without chat produces no such event and no chat (404).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestServer } from '../../support/server.ts';
import { addParticipant, connect, createMeeting, parseCsv, startWithReceiver, until, type Fixture, type Receiver } from './support.ts';

let t: TestServer;
let f: Fixture;
let receiver: Receiver;
let stop: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ t, f, receiver, stop } = await startWithReceiver('chat'));
});
afterAll(async () => stop?.());

/** One participant joins, optionally chats, and leaves; resolves with the ended session's id. */
async function session(meetingId: string, chat: boolean): Promise<string> {
  const p = await addParticipant(t, f, meetingId, `host-${chat}`, 'group_call_host', 'Ada, "the host"');
  const c = await connect(t, p.token);
  const joined = await c.request({ t: 'join' });
  const sessionId = joined.data.meta.sessionId as string;
  if (chat) {
    expect((await c.request({ t: 'chat', kind: 'text', text: 'hello, world\nsecond line' })).ok).toBe(true);
    expect((await c.request({ t: 'chat', kind: 'image', data: 'data:image/png;base64,iVBORw0KGgo=' })).ok).toBe(true);
    expect((await c.request({ t: 'chat', kind: 'text', text: '=HYPERLINK("x")' })).ok).toBe(true);
  }
  await c.request({ t: 'leave' });
  await c.closed;
  await until(async () => (await t.call('GET', `${f.base}/sessions/${sessionId}`)).body.data.status === 'ENDED', 5000, 'session end');
  return sessionId;
}


describe('meeting.chatSynced', () => {
  it('is delivered after a session with chat ends, with a working signed CSV link', async () => {
    const hook = await t.call('POST', `${f.base}/webhooks`, { name: 'chat', url: `${receiver.url}/fail-once`, events: ['meeting.chatSynced', 'meeting.ended'] });
    expect(hook.status).toBe(201);
    const meetingId = await createMeeting(t, f, { title: 'Chatty' });

    const quiet = await session(meetingId, false);
    const sessionId = await session(meetingId, true);

    const synced = await until(() => receiver.deliveries.filter((d) => d.body.event === 'meeting.chatSynced' && d.path === '/fail-once').length >= 2 && receiver.deliveries, 8000, 'chatSynced delivery');
    const chatEvents = synced.filter((d) => d.body.event === 'meeting.chatSynced');
    // Retried once after the 500 with the same rtk-uuid; only the session that had chat.
    expect(chatEvents).toHaveLength(2);
    expect(new Set(chatEvents.map((d) => d.headers['rtk-uuid'])).size).toBe(1);
    expect(chatEvents.every((d) => d.verified)).toBe(true);
    const body = chatEvents[0].body;
    expect(body.meeting).toMatchObject({ id: meetingId, sessionId, title: 'Chatty', status: 'ENDED' });
    expect(Date.parse(body.chatDownloadUrlExpiry)).toBeGreaterThan(Date.now());
    // meeting.ended of the same session comes first.
    const order = synced.map((d) => `${d.body.event}:${d.body.meeting.sessionId}`);
    expect(order.indexOf(`meeting.ended:${sessionId}`)).toBeLessThan(order.indexOf(`meeting.chatSynced:${sessionId}`));
    expect(order.some((e) => e === `meeting.chatSynced:${quiet}`)).toBe(false);

    const csv = await fetch(body.chatDownloadUrl);
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-type')).toMatch(/^text\/csv/);
    const csvText = await csv.text();
    const rows = parseCsv(csvText);
    expect(rows[0]).toEqual(['id', 'participantId', 'sessionId', 'meetingId', 'displayName', 'pinned', 'isEdited', 'payloadType', 'payload', 'createdAt']);
    expect(rows.slice(1).map((r) => [r[2], r[3], r[4], r[7], r[8]])).toEqual([
      [sessionId, meetingId, 'Ada, "the host"', 'TEXT_MESSAGE', 'hello, world\nsecond line'],
      [sessionId, meetingId, 'Ada, "the host"', 'IMAGE_MESSAGE', 'data:image/png;base64,iVBORw0KGgo='],
      // A spreadsheet formula is neutralised.
      [sessionId, meetingId, 'Ada, "the host"', 'TEXT_MESSAGE', '\'=HYPERLINK("x")'],
    ]);
    // One chat store, one CSV form: the session's chat route serves the same file.
    const direct = await t.call('GET', `${f.base}/sessions/${sessionId}/chat`, undefined, { accept: 'text/csv' });
    expect(direct.status).toBe(200);
    expect(direct.text).toBe(csvText);

    // A changed signature or expiry is refused; missing parameters are a 400.
    const u = new URL(body.chatDownloadUrl);
    u.searchParams.set('expires', String(Number(u.searchParams.get('expires')) + 60));
    expect((await fetch(u)).status).toBe(403);
    u.search = '';
    expect((await fetch(u)).status).toBe(400);

    // The REST form answers a fresh link to the session's chat.
    const link = await t.call('GET', `${f.base}/sessions/${sessionId}/chat`);
    expect(link.status).toBe(200);
    expect(link.body.data).toMatchObject({ chat_download_url: expect.any(String), chat_download_url_expiry: expect.any(String) });
    expect(await (await fetch(link.body.data.chat_download_url)).text()).toBe(csvText);
    expect((await t.call('GET', `${f.base}/sessions/no-such-session/chat`)).status).toBe(404);
  });
});
