/**
 * The media host's refusals and envelope: unknown app, wrong secret, CORS preflight, bodies that
 * are not JSON or not SDP, unknown sessions and tracks, the per-session rate limit, data channels
 * before a transport exists, and deleting an app closing its sessions.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { createApp, sfuCall, type SfuApp } from './sfu-support.ts';

let t: TestServer;
let app: SfuApp;

beforeAll(async () => {
  t = await startTestServer();
  app = await createApp(t);
});
afterAll(() => t?.stop());

describe('media host: authentication and CORS', () => {
  it('unknown app → 404 not_found; wrong or missing secret → 401 unauthorized', async () => {
    const unknown = await sfuCall(t, { uid: '0'.repeat(32), secret: app.secret }, 'POST', '/sessions/new');
    expect(unknown.status).toBe(404);
    expect(unknown.body.errorCode).toBe('not_found');
    const malformed = await sfuCall(t, { uid: 'nope', secret: app.secret }, 'POST', '/sessions/new');
    expect(malformed.status).toBe(404);
    const wrong = await sfuCall(t, { ...app, secret: 'x'.repeat(64) }, 'POST', '/sessions/new');
    expect(wrong.status).toBe(401);
    expect(wrong.body.errorCode).toBe('unauthorized');
    const none = await sfuCall(t, app, 'POST', '/sessions/new', undefined, { authorization: '' });
    expect(none.status).toBe(401);
  });

  it('answers the preflight for Authorization and marks answers with the origin', async () => {
    const pre = await fetch(`${t.url}/v1/apps/${app.uid}/sessions/new`, {
      method: 'OPTIONS',
      headers: { origin: 'http://page.localhost', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get('access-control-allow-origin')).toBe('http://page.localhost');
    expect(pre.headers.get('access-control-allow-headers')).toContain('authorization');
    expect(pre.headers.get('access-control-allow-methods')).toContain('PUT');
    const pre2 = await fetch(`${t.url}/v1/apps/${app.uid}/sessions/${'a'.repeat(32)}/tracks/new`, { method: 'OPTIONS', headers: { origin: 'http://x.localhost' } });
    expect(pre2.status).toBe(204);
    const res = await sfuCall(t, app, 'POST', '/sessions/new', undefined, { origin: 'http://page.localhost' });
    expect(res.headers.get('access-control-allow-origin')).toBe('http://page.localhost');
    expect(res.headers.get('vary')).toBe('Origin');
  });
});

describe('media host: bad input', () => {
  it('an offer that is not SDP → 400 invalid_session_description; not JSON → decoding_error', async () => {
    const notSdp = await sfuCall(t, app, 'POST', '/sessions/new', { sessionDescription: { type: 'offer', sdp: 'hello' } });
    expect(notSdp.status).toBe(400);
    expect(notSdp.body.errorCode).toBe('invalid_session_description');
    const s = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const push = await sfuCall(t, app, 'POST', `/sessions/${s}/tracks/new`, { sessionDescription: { type: 'offer', sdp: 42 }, tracks: [{ location: 'local', trackName: 'a' }] });
    expect(push.status).toBe(400);
    expect(push.body.errorCode).toBe('invalid_session_description');
    const answerAsOffer = await sfuCall(t, app, 'POST', `/sessions/${s}/tracks/new`, { sessionDescription: { type: 'answer', sdp: 'v=0\r\nm=audio 9 UDP 0\r\n' }, tracks: [{ location: 'local', trackName: 'a' }] });
    expect(answerAsOffer.body.errorCode).toBe('invalid_session_description');
    const notJson = await sfuCall(t, app, 'POST', `/sessions/${s}/tracks/new`, '{"tracks":');
    expect(notJson.status).toBe(400);
    expect(notJson.body.errorCode).toBe('decoding_error');
    const wrongType = await sfuCall(t, app, 'POST', `/sessions/${s}/tracks/new`, { tracks: [{ location: 'upstairs' }] });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body.errorCode).toBe('invalid_params');
    expect(wrongType.body.errorDescription).toContain('tracks.0.location');
    const tooMany = await sfuCall(t, app, 'POST', `/sessions/${s}/tracks/new`, { tracks: Array.from({ length: 65 }, () => ({ location: 'remote', sessionId: s, trackName: 'x' })) });
    expect(tooMany.body.errorCode).toBe('invalid_params');
    const noAnswerPending = await sfuCall(t, app, 'PUT', `/sessions/${s}/renegotiate`, { sessionDescription: { type: 'answer', sdp: 'v=0\r\nm=audio 9 UDP 0\r\n' } });
    expect(noAnswerPending.status).toBe(400);
    expect(noAnswerPending.body.errorCode).toBe('invalid_session_description');
  });

  it('unknown session → session_error; pulling a missing track → item not_found_track_error; closing a missing track → close_track_error', async () => {
    const missing = await sfuCall(t, app, 'GET', `/sessions/${'b'.repeat(32)}`);
    expect(missing.status).toBe(404);
    expect(missing.body.errorCode).toBe('session_error');
    const s = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const pull = await sfuCall(t, app, 'POST', `/sessions/${s}/tracks/new`, { tracks: [{ location: 'remote', sessionId: s, trackName: 'ghost' }] });
    expect(pull.status).toBe(200);
    expect(pull.body.requiresImmediateRenegotiation).toBe(false);
    expect(pull.body.tracks[0]).toMatchObject({ trackName: 'ghost', errorCode: 'not_found_track_error' });
    const close = await sfuCall(t, app, 'PUT', `/sessions/${s}/tracks/close`, { tracks: [{ mid: '7' }, { trackName: 'ghost' }], force: true });
    expect(close.status).toBe(200);
    expect(close.body.tracks).toEqual([
      { mid: '7', errorCode: 'close_track_error', errorDescription: "Track doesn't exist or was already closed" },
      { trackName: 'ghost', errorCode: 'close_track_error', errorDescription: "Track doesn't exist or was already closed" },
    ]);
    const emptyClose = await sfuCall(t, app, 'PUT', `/sessions/${s}/tracks/close`, { tracks: [{}] });
    expect(emptyClose.body.errorCode).toBe('invalid_params');
    const dc = await sfuCall(t, app, 'POST', `/sessions/${s}/datachannels/new`, { dataChannels: [{ location: 'local', dataChannelName: 'c' }] });
    expect(dc.status).toBe(400);
    expect(dc.body.errorCode).toBe('session_error');
    const state = await sfuCall(t, app, 'GET', `/sessions/${s}`);
    expect(state.body).toEqual({ sessionId: s, tracks: [], dataChannels: [] });
  });

  it('more than 50 calls per second on one session → 429 with retry-after', async () => {
    const s = (await sfuCall(t, app, 'POST', '/sessions/new')).body.sessionId;
    const results = await Promise.all(Array.from({ length: 150 }, () => sfuCall(t, app, 'GET', `/sessions/${s}`)));
    const limited = results.filter((r) => r.status === 429);
    expect(limited.length).toBeGreaterThan(0);
    expect(limited[0].headers.get('retry-after')).toBe('1');
    expect(results.filter((r) => r.status === 200).length).toBeLessThan(150);
  });

  it('deleting the app closes its sessions and refuses its host; a malformed offer on sessions/new is refused', async () => {
    const other = await createApp(t, 'short-lived');
    const s = (await sfuCall(t, other, 'POST', '/sessions/new')).body.sessionId;
    expect((await t.call('DELETE', `/accounts/${t.accountId}/calls/apps/${other.uid}`)).status).toBe(200);
    expect((await sfuCall(t, other, 'GET', `/sessions/${s}`)).status).toBe(404);
    const recreated = await createApp(t, 'next');
    expect((await sfuCall(t, recreated, 'GET', `/sessions/${s}`)).status).toBe(404);
    // An offer werift cannot apply (no ICE or DTLS attributes) is refused, not a 500.
    const bad = await sfuCall(t, app, 'POST', '/sessions/new', { sessionDescription: { type: 'offer', sdp: 'v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n' } });
    expect(bad.status).toBe(400);
  });
});

/** One request to the API port with a chosen Host header (fetch keeps the URL's own host). */
function hostRequest(host: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<{ status: number; body: any }> {
  const u = new URL(t.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method, headers: { host, ...(body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}), ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('media host matched by Host', () => {
  it('serves /v1/apps/{appId}/… on the media host and nothing else there; the path alias stays on the API host', async () => {
    const auth = { authorization: `Bearer ${app.secret}` };
    const created = await hostRequest(`sfu.localhost:${new URL(t.url).port}`, 'POST', `/v1/apps/${app.uid}/sessions/new`, auth);
    expect(created.status).toBe(201);
    expect(created.body.sessionId).toMatch(/^[0-9a-f]{32}$/);
    const got = await hostRequest('SFU.localhost', 'GET', `/v1/apps/${app.uid}/sessions/${created.body.sessionId}`, auth);
    expect(got.status).toBe(200);
    // The management API (with valid API credentials) and the prefixed alias are not served on it.
    const mgmt = await hostRequest('sfu.localhost', 'GET', `/accounts/${t.accountId}/calls/apps`, { authorization: `Bearer ${t.token}` });
    expect(mgmt.status).toBe(404);
    expect(mgmt.body.errorCode).toBe('not_found');
    const prefixed = await hostRequest('sfu.localhost', 'POST', `/client/v4/v1/apps/${app.uid}/sessions/new`, auth);
    expect(prefixed.status).toBe(404);
    const health = await hostRequest('sfu.localhost', 'GET', '/healthz');
    expect(health.status).toBe(404);
    // Another host name: the management API and both path forms of the media API answer.
    const api = await hostRequest('127.0.0.1', 'GET', `/accounts/${t.accountId}/calls/apps`, { authorization: `Bearer ${t.token}` });
    expect(api.status).toBe(200);
    expect((await hostRequest('api.localhost', 'POST', `/v1/apps/${app.uid}/sessions/new`, auth)).status).toBe(201);
    expect((await hostRequest('api.localhost', 'POST', `/client/v4/v1/apps/${app.uid}/sessions/new`, auth)).status).toBe(201);
  });

  it('the media host name is configurable (--sfu-host)', async () => {
    const other = await startTestServer({ sfuHost: 'media.example.localhost' });
    try {
      const a = await createApp(other);
      const u = new URL(other.url);
      const req = (host: string, path: string) =>
        new Promise<number>((resolve, reject) => {
          const r = http.request({ host: u.hostname, port: u.port, path, method: 'POST', headers: { host, authorization: `Bearer ${a.secret}` } }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          });
          r.on('error', reject);
          r.end();
        });
      expect(await req('media.example.localhost', `/v1/apps/${a.uid}/sessions/new`)).toBe(201);
      expect(await req('media.example.localhost', `/accounts/${other.accountId}/calls/apps`)).toBe(404);
      // The default name is an ordinary host name on this server.
      expect(await req('sfu.localhost', `/accounts/${other.accountId}/calls/apps`)).not.toBe(404);
    } finally {
      await other.stop();
    }
  });
});
