/**
 * Relay keys (`/accounts/{account_id}/calls/turn_keys`) and the credential host
 * (`/v1/turn/keys/{key_id}/credentials/…`) through a real server: key CRUD and its permissions,
 * ttl bounds, bearer authentication, the URL list (only ports really open), both generate forms,
 * and both revoke forms.
 */
import { createHmac } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Attr,
  StunClass,
  StunMethod,
  decodeStun,
  decodeXorAddress,
  encodeStun,
  getAttribute,
  newTransactionId,
} from '../../../src/areas/calls/stun.ts';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';

interface Key {
  uid: string;
  key: string;
  name: string;
  created: string;
  modified: string;
}

interface IceServer {
  urls: string[];
  username: string;
  credential: string;
}

const HEX32 = /^[0-9a-f]{32}$/;
const as = (token: string) => ({ authorization: `Bearer ${token}` });

/** POST to the credential host on the API port (not under /client/v4). */
async function credentials(
  t: TestServer,
  keyId: string,
  op: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any; text: string; headers: Headers }> {
  const h: Record<string, string> = { ...headers };
  let payload: string | undefined;
  if (body !== undefined) {
    payload = typeof body === 'string' ? body : JSON.stringify(body);
    h['content-type'] = 'application/json';
  }
  const res = await fetch(`${t.url}/v1/turn/keys/${keyId}/credentials/${op}`, {
    method: 'POST',
    headers: h,
    body: payload,
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text, headers: res.headers };
}

async function createKey(t: TestServer, name?: string): Promise<Key> {
  const res = await t.call(
    'POST',
    `/accounts/${t.accountId}/calls/turn_keys`,
    name === undefined ? {} : { name },
  );
  if (res.status !== 201) throw new Error(`key create failed: ${res.status} ${res.text}`);
  return res.body.result as Key;
}

/** A listener's address; for the relay, the one serving `transport` (one entry or one each). */
function relayListener(
  t: TestServer,
  name: string,
  transport?: 'udp' | 'tcp',
): { host: string; port: number } {
  const l = t.server.listeners.find(
    (x) => x.name === name && (!transport || x.protocol.split('+').includes(transport)),
  );
  if (!l) throw new Error(`no listener named ${name}: ${JSON.stringify(t.server.listeners)}`);
  const i = l.address.lastIndexOf(':');
  return { host: l.address.slice(0, i), port: Number(l.address.slice(i + 1)) };
}

const nowSec = () => Math.floor(Date.now() / 1000);

/** A STUN Binding over UDP: resolves with the mapped address, rejects after 2 s. */
function stunBindingUdp(host: string, port: number): Promise<{ address: string; port: number }> {
  return new Promise((resolve, reject) => {
    const sock = dgram.createSocket('udp4');
    const tid = newTransactionId();
    const timer = setTimeout(() => {
      sock.close();
      reject(new Error(`no STUN answer from udp ${host}:${port}`));
    }, 2000);
    sock.on('message', (buf) => {
      const res = decodeStun(buf);
      if (!res.ok || !res.message.transactionId.equals(tid)) return;
      clearTimeout(timer);
      sock.close();
      const mapped = decodeXorAddress(getAttribute(res.message, Attr.XorMappedAddress), tid);
      if (res.message.cls !== StunClass.SuccessResponse || !mapped)
        reject(new Error('bad STUN answer'));
      else resolve({ address: mapped.address, port: mapped.port });
    });
    sock.bind(0, '127.0.0.1', () => {
      sock.send(
        encodeStun(
          {
            method: StunMethod.Binding,
            cls: StunClass.Request,
            transactionId: tid,
            attributes: [],
          },
          { fingerprint: true },
        ),
        port,
        host,
      );
    });
  });
}

/** A STUN Binding over a stream (TCP or TLS): true when a success response comes back. */
function stunBindingStream(socket: net.Socket): Promise<boolean> {
  return new Promise((resolve) => {
    const tid = newTransactionId();
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => done(false), 3000);
    function done(ok: boolean) {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    }
    socket.on('error', () => done(false));
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length < 20) return;
      const len = buf.readUInt16BE(2) + 20;
      if (buf.length < len) return;
      const res = decodeStun(buf.subarray(0, len));
      done(
        res.ok &&
          res.message.cls === StunClass.SuccessResponse &&
          res.message.transactionId.equals(tid),
      );
    });
    socket.write(
      encodeStun(
        { method: StunMethod.Binding, cls: StunClass.Request, transactionId: tid, attributes: [] },
        { fingerprint: true },
      ),
    );
  });
}

function tcpConnect(host: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port }, () => resolve(s));
    s.once('error', reject);
  });
}

function tlsConnect(host: string, port: number): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host, port, rejectUnauthorized: false }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Parses `stun:h:p`, `turn:h:p?transport=x`, `turns:h:p?transport=tcp`. */
function parseUrl(url: string): { scheme: string; host: string; port: number; transport?: string } {
  const m = /^(stun|turns?):(.+):(\d+)(?:\?transport=(udp|tcp))?$/.exec(url);
  if (!m) throw new Error(`not an ICE URL: ${url}`);
  return { scheme: m[1], host: m[2], port: Number(m[3]), transport: m[4] };
}

/** Checks that every URL names a port that answers STUN over the URL's transport. */
async function assertUrlsReachable(urls: string[]): Promise<void> {
  for (const url of urls) {
    const u = parseUrl(url);
    if (u.scheme === 'stun' || (u.scheme === 'turn' && u.transport === 'udp')) {
      await expect(stunBindingUdp(u.host, u.port), url).resolves.toMatchObject({
        address: '127.0.0.1',
      });
    } else if (u.scheme === 'turn') {
      expect(await stunBindingStream(await tcpConnect(u.host, u.port)), url).toBe(true);
    } else {
      expect(await stunBindingStream(await tlsConnect(u.host, u.port)), url).toBe(true);
    }
  }
}

let t: TestServer;
const keysPath = () => `/accounts/${t.accountId}/calls/turn_keys`;

beforeAll(async () => {
  t = await startTestServer();
});
afterAll(() => t?.stop());

describe('relay keys API', () => {
  it('create answers 201 with uid, key, name, created, modified; the key secret appears only there', async () => {
    const before = Date.now();
    const res = await t.call('POST', keysPath(), { name: 'my app' });
    expect(res.status).toBe(201);
    expect(res.body.success).toBe(true);
    const k = res.body.result as Key;
    expect(Object.keys(k).sort()).toEqual(['created', 'key', 'modified', 'name', 'uid']);
    expect(k.uid).toMatch(HEX32);
    expect(k.key).toHaveLength(64);
    expect(k.name).toBe('my app');
    expect(Date.parse(k.created)).toBeGreaterThanOrEqual(before - 1000);
    expect(k.modified).toBe(k.created);

    const got = await t.call('GET', `${keysPath()}/${k.uid}`);
    expect(got.status).toBe(200);
    expect(got.body.result).toEqual({
      uid: k.uid,
      name: 'my app',
      created: k.created,
      modified: k.modified,
    });

    const list = await t.call('GET', keysPath());
    expect(list.status).toBe(200);
    const mine = (list.body.result as Key[]).find((x) => x.uid === k.uid);
    expect(mine).toEqual({ uid: k.uid, name: 'my app', created: k.created, modified: k.modified });
    for (const x of list.body.result as Key[]) expect(x).not.toHaveProperty('key');
    expect(list.text).not.toContain(k.key);
  });

  it('create without a name (or without a body) gives the empty name', async () => {
    const a = await t.call('POST', keysPath(), {});
    expect(a.status).toBe(201);
    expect(a.body.result.name).toBe('');
    const b = await t.call('POST', keysPath());
    expect(b.status).toBe(201);
    expect(b.body.result.name).toBe('');
    expect(b.body.result.uid).not.toBe(a.body.result.uid);
    expect(b.body.result.key).not.toBe(a.body.result.key);
  });

  it('a malformed create body is 400', async () => {
    expect((await t.call('POST', keysPath(), { name: 42 })).status).toBe(400);
    expect((await t.call('POST', keysPath(), '{"name":')).status).toBe(400);
  });

  it('PUT renames and moves modified; the key secret does not change', async () => {
    const k = await createKey(t, 'before');
    await new Promise((r) => setTimeout(r, 5));
    const res = await t.call('PUT', `${keysPath()}/${k.uid}`, { name: 'after' });
    expect(res.status).toBe(200);
    expect(res.body.result).toMatchObject({ uid: k.uid, name: 'after', created: k.created });
    expect(res.body.result).not.toHaveProperty('key');
    expect(Date.parse(res.body.result.modified)).toBeGreaterThan(Date.parse(k.modified));
    expect((await t.call('GET', `${keysPath()}/${k.uid}`)).body.result.name).toBe('after');
    // The secret still mints credentials.
    expect((await credentials(t, k.uid, 'generate', {}, as(k.key))).status).toBe(201);
  });

  it('DELETE returns the deleted key; it is gone afterwards, and its secret no longer mints', async () => {
    const k = await createKey(t, 'doomed');
    const del = await t.call('DELETE', `${keysPath()}/${k.uid}`);
    expect(del.status).toBe(200);
    expect(del.body.result).toEqual({
      uid: k.uid,
      name: 'doomed',
      created: k.created,
      modified: k.modified,
    });
    expect((await t.call('GET', `${keysPath()}/${k.uid}`)).status).toBe(404);
    expect((await t.call('DELETE', `${keysPath()}/${k.uid}`)).status).toBe(404);
    expect(
      ((await t.call('GET', keysPath())).body.result as Key[]).some((x) => x.uid === k.uid),
    ).toBe(false);
    expect((await credentials(t, k.uid, 'generate', {}, as(k.key))).status).toBe(401);
    expect(
      (
        await credentials(
          t,
          k.uid,
          'revoke',
          { username: `${nowSec() + 60}:${k.uid}.00000000` },
          as(k.key),
        )
      ).status,
    ).toBe(401);
  });

  it('unknown key ids are 404, malformed ids 400', async () => {
    const unknown = 'ab'.repeat(16);
    for (const [method, body] of [['GET'], ['PUT', { name: 'x' }], ['DELETE']] as const) {
      const res = await t.call(method, `${keysPath()}/${unknown}`, body);
      expect(res.status, method).toBe(404);
      expect(res.body.success).toBe(false);
      expect(res.body.errors[0].code).toBeGreaterThan(1000);
    }
    for (const method of ['GET', 'DELETE'] as const) {
      expect((await t.call(method, `${keysPath()}/not-a-key-id`)).status, method).toBe(400);
    }
    expect((await t.call('PUT', `${keysPath()}/not-a-key-id`, { name: 'x' })).status).toBe(400);
    expect((await t.call('GET', `/accounts/not-an-account/calls/turn_keys`)).status).toBe(400);
  });

  it('without credentials 401; a wrong token 401', async () => {
    expect((await t.call('GET', keysPath(), undefined, { authorization: '' })).status).toBe(401);
    expect((await t.call('POST', keysPath(), { name: 'x' }, { authorization: '' })).status).toBe(
      401,
    );
    expect((await t.call('GET', keysPath(), undefined, as('not-a-token'))).status).toBe(401);
  });

  it('Calls Read may read but not write (403); a token without Calls permission gets 403 everywhere', async () => {
    const k = await createKey(t, 'perm');
    const account = { [`com.cloudflare.api.account.${t.accountId}`]: '*' };
    const reader = await createToken(t, ['Calls Read'], account);
    expect((await t.call('GET', keysPath(), undefined, as(reader))).status).toBe(200);
    expect((await t.call('GET', `${keysPath()}/${k.uid}`, undefined, as(reader))).status).toBe(200);
    expect((await t.call('POST', keysPath(), { name: 'x' }, as(reader))).status).toBe(403);
    expect((await t.call('PUT', `${keysPath()}/${k.uid}`, { name: 'x' }, as(reader))).status).toBe(
      403,
    );
    expect((await t.call('DELETE', `${keysPath()}/${k.uid}`, undefined, as(reader))).status).toBe(
      403,
    );

    const writer = await createToken(t, ['Calls Write'], account);
    const made = await t.call('POST', keysPath(), { name: 'by writer' }, as(writer));
    expect(made.status).toBe(201);
    expect(
      (await t.call('DELETE', `${keysPath()}/${made.body.result.uid}`, undefined, as(writer)))
        .status,
    ).toBe(200);

    const other = await createToken(t, ['Magic WAN Read'], account);
    expect((await t.call('GET', keysPath(), undefined, as(other))).status).toBe(403);
    expect((await t.call('POST', keysPath(), { name: 'x' }, as(other))).status).toBe(403);
    expect((await t.call('GET', `${keysPath()}/${k.uid}`, undefined, as(other))).status).toBe(403);
    // Unchanged by the refused writes.
    expect((await t.call('GET', `${keysPath()}/${k.uid}`)).body.result.name).toBe('perm');
  });
});

describe('credentials: generate', () => {
  let k: Key;
  beforeAll(async () => {
    k = await createKey(t, 'creds');
  });

  it('default ttl is 86400: username <expiry>:<label>, credential base64 HMAC-SHA1 of the key secret', async () => {
    for (const body of [undefined, {}]) {
      const before = nowSec();
      const res = await credentials(t, k.uid, 'generate', body, as(k.key));
      expect(res.status).toBe(201);
      expect(res.headers.get('content-type')).toContain('application/json');
      const ice = res.body.iceServers as IceServer;
      expect(Object.keys(res.body)).toEqual(['iceServers']);
      expect(Array.isArray(ice)).toBe(false);
      const m = /^(\d+):(.+)$/.exec(ice.username);
      expect(m).not.toBeNull();
      const expiry = Number(m![1]);
      expect(expiry).toBeGreaterThanOrEqual(before + 86_400);
      expect(expiry).toBeLessThanOrEqual(nowSec() + 86_400 + 1);
      expect(ice.credential).toBe(createHmac('sha1', k.key).update(ice.username).digest('base64'));
      expect(Buffer.from(ice.credential, 'base64')).toHaveLength(20);
    }
  });

  it('every call mints a different username', async () => {
    const a = await credentials(t, k.uid, 'generate', { ttl: 600 }, as(k.key));
    const b = await credentials(t, k.uid, 'generate', { ttl: 600 }, as(k.key));
    expect(a.body.iceServers.username).not.toBe(b.body.iceServers.username);
  });

  it('ttl 1 and 172800 are accepted; the expiry follows', async () => {
    for (const ttl of [1, 172_800]) {
      const before = nowSec();
      const res = await credentials(t, k.uid, 'generate', { ttl }, as(k.key));
      expect(res.status, `ttl ${ttl}`).toBe(201);
      const expiry = Number(String(res.body.iceServers.username).split(':')[0]);
      expect(expiry).toBeGreaterThanOrEqual(before + ttl);
      expect(expiry).toBeLessThanOrEqual(nowSec() + ttl + 1);
    }
  });

  it('ttl 0, 172801, negative, fractional or not a number is 400 (both generate forms)', async () => {
    for (const op of ['generate', 'generate-ice-servers']) {
      for (const ttl of [0, 172_801, -5, 1.5, 'x', '3600', null]) {
        const res = await credentials(t, k.uid, op, { ttl }, as(k.key));
        expect(res.status, `${op} ttl ${JSON.stringify(ttl)}`).toBe(400);
        expect(res.body.success).toBe(false);
        expect(res.body.errors[0].message).toMatch(/ttl/);
      }
      expect((await credentials(t, k.uid, op, '{"ttl":', as(k.key))).status).toBe(400);
    }
  });

  it('a wrong, missing or other key’s bearer is 401; an unknown or malformed key id is refused', async () => {
    const other = await createKey(t, 'other');
    for (const op of ['generate', 'generate-ice-servers']) {
      const cases: Array<[string, Record<string, string>]> = [
        ['no header', {}],
        ['wrong secret', as('x'.repeat(64))],
        ['another key', as(other.key)],
        ['empty bearer', { authorization: 'Bearer ' }],
        ['not bearer', { authorization: `Basic ${k.key}` }],
        ['account token', as(t.token)],
      ];
      for (const [what, headers] of cases) {
        const res = await credentials(t, k.uid, op, { ttl: 60 }, headers);
        expect(res.status, `${op}: ${what}`).toBe(401);
        expect(res.body.success).toBe(false);
        expect(res.text).not.toContain(k.key);
      }
      const unknown = await credentials(t, 'cd'.repeat(16), op, { ttl: 60 }, as(k.key));
      expect([401, 404], `${op}: unknown key`).toContain(unknown.status);
      const malformed = await credentials(t, 'nope', op, { ttl: 60 }, as(k.key));
      expect([400, 401, 404], `${op}: malformed key`).toContain(malformed.status);
    }
  });

  it('lists the platform forms on ports really open: the 53 and 80 forms fall back to the relay port, each answering STUN', async () => {
    const relay = relayListener(t, 'TURN/STUN relay', 'udp');
    const tcp = relayListener(t, 'TURN/STUN relay', 'tcp');
    const res = await credentials(t, k.uid, 'generate', { ttl: 60 }, as(k.key));
    const urls = res.body.iceServers.urls as string[];
    expect(urls).toEqual([
      `stun:${relay.host}:${relay.port}`,
      `turn:${relay.host}:${relay.port}?transport=udp`,
      `turn:${tcp.host}:${tcp.port}?transport=tcp`,
      `turn:${relay.host}:${relay.port}?transport=udp`,
      `turn:${tcp.host}:${tcp.port}?transport=tcp`,
    ]);
    // No TLS listener: no turns forms; with --turn-port 0 the alternatives are not opened.
    expect(t.server.listeners.some((l) => l.name === 'TURN over TLS')).toBe(false);
    expect(urls.some((u) => u.startsWith('turns:'))).toBe(false);
    expect(urls.some((u) => /:(53|80|443)(\?|$)/.test(u))).toBe(false);
    await assertUrlsReachable(urls);
  });

  it('generate-ice-servers answers 201 with the official array form and the same credential scheme', async () => {
    const relay = relayListener(t, 'TURN/STUN relay', 'udp');
    const tcp = relayListener(t, 'TURN/STUN relay', 'tcp');
    const before = nowSec();
    const res = await credentials(t, k.uid, 'generate-ice-servers', { ttl: 3600 }, as(k.key));
    expect(res.status).toBe(201);
    const servers = res.body.iceServers as Array<Partial<IceServer>>;
    expect(Array.isArray(servers)).toBe(true);
    expect(servers).toHaveLength(2);
    expect(servers[0]).toEqual({ urls: [`stun:${relay.host}:${relay.port}`] });
    expect(servers[1].urls).toEqual([
      `turn:${relay.host}:${relay.port}?transport=udp`,
      `turn:${tcp.host}:${tcp.port}?transport=tcp`,
      `turn:${relay.host}:${relay.port}?transport=udp`,
      `turn:${tcp.host}:${tcp.port}?transport=tcp`,
    ]);
    const username = servers[1].username!;
    expect(Number(username.split(':')[0])).toBeGreaterThanOrEqual(before + 3600);
    expect(servers[1].credential).toBe(createHmac('sha1', k.key).update(username).digest('base64'));
    const dflt = await credentials(t, k.uid, 'generate-ice-servers', undefined, as(k.key));
    expect(dflt.status).toBe(201);
    expect(Number(String(dflt.body.iceServers[1].username).split(':')[0])).toBeGreaterThanOrEqual(
      before + 86_400,
    );
  });

  it('is reachable under /client/v4 as well', async () => {
    const res = await fetch(`${t.api}/v1/turn/keys/${k.uid}/credentials/generate`, {
      method: 'POST',
      headers: { ...as(k.key), 'content-type': 'application/json' },
      body: JSON.stringify({ ttl: 60 }),
    });
    expect(res.status).toBe(201);
    expect(((await res.json()) as { iceServers: IceServer }).iceServers.username).toMatch(/^\d+:/);
  });
});

describe('credentials: revoke', () => {
  let k: Key;
  let other: Key;
  beforeAll(async () => {
    k = await createKey(t, 'revoker');
    other = await createKey(t, 'bystander');
  });

  const mint = async (key: Key) =>
    (await credentials(t, key.uid, 'generate', { ttl: 600 }, as(key.key))).body
      .iceServers as IceServer;

  it('body form: 204 with an empty body; again: still 204', async () => {
    const ice = await mint(k);
    for (let i = 0; i < 2; i++) {
      const res = await credentials(t, k.uid, 'revoke', { username: ice.username }, as(k.key));
      expect(res.status).toBe(204);
      expect(res.text).toBe('');
    }
  });

  it('path form (username URL-encoded or not): 204 with an empty body', async () => {
    for (const encode of [true, false]) {
      const ice = await mint(k);
      const name = encode ? encodeURIComponent(ice.username) : ice.username;
      const res = await credentials(t, k.uid, `${name}/revoke`, undefined, as(k.key));
      expect(res.status, `encoded: ${encode}`).toBe(204);
      expect(res.text).toBe('');
    }
  });

  it('a username minted by another key is 400 (body and path forms), and stays usable', async () => {
    const theirs = await mint(other);
    const body = await credentials(t, k.uid, 'revoke', { username: theirs.username }, as(k.key));
    expect(body.status).toBe(400);
    expect(body.body.success).toBe(false);
    const path = await credentials(
      t,
      k.uid,
      `${encodeURIComponent(theirs.username)}/revoke`,
      undefined,
      as(k.key),
    );
    expect(path.status).toBe(400);
    // The owner can still revoke it.
    expect(
      (await credentials(t, other.uid, 'revoke', { username: theirs.username }, as(other.key)))
        .status,
    ).toBe(204);
  });

  it('malformed usernames and bodies are 400', async () => {
    for (const body of [{ username: 'no-expiry' }, { username: '' }, {}, { username: 5 }, 'x']) {
      const res = await credentials(t, k.uid, 'revoke', body, as(k.key));
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
  });

  it('wrong or missing bearer is 401 (body and path forms)', async () => {
    const ice = await mint(k);
    for (const headers of [{}, as(other.key), as('y'.repeat(64))]) {
      expect(
        (await credentials(t, k.uid, 'revoke', { username: ice.username }, headers)).status,
      ).toBe(401);
      expect(
        (
          await credentials(
            t,
            k.uid,
            `${encodeURIComponent(ice.username)}/revoke`,
            undefined,
            headers,
          )
        ).status,
      ).toBe(401);
    }
  });
});

describe('credentials with TURN over TLS (relayTls: self-signed)', () => {
  let ts: TestServer;
  beforeAll(async () => {
    ts = await startTestServer({ relayTls: 'self-signed', turnsPort: 0 });
  });
  afterAll(() => ts?.stop());

  it('adds turns:<host>:<tls port>?transport=tcp for the TLS listener, which answers STUN over TLS', async () => {
    const key = await createKey(ts, 'tls');
    const relay = relayListener(ts, 'TURN/STUN relay', 'udp');
    const tcp = relayListener(ts, 'TURN/STUN relay', 'tcp');
    const tlsl = relayListener(ts, 'TURN over TLS');
    expect(tlsl.port).toBeGreaterThan(0);
    const res = await credentials(ts, key.uid, 'generate', { ttl: 60 }, as(key.key));
    expect(res.status).toBe(201);
    const urls = res.body.iceServers.urls as string[];
    expect(urls).toEqual([
      `stun:${relay.host}:${relay.port}`,
      `turn:${relay.host}:${relay.port}?transport=udp`,
      `turn:${tcp.host}:${tcp.port}?transport=tcp`,
      `turn:${relay.host}:${relay.port}?transport=udp`,
      `turn:${tcp.host}:${tcp.port}?transport=tcp`,
      `turns:${tlsl.host}:${tlsl.port}?transport=tcp`,
      `turns:${tlsl.host}:${tlsl.port}?transport=tcp`,
    ]);
    await assertUrlsReachable(urls);

    const arr = await credentials(ts, key.uid, 'generate-ice-servers', { ttl: 60 }, as(key.key));
    expect(arr.status).toBe(201);
    expect(arr.body.iceServers[1].urls).toContain(`turns:${tlsl.host}:${tlsl.port}?transport=tcp`);
  });

  it('the self-signed certificate names the relay host', async () => {
    const tlsl = relayListener(ts, 'TURN over TLS');
    const sock = await tlsConnect(tlsl.host, tlsl.port);
    try {
      const cert = sock.getPeerCertificate();
      expect(cert.subjectaltname).toContain(tlsl.host);
    } finally {
      sock.destroy();
    }
  });
});
