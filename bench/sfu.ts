/**
 * Media forwarding: one publisher (1.5 Mbit/s video, or separately 48 kbit/s audio) forwarded to
 * N subscribers on loopback, N raised until more than 1 % of the packets are lost; Outpost's
 * forwarder beside Janus (Debian `janus`, videoroom plugin) on the same workload in the same run.
 * Reports consumers served at < 1 % loss, forwarded Mbit/s per server core, and setup latency
 * (session create → subscriber ICE connected) p50/p99. Publisher and subscribers are werift peers
 * in this process. See bench/README.md ("sfu") for the method.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { availableParallelism, loadavg, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MediaStreamTrack, RTCPeerConnection, RtpHeader, RtpPacket } from 'werift';
import { intOption, UsageError } from './lib/args.ts';
import { int, ms, table } from './lib/format.ts';
import { cpuMsOfTree, installCleanupHandlers, onCleanup, runCleanups, spawnNode, tempDir, throwIfInterrupted, type Child } from './lib/procs.ts';
import { summariseProfile } from './lib/profile.ts';

export const description = 'SFU: 1.5 Mbit/s video (and 48 kbit/s audio) to N subscribers until >1 % loss, setup latency: Outpost vs Janus videoroom';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OUTPOST_BIN = join(ROOT, 'bin', 'outpost.js');
const JANUS = '/usr/bin/janus';
const JANUS_LIB = '/usr/lib/x86_64-linux-gnu/janus';
const ROOM = 1234;
const LOSS_LIMIT = 0.01;

const USAGE = `usage: npm run bench -- sfu [options]

  --steps LIST      subscriber counts to try, ascending (default 1,5,10,20,40,80,160)
  --window S        seconds of measured media per step (default 4)
  --kinds LIST      video,audio (default both)
  --sides LIST      outpost,janus (default both; janus needs the Debian package 'janus')
  --cpu-prof        profile Outpost (node --cpu-prof) and print where its CPU time went
`;

interface Workload {
  kind: 'video' | 'audio';
  /** Payload bytes per packet and packets per second: 1200 B × 156/s ≈ 1.5 Mbit/s; 120 B × 50/s = 48 kbit/s. */
  size: number;
  pps: number;
}
const WORKLOADS: Record<'video' | 'audio', Workload> = {
  video: { kind: 'video', size: 1200, pps: 156 },
  audio: { kind: 'audio', size: 120, pps: 50 },
};

/**
 * A werift peer on one local address (loopback unless told otherwise) and no STUN server. Janus
 * (libnice) never gathers on loopback, so its peers use this machine's own interface address:
 * traffic to it stays inside the host just the same.
 */
function loopbackPeer(address = '127.0.0.1'): RTCPeerConnection {
  return new RTCPeerConnection({
    iceServers: [],
    iceUseIpv6: false,
    iceInterfaceAddresses: { udp4: address },
    iceAdditionalHostAddresses: [address],
    iceFilterCandidatePair: (p) => p.localCandidate.host === address && p.remoteCandidate.host === address,
    bundlePolicy: 'max-bundle',
  });
}

/** This machine's first non-loopback IPv4 address (Janus's ICE address). */
function ownAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  return undefined;
}

function connected(pc: RTCPeerConnection, timeoutMs: number): Promise<void> {
  if (pc.connectionState === 'connected') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not connected after ${timeoutMs} ms (${pc.connectionState})`)), timeoutMs);
    pc.connectionStateChange.subscribe((s) => {
      if (s === 'connected') {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

/** Sends the workload's packets, paced by the clock; each payload carries a counter at byte 4. */
class Source {
  readonly track: MediaStreamTrack;
  counter = 0;
  private timer?: NodeJS.Timeout;
  private seq = 0;
  constructor(readonly w: Workload) {
    this.track = new MediaStreamTrack({ kind: w.kind });
  }
  start(): void {
    const began = Date.now();
    const base = this.counter;
    this.timer = setInterval(() => {
      const due = base + Math.floor(((Date.now() - began) * this.w.pps) / 1000);
      while (this.counter < due) {
        const payload = Buffer.alloc(this.w.size);
        // A VP8 descriptor (start of partition) and an inter-frame header for video.
        if (this.w.kind === 'video') {
          payload[0] = 0x10;
          payload[1] = 0x01;
        }
        payload.writeUInt32BE(this.counter, 4);
        const seq = this.seq++ & 0xffff;
        this.track.writeRtp(new RtpPacket(new RtpHeader({ payloadType: 96, sequenceNumber: seq, timestamp: (this.counter * 3000) >>> 0, ssrc: 0x5eed, marker: true }), payload));
        this.counter++;
      }
    }, 10);
  }
  stop(): void {
    clearInterval(this.timer);
  }
}

/** One subscriber's received counters (deduplicated: retransmissions count once). */
class Sink {
  readonly got = new Set<number>();
  attach(pc: RTCPeerConnection): void {
    pc.onTrack.subscribe((track) =>
      track.onReceiveRtp.subscribe((rtp) => {
        if (rtp.payload.length >= 8) this.got.add(rtp.payload.readUInt32BE(4));
      }),
    );
  }
  countIn(from: number, to: number): number {
    let n = 0;
    for (const c of this.got) if (c >= from && c < to) n++;
    return n;
  }
}

/** What a forwarder under test offers the load generator. */
interface Side {
  name: string;
  pid: number;
  publish(w: Workload, source: Source): Promise<RTCPeerConnection>;
  /** Adds one subscriber; resolves with its setup time (ms) once its ICE is connected. */
  subscribe(sink: Sink): Promise<{ pc: RTCPeerConnection; setupMs: number }>;
  reset(): Promise<void>;
}

// --- Outpost ---------------------------------------------------------------------------------

async function startOutpost(dataDir: string, profDir?: string): Promise<{ url: string; pid: number; token: string; accountId: string; child: Child }> {
  const token = randomBytes(24).toString('hex');
  const accountId = randomBytes(16).toString('hex');
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('OUTPOST_') && k !== 'NODE_OPTIONS' && v !== undefined) env[k] = v;
  Object.assign(env, { OUTPOST_API_TOKEN: token, OUTPOST_ACCOUNT_ID: accountId, OUTPOST_LOG_LEVEL: 'warn' });
  const prof = profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`] : [];
  const child = await spawnNode('outpost', [...prof, OUTPOST_BIN, 'serve', '--api-port', '0', '--edge-port', '0', '--dns-port', '0', '--turn-port', '0', '--relay-alt-ports', 'off', '--data-dir', dataDir], {
    cwd: ROOT,
    env,
    ready: /management API\s+http\s+(http:\/\/\S+?)\/client\/v4/,
    timeoutMs: 60_000,
  });
  return { url: child.ready[1], pid: child.proc.pid ?? 0, token, accountId, child };
}

function outpostSide(o: { url: string; pid: number; token: string; accountId: string }): Side {
  let app: { uid: string; secret: string } | undefined;
  let publisherSession = '';
  let trackName = '';
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${o.url}/v1/apps/${app!.uid}${path}`, {
      method,
      headers: { authorization: `Bearer ${app!.secret}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = (await res.json()) as any;
    if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  return {
    name: 'Outpost (werift)',
    pid: o.pid,
    async publish(w, source) {
      const res = await fetch(`${o.url}/client/v4/accounts/${o.accountId}/calls/apps`, {
        method: 'POST',
        headers: { authorization: `Bearer ${o.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: `bench ${w.kind}` }),
      });
      app = ((await res.json()) as { result: { uid: string; secret: string } }).result;
      const pc = loopbackPeer();
      const tx = pc.addTransceiver(source.track, { direction: 'sendonly' });
      await pc.setLocalDescription(await pc.createOffer());
      publisherSession = (await call('POST', '/sessions/new')).sessionId;
      trackName = `bench-${w.kind}`;
      const push = await call('POST', `/sessions/${publisherSession}/tracks/new`, {
        sessionDescription: { type: 'offer', sdp: pc.localDescription!.sdp },
        tracks: [{ location: 'local', mid: tx.mid, trackName }],
      });
      await pc.setRemoteDescription(push.sessionDescription);
      await connected(pc, 15_000);
      return pc;
    },
    async subscribe(sink) {
      const started = performance.now();
      const pc = loopbackPeer();
      sink.attach(pc);
      const { sessionId } = await call('POST', '/sessions/new');
      const pull = await call('POST', `/sessions/${sessionId}/tracks/new`, { tracks: [{ location: 'remote', sessionId: publisherSession, trackName }] });
      await pc.setRemoteDescription(pull.sessionDescription);
      await pc.setLocalDescription(await pc.createAnswer());
      await call('PUT', `/sessions/${sessionId}/renegotiate`, { sessionDescription: { type: 'answer', sdp: pc.localDescription!.sdp } });
      await connected(pc, 20_000).catch(async (err: unknown) => {
        await pc.close().catch(() => undefined);
        throw err;
      });
      return { pc, setupMs: performance.now() - started };
    },
    async reset() {
      if (app) {
        await fetch(`${o.url}/client/v4/accounts/${o.accountId}/calls/apps/${app.uid}`, { method: 'DELETE', headers: { authorization: `Bearer ${o.token}` } });
      }
    },
  };
}

// --- Janus -------------------------------------------------------------------------------------

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

async function startJanus(dir: string, address: string): Promise<{ base: string; pid: number; address: string }> {
  const port = await freePort();
  const disablePlugins = ['audiobridge', 'duktape', 'echotest', 'lua', 'nosip', 'recordplay', 'sip', 'streaming', 'textroom', 'videocall', 'voicemail'].map((p) => `libjanus_${p}.so`).join(',');
  const disableTransports = ['websockets', 'pfunix', 'mqtt', 'nanomsg', 'rabbitmq'].map((p) => `libjanus_${p}.so`).join(',');
  writeFileSync(
    join(dir, 'janus.jcfg'),
    `general: { configs_folder = "${dir}", plugins_folder = "${JANUS_LIB}/plugins", transports_folder = "${JANUS_LIB}/transports", events_folder = "${JANUS_LIB}/events", loggers_folder = "${JANUS_LIB}/loggers", debug_level = 2, session_timeout = 120 }
media: { rtp_port_range = "50000-59999" }
nat: { ice_enforce_list = "${address}", ignore_mdns = true, nice_debug = false }
plugins: { disable = "${disablePlugins}" }
transports: { disable = "${disableTransports}" }
loggers: { disable = "libjanus_jsonlog.so" }
events: { broadcast = false }
`,
  );
  writeFileSync(join(dir, 'janus.transport.http.jcfg'), `general: { json = "plain", base_path = "/janus", http = true, port = ${port}, ip = "127.0.0.1" }\nadmin: { admin_http = false }\n`);
  writeFileSync(
    join(dir, 'janus.plugin.videoroom.jcfg'),
    `general: { }\nroom-${ROOM}: { description = "bench", publishers = 1, bitrate = 0, fir_freq = 0, audiocodec = "opus", videocodec = "vp8", notify_joining = false }\n`,
  );
  const proc: ChildProcess = spawn(JANUS, ['-C', join(dir, 'janus.jcfg'), '-F', dir, '-o'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => (out = (out + d).slice(-20_000)));
  proc.stderr!.on('data', (d) => (out = (out + d).slice(-20_000)));
  onCleanup(`stop janus (pid ${proc.pid})`, async () => {
    proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 500));
    if (proc.exitCode === null) proc.kill('SIGKILL');
  }, () => proc.kill('SIGKILL'));
  const base = `http://127.0.0.1:${port}/janus`;
  for (let i = 0; i < 100; i++) {
    if (proc.exitCode !== null) throw new Error(`janus exited (${proc.exitCode}):\n${out.slice(-3000)}`);
    try {
      const res = await fetch(`${base}/info`);
      if (res.ok) return { base, pid: proc.pid ?? 0, address };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`janus did not answer on ${base} within 20 s:\n${out.slice(-3000)}`);
}

/** A Janus session over its HTTP transport: requests, and the long poll that carries async events. */
class JanusSession {
  id = 0;
  private waiting = new Map<string, (ev: any) => void>();
  private polling = false;
  constructor(private readonly base: string) {}
  private tx(): string {
    return randomBytes(6).toString('hex');
  }
  private async post(path: string, body: Record<string, unknown>): Promise<any> {
    const res = await fetch(this.base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const json = (await res.json()) as any;
    if (json.janus === 'error') throw new Error(`janus: ${JSON.stringify(json.error)}`);
    return json;
  }
  async create(): Promise<void> {
    this.id = (await this.post('', { janus: 'create', transaction: this.tx() })).data.id;
    this.polling = true;
    void this.poll();
  }
  private async poll(): Promise<void> {
    while (this.polling) {
      try {
        const res = await fetch(`${this.base}/${this.id}?maxev=10`);
        const evs = [await res.json()].flat() as any[];
        for (const ev of evs) {
          const done = ev.transaction && this.waiting.get(ev.transaction);
          if (done && ev.janus !== 'ack') {
            this.waiting.delete(ev.transaction);
            done(ev);
          }
        }
      } catch {
        if (this.polling) await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
  async attach(plugin: string): Promise<number> {
    return (await this.post(`/${this.id}`, { janus: 'attach', plugin, transaction: this.tx() })).data.id;
  }
  /** A plugin message; resolves with the event that answers it (synchronous answers directly). */
  async message(handle: number, body: Record<string, unknown>, jsep?: unknown): Promise<any> {
    const transaction = this.tx();
    const answered = new Promise<any>((resolve) => this.waiting.set(transaction, resolve));
    const first = await this.post(`/${this.id}/${handle}`, { janus: 'message', body, transaction, ...(jsep ? { jsep } : {}) });
    if (first.janus === 'success') {
      this.waiting.delete(transaction);
      return first;
    }
    const ev = await Promise.race([answered, new Promise((_, reject) => setTimeout(() => reject(new Error(`janus: no answer to ${JSON.stringify(body)}`)), 20_000))]);
    const data = (ev as any).plugindata?.data;
    if (data?.error) throw new Error(`janus videoroom: ${data.error}`);
    return ev;
  }
  async trickleDone(handle: number): Promise<void> {
    await this.post(`/${this.id}/${handle}`, { janus: 'trickle', candidate: { completed: true }, transaction: this.tx() });
  }
  async destroy(): Promise<void> {
    this.polling = false;
    await this.post(`/${this.id}`, { janus: 'destroy', transaction: this.tx() }).catch(() => undefined);
  }
}

function janusSide(j: { base: string; pid: number; address: string }): Side {
  let feed = 0;
  const sessions: JanusSession[] = [];
  return {
    name: 'Janus videoroom',
    pid: j.pid,
    async publish(w, source) {
      const s = new JanusSession(j.base);
      await s.create();
      sessions.push(s);
      const h = await s.attach('janus.plugin.videoroom');
      const pc = loopbackPeer(j.address);
      pc.addTransceiver(source.track, { direction: 'sendonly' });
      await pc.setLocalDescription(await pc.createOffer());
      const ev = await s.message(h, { request: 'joinandconfigure', ptype: 'publisher', room: ROOM, audio: w.kind === 'audio', video: w.kind === 'video' }, { type: 'offer', sdp: pc.localDescription!.sdp });
      feed = ev.plugindata.data.id;
      await pc.setRemoteDescription(ev.jsep);
      await s.trickleDone(h);
      await connected(pc, 15_000);
      return pc;
    },
    async subscribe(sink) {
      const started = performance.now();
      const s = new JanusSession(j.base);
      await s.create();
      sessions.push(s);
      const h = await s.attach('janus.plugin.videoroom');
      const pc = loopbackPeer(j.address);
      sink.attach(pc);
      const joined = await s.message(h, { request: 'join', ptype: 'subscriber', room: ROOM, streams: [{ feed }] });
      await pc.setRemoteDescription(joined.jsep);
      await pc.setLocalDescription(await pc.createAnswer());
      await s.message(h, { request: 'start' }, { type: 'answer', sdp: pc.localDescription!.sdp });
      await s.trickleDone(h);
      await connected(pc, 20_000).catch(async (err: unknown) => {
        await pc.close().catch(() => undefined);
        throw err;
      });
      return { pc, setupMs: performance.now() - started };
    },
    async reset() {
      await Promise.all(sessions.splice(0).map((s) => s.destroy()));
    },
  };
}

// --- the measurement ---------------------------------------------------------------------------

interface StepResult {
  n: number;
  loss: number;
  /** Server CPU per forwarded packet, µs (independent of how busy the machine is). */
  usPerPacket: number;
  /** Lowest and highest share of the window's packets one subscriber got. */
  worst: number;
  best: number;
  serverCores: number;
  clientCores: number;
  forwardedMbps: number;
}

interface SideResult {
  side: string;
  kind: string;
  steps: StepResult[];
  setup: number[];
  /** Subscribers whose setup failed and was retried (a werift client's DTLS handshake can abort under load). */
  setupFailures: number;
  error?: string;
}

function pct(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

async function measureSide(side: Side, w: Workload, steps: number[], windowS: number): Promise<SideResult> {
  const result: SideResult = { side: side.name, kind: w.kind, steps: [], setup: [], setupFailures: 0 };
  /** One subscriber, tried up to three times; a failed attempt's peer is closed. */
  const subscribeOne = async () => {
    for (let attempt = 1; ; attempt++) {
      const sink = new Sink();
      try {
        return { sink, ...(await side.subscribe(sink)) };
      } catch (err) {
        result.setupFailures++;
        if (attempt >= 3) throw err;
      }
    }
  };
  const source = new Source(w);
  const peers: RTCPeerConnection[] = [];
  const sinks: Sink[] = [];
  try {
    peers.push(await side.publish(w, source));
    source.start();
    for (const n of steps) {
      throwIfInterrupted();
      // Add subscribers up to n, four setting up at a time.
      while (sinks.length < n) {
        const batch = Math.min(4, n - sinks.length);
        const made = await Promise.all(Array.from({ length: batch }, subscribeOne));
        for (const m of made) {
          sinks.push(m.sink);
          peers.push(m.pc);
          result.setup.push(m.setupMs);
        }
      }
      await new Promise((r) => setTimeout(r, 1_000));
      const from = source.counter;
      const cpu0 = cpuMsOfTree(side.pid) ?? NaN;
      const self0 = process.cpuUsage();
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, windowS * 1000));
      const to = source.counter;
      const wall = performance.now() - t0;
      const cpu1 = cpuMsOfTree(side.pid) ?? NaN;
      const self1 = process.cpuUsage(self0);
      // Late packets and retransmissions of the window still count.
      await new Promise((r) => setTimeout(r, 1_000));
      const expected = (to - from) * sinks.length;
      const each = sinks.map((s) => s.countIn(from, to) / Math.max(1, to - from));
      const got = sinks.reduce((sum, s) => sum + s.countIn(from, to), 0);
      const loss = expected > 0 ? 1 - got / expected : 1;
      const step: StepResult = {
        n,
        loss,
        usPerPacket: got > 0 ? ((cpu1 - cpu0) * 1000) / got : NaN,
        worst: Math.min(...each),
        best: Math.max(...each),
        serverCores: (cpu1 - cpu0) / wall,
        clientCores: (self1.user + self1.system) / 1000 / wall,
        forwardedMbps: (got * (w.size + 12) * 8) / (wall / 1000) / 1e6,
      };
      result.steps.push(step);
      process.stdout.write(
        `  ${side.name} ${w.kind}: ${n} subscribers, loss ${(loss * 100).toFixed(2)} % (per subscriber ${(step.worst * 100).toFixed(0)}–${(step.best * 100).toFixed(0)} % received), ` +
          `server ${step.serverCores.toFixed(2)} cores (${step.usPerPacket.toFixed(0)} µs CPU per forwarded packet), load generator ${step.clientCores.toFixed(2)} cores\n`,
      );
      for (const s of sinks) s.got.clear();
      if (loss > LOSS_LIMIT) break;
    }
  } catch (err) {
    result.error = (err as Error).message;
    process.stdout.write(`  ${side.name} ${w.kind}: stopped: ${result.error}\n`);
  } finally {
    source.stop();
    await Promise.all(peers.map((pc) => pc.close().catch(() => undefined)));
    await side.reset().catch(() => undefined);
  }
  return result;
}

function report(results: SideResult[]): string {
  const rows = results.map((r) => {
    const pps = WORKLOADS[r.kind as 'video' | 'audio'].pps;
    // CPU per packet from the busiest step that still had packets through.
    const measured = r.steps.filter((s) => Number.isFinite(s.usPerPacket));
    const us = measured.length ? measured[measured.length - 1].usPerPacket : NaN;
    const ok = r.steps.filter((s) => s.loss <= LOSS_LIMIT);
    const best = ok[ok.length - 1];
    const perCore = best && best.serverCores > 0 ? best.forwardedMbps / best.serverCores : NaN;
    const consumersPerCore = best && best.serverCores > 0 ? best.n / best.serverCores : NaN;
    const first = r.steps.find((s) => s.loss > LOSS_LIMIT);
    return [
      r.side,
      r.kind,
      best ? int(best.n) : '0',
      first ? `${int(first.n)} (${(first.loss * 100).toFixed(1)} %)` : r.error ? 'error' : 'not reached',
      best ? best.forwardedMbps.toFixed(1) : '–',
      best ? best.serverCores.toFixed(2) : '–',
      Number.isFinite(perCore) ? perCore.toFixed(1) : '–',
      Number.isFinite(consumersPerCore) ? int(consumersPerCore) : '–',
      Number.isFinite(us) ? us.toFixed(0) : '–',
      Number.isFinite(us) && us > 0 ? int(1e6 / (us * pps)) : '–',
      ms(pct(r.setup, 50)),
      ms(pct(r.setup, 99)),
      int(r.setupFailures),
    ];
  });
  return table(
    ['server', 'media', 'subs <1% loss', 'first >1% loss', 'fwd Mbit/s', 'server cores', 'Mbit/s per core', 'subs per core', 'µs CPU/pkt', 'subs per core (CPU)', 'setup p50 ms', 'setup p99 ms', 'setups retried'],
    rows,
    [0, 1],
  );
}

export async function main(args: string[]): Promise<number> {
  let steps = [1, 5, 10, 20, 40, 80, 160];
  let windowS = 4;
  let kinds: Array<'video' | 'audio'> = ['video', 'audio'];
  let sides = ['outpost', 'janus'];
  let cpuProf = false;
  try {
    for (let i = 0; i < args.length; i++) {
      const a = args[i];
      if (a === '--help' || a === '-h') {
        process.stdout.write(USAGE);
        return 0;
      } else if (a === '--steps') {
        steps = (args[++i] ?? '').split(',').map((x) => intOption('--steps', x, 1, 2000));
      } else if (a === '--window') {
        windowS = intOption('--window', args[++i], 1, 60);
      } else if (a === '--kinds') {
        kinds = (args[++i] ?? '').split(',').filter((k): k is 'video' | 'audio' => k === 'video' || k === 'audio');
      } else if (a === '--cpu-prof') {
        cpuProf = true;
      } else if (a === '--sides') {
        sides = (args[++i] ?? '').split(',');
      } else throw new UsageError(`unknown option ${a}`);
    }
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`${err.message}\n\n${USAGE}`);
      return 2;
    }
    throw err;
  }
  installCleanupHandlers();
  try {
    const dir = tempDir('outpost-bench-sfu-');
    const started: Side[] = [];
    const profDir = cpuProf ? join(dir.path, 'profile') : undefined;
    if (profDir) mkdirSync(profDir);
    let outpost: Child | undefined;
    if (sides.includes('outpost')) {
      const o = await startOutpost(join(dir.path, 'outpost'), profDir);
      outpost = o.child;
      started.push(outpostSide(o));
    }
    if (sides.includes('janus')) {
      if (!existsSync(JANUS)) {
        process.stdout.write(`Janus is not installed (${JANUS}); install the Debian package 'janus' to measure it beside Outpost (apt-get install janus). Continuing with Outpost only.\n`);
      } else {
        const version = spawnSync(JANUS, ['--version'], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
        process.stdout.write(`Janus: ${version}\n`);
        const address = ownAddress();
        if (!address) process.stdout.write('Janus needs a non-loopback IPv4 interface address (libnice does not gather on loopback); none found: skipping it.\n');
        else started.push(janusSide(await startJanus(dir.path, address)));
      }
    }
    process.stdout.write(`machine: ${availableParallelism()} cores, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}\n`);
    process.stdout.write(`workload: video ${WORKLOADS.video.size} B × ${WORKLOADS.video.pps}/s (1.5 Mbit/s), audio ${WORKLOADS.audio.size} B × ${WORKLOADS.audio.pps}/s (48 kbit/s); steps ${steps.join(', ')}; ${windowS} s measured per step\n`);
    const results: SideResult[] = [];
    for (const kind of kinds) {
      for (const side of started) {
        process.stdout.write(`${side.name}, ${kind}:\n`);
        results.push(await measureSide(side, WORKLOADS[kind], steps, windowS));
      }
    }
    process.stdout.write(`\n${report(results)}\n\n`);
    process.stdout.write(
      'subs: subscribers (consumers) served at < 1 % loss, the largest step tried; server cores: CPU time of the server process per wall second at that step.\n' +
        'µs CPU/pkt: server CPU per packet delivered at the busiest measured step; subs per core (CPU): one core divided by that cost at this stream\'s packet rate (what an idle core would carry).\n' +
        'Published anchor: mediasoup documents that one worker (one core) can typically handle ~500 consumers.\n' +
        'The load generator (publisher and every subscriber, werift in this one Node process) shares the machine: when its cores reach ~1.0 the loss is its own.\n',
    );
    process.stdout.write(`load average after: ${loadavg().map((x) => x.toFixed(2)).join(' ')}\n`);
    if (profDir && outpost) {
      // The profile is written when the process exits.
      await outpost.stop();
      const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile')).map((f) => join(profDir, f));
      const main = files.sort((a, b) => statSync(b).size - statSync(a).size)[0];
      if (main) {
        const p = summariseProfile(main, 12);
        process.stdout.write(`\nOutpost CPU profile (${int(p.busyMs)} ms busy):\n`);
        process.stdout.write(`${table(['where', 'ms', '%'], p.byPlace.map((x) => [x.place, int(x.ms), ((100 * x.ms) / p.busyMs).toFixed(1)]))}\n\n`);
        process.stdout.write(`${table(['function', 'ms', '%'], p.byFunction.map((x) => [x.name, int(x.ms), ((100 * x.ms) / p.busyMs).toFixed(1)]))}\n`);
      }
    }
    return 0;
  } finally {
    await runCleanups();
  }
}
