/** Helpers for meeting tests: an app with a meeting, participants, a signalling client, a webhook receiver. */
import http from 'node:http';
import { createVerify } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Page } from 'puppeteer-core';
import WebSocket from 'ws';
import { startTestServer, type TestServer } from '../../support/server.ts';

export interface Fixture {
  appId: string;
  base: string;
}

export async function createApp(t: TestServer, name = 'app'): Promise<Fixture> {
  const r = await t.call('POST', `/accounts/${t.accountId}/realtime/kit/apps`, { name });
  if (r.status !== 200) throw new Error(`app create: ${r.status} ${r.text}`);
  const appId = r.body.data.app.id as string;
  return { appId, base: `/accounts/${t.accountId}/realtime/kit/${appId}` };
}

export async function createMeeting(t: TestServer, f: Fixture, body: Record<string, unknown> = {}): Promise<string> {
  const r = await t.call('POST', `${f.base}/meetings`, { title: 'Test meeting', ...body });
  if (r.status !== 201) throw new Error(`meeting create: ${r.status} ${r.text}`);
  return r.body.data.id;
}

export async function addParticipant(t: TestServer, f: Fixture, meetingId: string, customId: string, preset: string, name?: string): Promise<{ id: string; token: string }> {
  const r = await t.call('POST', `${f.base}/meetings/${meetingId}/participants`, { custom_participant_id: customId, preset_name: preset, name: name ?? customId });
  if (r.status !== 201) throw new Error(`participant add: ${r.status} ${r.text}`);
  return { id: r.body.data.id, token: r.body.data.token };
}

export interface Client {
  ws: WebSocket;
  events: any[];
  closed: Promise<{ code: number; reason: string }>;
  /** Resolves with the first event (past or future) that matches. */
  next(pred: (e: any) => boolean, ms?: number): Promise<any>;
  request(msg: Record<string, unknown>): Promise<any>;
}

export function socketUrl(t: TestServer, token: string): string {
  return `${t.url.replace(/^http/, 'ws')}/realtime/kit/socket?authToken=${encodeURIComponent(token)}`;
}

/** Opens the signalling socket; rejects with the HTTP status when the upgrade is refused. */
export function connect(t: TestServer, token: string): Promise<Client> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(socketUrl(t, token));
    const events: any[] = [];
    const waiters: { pred: (e: any) => boolean; resolve: (e: any) => void }[] = [];
    let seq = 0;
    const closed = new Promise<{ code: number; reason: string }>((res) => ws.on('close', (code, reason) => res({ code, reason: reason.toString() })));
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => reject(Object.assign(new Error(`upgrade refused: ${res.statusCode} ${body}`), { status: res.statusCode, body })));
    });
    ws.on('error', reject);
    ws.on('message', (data) => {
      const e = JSON.parse(data.toString());
      events.push(e);
      for (const w of [...waiters]) {
        if (w.pred(e)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(e);
        }
      }
    });
    const client: Client = {
      ws,
      events,
      closed,
      next(pred, ms = 5000) {
        const found = events.find(pred);
        if (found) return Promise.resolve(found);
        return new Promise((res, rej) => {
          const timer = setTimeout(() => rej(new Error(`no matching event in ${ms} ms; saw ${JSON.stringify(events.map((x) => x.t))}`)), ms);
          waiters.push({ pred, resolve: (e) => (clearTimeout(timer), res(e)) });
        });
      },
      async request(msg) {
        const id = `r${++seq}`;
        ws.send(JSON.stringify({ ...msg, id }));
        const reply = await client.next((e) => e.t === 'reply' && e.id === id);
        return reply;
      },
    };
    ws.on('open', () => client.next((e) => e.t === 'hello').then(() => resolve(client), reject));
  });
}

export interface Delivery {
  path: string;
  headers: http.IncomingHttpHeaders;
  raw: string;
  body: any;
  verified: boolean;
}

/**
 * A webhook receiver: verifies `rtk-signature` over the raw body with the published key. Paths
 * decide the answer: `/fail-once` answers 500 to the first attempt of each delivery, `/reject`
 * answers 400, anything else 200.
 */
export async function startReceiver(publicKeyPem: () => string, port = 0): Promise<{ url: string; port: number; deliveries: Delivery[]; close(): Promise<void> }> {
  const deliveries: Delivery[] = [];
  const seen = new Set<string>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const sig = String(req.headers['rtk-signature'] ?? '');
      deliveries.push({
        path: req.url ?? '',
        headers: req.headers,
        raw,
        body: JSON.parse(raw),
        // Checked when read: the key may be fetched after the delivery arrived.
        get verified() {
          return createVerify('RSA-SHA256').update(raw).verify(publicKeyPem(), sig, 'base64');
        },
      });
      const id = String(req.headers['rtk-uuid']);
      if (req.url === '/fail-once' && !seen.has(id)) {
        seen.add(id);
        res.writeHead(500).end('try again');
        return;
      }
      res.writeHead(req.url === '/reject' ? 400 : 200).end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  const p = (server.address() as AddressInfo).port;
  return { url: `http://127.0.0.1:${p}`, port: p, deliveries, close: () => new Promise((r) => server.close(() => r())) };
}

export async function until<T>(fn: () => T | undefined | false | Promise<T | undefined | false>, ms = 5000, what = 'condition'): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Rows of an RFC 4180 CSV text (quoted fields, doubled quotes, CRLF rows). */
export function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ',') {
      row.push(field);
      field = '';
    } else if (ch === '\r' && text[i + 1] === '\n') {
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
      i++;
    } else field += ch;
  }
  if (field || row.length) rows.push([...row, field]);
  return rows;
}

export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/** A test server with quick webhook retries, an app named `name`, and a receiver that checks signatures with its published key. */
export async function startWithReceiver(name: string): Promise<{ t: TestServer; f: Fixture; receiver: Receiver; stop(): Promise<void> }> {
  const t = await startTestServer({ meetingsKeepAliveCap: 0, meetingsWebhookBackoffMs: 50 });
  const f = await createApp(t, name);
  const publicKey = (await fetch(`${t.url}/.well-known/webhooks.json`).then((r) => r.json())).data.publicKey as string;
  const receiver = await startReceiver(() => publicKey);
  return {
    t,
    f,
    receiver,
    stop: async () => {
      await t.stop();
      await receiver.close();
    },
  };
}

/** Joins a meeting in a browser page through the SDK Outpost serves, with camera and microphone on (`window.meeting`). */
export async function joinInPage(page: Page, origin: string, token: string): Promise<void> {
  await page.goto(`${origin}/realtime/kit/sdk.d.ts`);
  // A string, not a function: the test's bundler would rewrite a dynamic import inside a function.
  await page.evaluate(`(async () => {
    const { default: RTK } = await import('/realtime/kit/sdk.js');
    const m = await RTK.init({ authToken: ${JSON.stringify(token)}, defaults: { audio: true, video: true } });
    await m.join();
    window.meeting = m;
  })()`);
}
