/**
 * Two WebRTC peers in headless Chromium, forced through Outpost's relay
 * (`iceTransportPolicy: 'relay'`) with the ICE servers the credential API hands out, connect and
 * exchange data-channel messages. `getStats()` must show that the selected candidate pair is a
 * relay pair on Outpost's relay address, inside its configured port range, over the TURN URL
 * the test kept (UDP in one case, TCP in the other).
 */
import { existsSync, rmSync } from 'node:fs';
import type { Browser } from 'puppeteer-core';
import { CHROMIUM, launchMediaChromium } from '../../support/chromium.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';

const RELAY_PORTS: [number, number] = [52000, 52999];

interface IceServer {
  urls: string[];
  username?: string;
  credential?: string;
}

interface CandidateStats {
  candidateType: string;
  address?: string;
  ip?: string;
  port: number;
  protocol: string;
  relayProtocol?: string;
  url?: string;
}

interface PeerResult {
  ok: boolean;
  error?: string;
  received?: string[];
  candidates: string[];
  selected?: {
    state: string;
    bytesSent: number;
    bytesReceived: number;
    local: CandidateStats;
    remote: CandidateStats;
  };
}

/**
 * Runs in the page (about:blank). Two peer connections in one page, candidates exchanged
 * directly; A opens a data channel, sends two messages, B echoes them into `received`.
 * Returns the candidate pair A's transport selected, with both candidates.
 */
const PAGE_SCRIPT = String.raw`async (iceServers, timeoutMs) => {
  const cfg = { iceServers, iceTransportPolicy: 'relay' };
  const a = new RTCPeerConnection(cfg);
  const b = new RTCPeerConnection(cfg);
  const candidates = [];
  a.onicecandidate = (e) => { if (e.candidate) { candidates.push('a ' + e.candidate.candidate); b.addIceCandidate(e.candidate); } };
  b.onicecandidate = (e) => { if (e.candidate) { candidates.push('b ' + e.candidate.candidate); a.addIceCandidate(e.candidate); } };
  const received = [];
  const gotTwo = new Promise((resolve) => {
    b.ondatachannel = (e) => {
      e.channel.onmessage = (m) => { received.push(String(m.data)); if (received.length === 2) resolve(); };
    };
  });
  const channel = a.createDataChannel('relay-check');
  const opened = new Promise((resolve) => { channel.onopen = () => resolve(); });
  const timeout = (what) => new Promise((_, reject) => setTimeout(() => reject(new Error(what + ' timed out; ICE ' + a.iceConnectionState + '/' + b.iceConnectionState)), timeoutMs));
  try {
    await a.setLocalDescription(await a.createOffer());
    await b.setRemoteDescription(a.localDescription);
    await b.setLocalDescription(await b.createAnswer());
    await a.setRemoteDescription(b.localDescription);
    await Promise.race([opened, timeout('data channel open')]);
    channel.send('hello through the relay');
    channel.send('x'.repeat(4000));
    await Promise.race([gotTwo, timeout('messages')]);
    const stats = await a.getStats();
    const byId = new Map();
    stats.forEach((s) => byId.set(s.id, s));
    let pairId;
    stats.forEach((s) => { if (s.type === 'transport' && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId; });
    const pair = pairId && byId.get(pairId);
    if (!pair) return { ok: false, error: 'no selected candidate pair', candidates, received };
    const pick = (c) => c && { candidateType: c.candidateType, address: c.address, ip: c.ip, port: c.port, protocol: c.protocol, relayProtocol: c.relayProtocol, url: c.url };
    return {
      ok: true, candidates, received,
      selected: { state: pair.state, bytesSent: pair.bytesSent, bytesReceived: pair.bytesReceived, local: pick(byId.get(pair.localCandidateId)), remote: pick(byId.get(pair.remoteCandidateId)) },
    };
  } catch (err) {
    return { ok: false, error: String(err), candidates, received };
  } finally {
    a.close();
    b.close();
  }
}`;

let t: TestServer;
let browser: Browser | undefined;
let profileDir: string | undefined;
let iceServers: IceServer[];
/** The relay's UDP and TCP ports (the same number unless TCP could not get it). */
const relayPort = { udp: 0, tcp: 0 };

const pgPass = sqlitePassOnly('the subject is media through the relay, not storage');

beforeAll(async () => {
  if (pgPass) return;
  if (!existsSync(CHROMIUM)) {
    const reason = `${CHROMIUM} is missing: install the Debian package 'chromium' (apt-get install -y chromium; scripts/test.sh does this)`;
    console.error(reason);
    throw new Error(reason);
  }
  t = await startTestServer({ relayPorts: RELAY_PORTS.join('-') });
  for (const transport of ['udp', 'tcp'] as const) {
    const l = t.server.listeners.find(
      (x) => x.name === 'TURN/STUN relay' && x.protocol.split('+').includes(transport),
    );
    if (!l) throw new Error(`the relay did not start: ${JSON.stringify(t.server.listeners)}`);
    relayPort[transport] = Number(l.address.split(':').pop());
  }

  const created = await t.call('POST', `/accounts/${t.accountId}/calls/turn_keys`, {
    name: 'webrtc',
  });
  expect(created.status).toBe(201);
  const key = created.body.result as { uid: string; key: string };
  const res = await fetch(`${t.url}/v1/turn/keys/${key.uid}/credentials/generate-ice-servers`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ttl: 600 }),
  });
  expect(res.status).toBe(201);
  const generated = ((await res.json()) as { iceServers: IceServer[] }).iceServers;
  // As browsers do: drop every URL on port 53.
  iceServers = generated
    .map((s) => ({ ...s, urls: s.urls.filter((u) => !/:53(\?|$)/.test(u)) }))
    .filter((s) => s.urls.length > 0);

  ({ browser, profile: profileDir } = await launchMediaChromium('outpost-chromium-'));
});

afterAll(async () => {
  const proc = browser?.process();
  await browser?.close().catch(() => {});
  if (proc && proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
  await t?.stop();
});

/** The ICE servers, keeping only the TURN URL of one transport (and the credential). */
function onlyTurn(transport: 'udp' | 'tcp'): IceServer[] {
  return iceServers
    .filter((s) => s.username)
    .map((s) => ({
      ...s,
      urls: s.urls.filter((u) => u.startsWith('turn:') && u.endsWith(`?transport=${transport}`)),
    }))
    .filter((s) => s.urls.length > 0);
}

async function connectThroughRelay(servers: IceServer[]): Promise<PeerResult> {
  const page = await browser!.newPage();
  try {
    await page.goto('about:blank');
    return (await page.evaluate(
      `(${PAGE_SCRIPT})(${JSON.stringify(servers)}, 15000)`,
    )) as PeerResult;
  } finally {
    await page.close();
  }
}

function describeResult(r: PeerResult): string {
  const received = r.received?.map((m) =>
    m.length > 40 ? `${m.slice(0, 20)}… (${m.length} chars)` : m,
  );
  return JSON.stringify({ ...r, received }, null, 1);
}

function expectRelayPair(r: PeerResult, transport: 'udp' | 'tcp'): void {
  const why = describeResult(r);
  expect(r.ok, why).toBe(true);
  expect(r.received, why).toEqual(['hello through the relay', 'x'.repeat(4000)]);
  const sel = r.selected!;
  // Chromium may report the pair it is already sending on as still 'in-progress'.
  expect(['succeeded', 'in-progress'], why).toContain(sel.state);
  expect(sel.bytesSent, why).toBeGreaterThan(4000);
  expect(sel.bytesReceived, why).toBeGreaterThan(0);
  for (const c of [sel.local, sel.remote]) {
    expect(c.candidateType, why).toBe('relay');
    expect(c.address ?? c.ip, why).toBe('127.0.0.1');
    expect(c.port, why).toBeGreaterThanOrEqual(RELAY_PORTS[0]);
    expect(c.port, why).toBeLessThanOrEqual(RELAY_PORTS[1]);
    // Relayed addresses are UDP (no RFC 6062 TCP relaying).
    expect(c.protocol, why).toBe('udp');
  }
  expect(sel.local.relayProtocol, why).toBe(transport);
  expect(sel.local.url, why).toBe(`turn:127.0.0.1:${relayPort[transport]}?transport=${transport}`);
  // Only relay candidates were gathered.
  for (const line of r.candidates) expect(line, why).toMatch(/ typ relay /);
}

describe.skipIf(pgPass)('WebRTC through the relay in headless Chromium', () => {
  it('the generated ICE servers (port 53 dropped) point at the relay', () => {
    const urls = iceServers.flatMap((s) => s.urls);
    expect(urls).toContain(`turn:127.0.0.1:${relayPort.udp}?transport=udp`);
    expect(urls).toContain(`turn:127.0.0.1:${relayPort.tcp}?transport=tcp`);
    expect(urls.some((u) => /:53(\?|$)/.test(u))).toBe(false);
  });

  it('two peers connect with iceTransportPolicy relay and exchange data (all generated servers)', async () => {
    const r = await connectThroughRelay(iceServers);
    const why = describeResult(r);
    expect(r.ok, why).toBe(true);
    expect(['udp', 'tcp'], why).toContain(r.selected!.local.relayProtocol);
    expectRelayPair(r, r.selected!.local.relayProtocol as 'udp' | 'tcp');
  });

  it('over TURN/UDP only', async () => {
    expectRelayPair(await connectThroughRelay(onlyTurn('udp')), 'udp');
  });

  it('over TURN/TCP only', async () => {
    expectRelayPair(await connectThroughRelay(onlyTurn('tcp')), 'tcp');
  });

  it('a wrong credential gathers no relay candidate and does not connect', async () => {
    const bad = onlyTurn('udp').map((s) => ({
      ...s,
      credential: Buffer.alloc(20, 9).toString('base64'),
    }));
    const page = await browser!.newPage();
    try {
      await page.goto('about:blank');
      const r = (await page.evaluate(
        `(${PAGE_SCRIPT})(${JSON.stringify(bad)}, 4000)`,
      )) as PeerResult;
      expect(r.ok, describeResult(r)).toBe(false);
      expect(r.candidates).toEqual([]);
    } finally {
      await page.close();
    }
  });
});
