/**
 * End to end: credentials minted by the API, used by coturn's real `turnutils_uclient` against
 * the relay a whole Outpost server runs. Valid credentials relay with no loss over UDP and TCP;
 * revoked, deleted-key, expired and wrong credentials are refused; a live allocation stops being
 * relayed within seconds of its credential being revoked or its key deleted.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';

const UCLIENT = '/usr/bin/turnutils_uclient';
const RUN_TIMEOUT_MS = 25_000;

interface Key {
  uid: string;
  key: string;
}

interface Credential {
  urls: string[];
  username: string;
  credential: string;
}

interface Progress {
  /** ms since the client was spawned */
  at: number;
  sent: number;
  received: number;
}

interface UclientRun {
  code: number | null;
  output: string;
  timedOut: boolean;
  progress: Progress[];
  summary: { sent: number; received: number; lost: number } | null;
}

const children = new Set<ChildProcess>();

/**
 * Runs turnutils_uclient; it is killed after `timeoutMs` (or when `stop` resolves). Its
 * once-a-second `start_mclient: msz=…, tot_send_msgs=…, tot_recv_msgs=…` lines are timestamped.
 */
function uclient(
  args: string[],
  opts: { timeoutMs?: number; onProgress?: (p: Progress, child: ChildProcess) => void } = {},
): Promise<UclientRun> {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(UCLIENT, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let output = '';
    let pending = '';
    let timedOut = false;
    const progress: Progress[] = [];
    const onData = (d: Buffer) => {
      const s = d.toString();
      output += s;
      pending += s;
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        const m = /start_mclient: msz=\d+, tot_send_msgs=(\d+), tot_recv_msgs=(\d+)/.exec(line);
        if (!m) continue;
        const p = { at: Date.now() - started, sent: Number(m[1]), received: Number(m[2]) };
        progress.push(p);
        opts.onProgress?.(p, child);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? RUN_TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      children.delete(child);
      const totals = [...output.matchAll(/tot_send_msgs=(\d+), tot_recv_msgs=(\d+)\s*$/gm)].pop();
      const lost = /Total lost packets (\d+) \(/.exec(output);
      const summary =
        totals && lost
          ? { sent: Number(totals[1]), received: Number(totals[2]), lost: Number(lost[1]) }
          : null;
      resolve({ code, output, timedOut, progress, summary });
    });
  });
}

function excerpt(output: string): string {
  return output
    .split('\n')
    .filter((l) => /tot_send_msgs|Total lost|ERROR|error|Cannot/i.test(l))
    .slice(-12)
    .join('\n');
}

let t: TestServer;

async function createKey(name: string): Promise<Key> {
  const res = await t.call('POST', `/accounts/${t.accountId}/calls/turn_keys`, { name });
  if (res.status !== 201) throw new Error(`key create failed: ${res.status} ${res.text}`);
  return res.body.result as Key;
}

async function generate(key: Key, ttl: number): Promise<Credential> {
  const res = await fetch(`${t.url}/v1/turn/keys/${key.uid}/credentials/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ttl }),
  });
  if (res.status !== 201) throw new Error(`generate failed: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { iceServers: Credential }).iceServers;
}

async function revoke(key: Key, username: string, form: 'body' | 'path'): Promise<void> {
  const base = `${t.url}/v1/turn/keys/${key.uid}/credentials`;
  const res =
    form === 'body'
      ? await fetch(`${base}/revoke`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ username }),
        })
      : await fetch(`${base}/${encodeURIComponent(username)}/revoke`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key.key}` },
        });
  if (res.status !== 204) throw new Error(`revoke failed: ${res.status} ${await res.text()}`);
}

async function deleteKey(key: Key): Promise<void> {
  const res = await t.call('DELETE', `/accounts/${t.accountId}/calls/turn_keys/${key.uid}`);
  if (res.status !== 200) throw new Error(`key delete failed: ${res.status} ${res.text}`);
}

/** The port of the URL the API listed for a transport (so the test uses what clients get). */
function portOf(cred: Credential, transport: 'udp' | 'tcp'): string {
  const url = cred.urls.find((u) => u.startsWith('turn:') && u.endsWith(`?transport=${transport}`));
  if (!url) throw new Error(`no turn ${transport} URL in ${JSON.stringify(cred.urls)}`);
  const m = /^turn:(.+):(\d+)\?/.exec(url)!;
  expect(m[1]).toBe('127.0.0.1');
  return m[2];
}

const transportFlags = (transport: 'udp' | 'tcp') => (transport === 'tcp' ? ['-t'] : []);

function clientArgs(cred: Credential, transport: 'udp' | 'tcp', extra: string[]): string[] {
  return [
    ...transportFlags(transport),
    '-y',
    ...extra,
    '-p',
    portOf(cred, transport),
    '-u',
    cred.username,
    '-w',
    cred.credential,
    '127.0.0.1',
  ];
}

async function expectRelayed(cred: Credential, transport: 'udp' | 'tcp'): Promise<void> {
  const r = await uclient(clientArgs(cred, transport, ['-n', '20', '-l', '120']));
  const why = `uclient ${transport}:\n${excerpt(r.output)}`;
  expect(r.timedOut, why).toBe(false);
  expect(r.code, why).toBe(0);
  expect(r.summary, why).not.toBeNull();
  expect(r.summary!.sent, why).toBe(80);
  expect(r.summary!.received, why).toBe(r.summary!.sent);
  expect(r.summary!.lost, why).toBe(0);
}

async function expectRefused(cred: Credential, transport: 'udp' | 'tcp'): Promise<void> {
  const started = Date.now();
  const r = await uclient(clientArgs(cred, transport, ['-n', '3']), { timeoutMs: 15_000 });
  const why = `uclient ${transport}:\n${excerpt(r.output)}`;
  expect(r.timedOut, why).toBe(false);
  expect(r.code, why).not.toBe(0);
  expect(r.output, why).toContain('Cannot complete Allocation');
  expect(r.summary, why).toBeNull();
  // Refused on the first exchange, not after some timeout.
  expect(Date.now() - started, why).toBeLessThan(5_000);
}

/**
 * Starts a long client run (one message per 20 ms per session for ~20 s), calls `cut` once
 * traffic flows, and checks that relaying stopped within a few seconds of the cut while the
 * client was still meant to be sending.
 */
async function expectCutOff(
  cred: Credential,
  transport: 'udp' | 'tcp',
  cut: () => Promise<void>,
): Promise<void> {
  const messages = 1000;
  let cutAt = -1;
  let cutting: Promise<void> | undefined;
  let cutError: unknown;
  const run = uclient(clientArgs(cred, transport, ['-n', String(messages), '-z', '20']), {
    timeoutMs: 30_000,
    onProgress: (p, child) => {
      if (cutAt < 0 && p.received > 20) {
        cutAt = p.at;
        cutting = cut().catch((err: unknown) => {
          cutError = err;
        });
      }
      // Six seconds after the cut is plenty to see whether traffic still flows.
      if (cutAt >= 0 && p.at > cutAt + 6_000) child.kill('SIGKILL');
    },
  });
  const r = await run;
  await cutting;
  if (cutError) throw cutError;
  const why = `uclient ${transport} (cut at ${cutAt} ms):\n${r.progress
    .map((p) => `${p.at} ms: sent ${p.sent}, received ${p.received}`)
    .join('\n')}\n${excerpt(r.output)}`;
  expect(cutAt, why).toBeGreaterThan(0);
  const last = r.progress[r.progress.length - 1];
  expect(last.at, why).toBeGreaterThan(cutAt + 5_000);
  // The last moment the received count still grew…
  let lastGrowth = r.progress[0];
  for (let i = 1; i < r.progress.length; i++) {
    if (r.progress[i].received > r.progress[i - 1].received) lastGrowth = r.progress[i];
  }
  // …is within a few seconds of the cut (progress lines come once a second)…
  expect(lastGrowth.at, why).toBeLessThanOrEqual(cutAt + 3_500);
  // …and far short of what a full run would have delivered (4 sessions × messages).
  expect(last.received, why).toBeLessThan(4 * messages * 0.5);
  if (transport === 'udp') {
    // The client kept sending after the cut; the relay just stopped carrying it.
    expect(last.sent, why).toBeGreaterThan(lastGrowth.sent);
  }
}

beforeAll(async () => {
  if (!existsSync(UCLIENT)) {
    const reason = `${UCLIENT} is missing: install the Debian package 'coturn' (apt-get install -y coturn; scripts/test.sh does this)`;
    console.error(reason);
    throw new Error(reason);
  }
  t = await startTestServer({ relayQuota: 20 });
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await t?.stop();
});

describe('turnutils_uclient with credentials from the API', () => {
  for (const transport of ['udp', 'tcp'] as const) {
    it(`relays client to client over ${transport} with no loss`, async () => {
      const key = await createKey(`e2e ${transport}`);
      await expectRelayed(await generate(key, 3600), transport);
    });

    it(`refuses a revoked credential at once over ${transport}`, async () => {
      const key = await createKey(`revoked ${transport}`);
      const cred = await generate(key, 3600);
      await expectRelayed(cred, transport);
      await revoke(key, cred.username, 'body');
      await expectRefused(cred, transport);
      // Other credentials of the same key keep working.
      await expectRelayed(await generate(key, 3600), transport);
    });
  }

  it('refuses the credentials of a deleted key (UDP and TCP)', async () => {
    const key = await createKey('deleted');
    const cred = await generate(key, 3600);
    await deleteKey(key);
    await expectRefused(cred, 'udp');
    await expectRefused(cred, 'tcp');
  });

  it('refuses an expired credential (ttl 1, two seconds later)', async () => {
    const key = await createKey('expired');
    const cred = await generate(key, 1);
    await new Promise((r) => setTimeout(r, 2_100));
    await expectRefused(cred, 'udp');
    await expectRefused(cred, 'tcp');
  });

  it('refuses a wrong password', async () => {
    const key = await createKey('wrong');
    const cred = await generate(key, 3600);
    await expectRefused({ ...cred, credential: Buffer.alloc(20, 7).toString('base64') }, 'udp');
  });
});

describe('live allocations are cut off', () => {
  it('within seconds of a revoke (path form), over UDP', { timeout: 45_000 }, async () => {
    const key = await createKey('live revoke udp');
    const cred = await generate(key, 3600);
    await expectCutOff(cred, 'udp', () => revoke(key, cred.username, 'path'));
  });

  it('within seconds of a revoke (body form), over TCP', { timeout: 45_000 }, async () => {
    const key = await createKey('live revoke tcp');
    const cred = await generate(key, 3600);
    await expectCutOff(cred, 'tcp', () => revoke(key, cred.username, 'body'));
  });

  it('within seconds of the key being deleted, over UDP', { timeout: 45_000 }, async () => {
    const key = await createKey('live delete udp');
    const cred = await generate(key, 3600);
    await expectCutOff(cred, 'udp', () => deleteKey(key));
    await expectRefused(cred, 'udp');
  });
});
