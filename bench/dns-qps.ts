/**
 * Authoritative DNS: queries/s a Node load loop gets from Outpost's DNS server over UDP (a fixed
 * window of outstanding queries per socket, as dnsperf keeps), and the wire codec alone beside
 * the `dns-packet` library on the same messages, with the edge cases where the two differ.
 * See bench/README.md ("dns-qps").
 */
import dgram from 'node:dgram';
import { readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import dnsPacket from 'dns-packet';
import {
  decodeMessage,
  emptyMessage,
  encodeMessage,
  RRClass,
  RRType,
  type Message,
} from '../src/areas/dns/wire.ts';
import { intOption, UsageError, parseOrExit } from './lib/args.ts';
import { int, ratio, table } from './lib/format.ts';
import { startOutpost } from './lib/outpost.ts';
import { installCleanupHandlers, runCleanups, tempDir } from './lib/procs.ts';

export const description =
  'DNS server queries/s over UDP from a Node load loop, and the wire codec beside dns-packet';

const ZONE = 'bench-dns.test';

const USAGE = `usage: npm run bench -- dns-qps [options]

  --seconds N   length of each measured load run (default 5)
  --rounds N    load runs (default 3; the median is reported)
  --sockets N   client UDP sockets (default 4)
  --window N    outstanding queries per socket (default 16)
  --codec-ms N  length of each codec measurement (default 1000; 0 skips the codec part)
`;

interface Options {
  seconds: number;
  rounds: number;
  sockets: number;
  window: number;
  codecMs: number;
}

function parse(argv: string[]): Options | 'help' {
  const o: Options = { seconds: 5, rounds: 3, sockets: 4, window: 16, codecMs: 1000 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2) as [string, string | undefined];
    const value = (): string | undefined => inline ?? argv[++i];
    if (flag === '--help' || flag === '-h') return 'help';
    else if (flag === '--seconds') o.seconds = intOption(flag, value(), 1, 600);
    else if (flag === '--rounds') o.rounds = intOption(flag, value(), 1, 50);
    else if (flag === '--sockets') o.sockets = intOption(flag, value(), 1, 256);
    else if (flag === '--window') o.window = intOption(flag, value(), 1, 1024);
    else if (flag === '--codec-ms') o.codecMs = intOption(flag, value(), 0, 60_000);
    else throw new UsageError(`unknown option ${argv[i]}`);
  }
  return o;
}

const log = (s: string) => process.stdout.write(`${s}\n`);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0
    ? NaN
    : s.length % 2
      ? s[s.length >> 1]
      : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/** The questions of the load, in turn: answers, a CNAME chain, a referral-free NXDOMAIN, MX, TXT. */
const QUESTIONS: [string, number][] = [
  [`www.${ZONE}`, RRType.A],
  [`alias.${ZONE}`, RRType.A],
  [`missing.${ZONE}`, RRType.A],
  [ZONE, RRType.MX],
  [`txt.${ZONE}`, RRType.TXT],
];

function query(id: number, name: string, type: number): Buffer {
  return encodeMessage({
    ...emptyMessage(id),
    rd: true,
    questions: [{ name, type, class: RRClass.IN }],
    edns: { udpSize: 1232, version: 0, dnssecOk: false, options: [] },
  });
}

/** Outpost with a zone of a few records to query. */
async function startZonedOutpost(dataDir: string) {
  const { child, accountId, call } = await startOutpost(dataDir, { ready: /authoritative DNS\s+udp\s+127\.0\.0\.1:(\d+)/ });
  const zone = await call('POST', '/zones', { name: ZONE, account: { id: accountId } });
  const records: Record<string, unknown>[] = [
    { type: 'A', name: 'www', content: '192.0.2.1', ttl: 300 },
    { type: 'A', name: 'www', content: '192.0.2.2', ttl: 300 },
    { type: 'CNAME', name: 'alias', content: `www.${ZONE}`, ttl: 300 },
    { type: 'MX', name: '@', content: `mail.${ZONE}`, priority: 10, ttl: 300 },
    { type: 'A', name: 'mail', content: '192.0.2.25', ttl: 300 },
    { type: 'TXT', name: 'txt', content: 'v=spf1 -all', ttl: 300 },
  ];
  for (const r of records) await call('POST', `/zones/${zone.id}/dns_records`, r);
  return { child, port: Number(child.ready[1]) };
}

interface LoadResult {
  qps: number;
  answered: number;
  lost: number;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerQuery: number;
}

/** `sockets` × `window` queries in flight; each answer (or a 1 s timeout) sends the next one. */
async function load(port: number, pid: number, o: Options): Promise<LoadResult> {
  const sockets = await Promise.all(
    Array.from({ length: o.sockets }, async () => {
      const s = dgram.createSocket('udp4');
      await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', resolve));
      s.setRecvBufferSize(1 << 20);
      return s;
    }),
  );
  const packets = QUESTIONS.map(([name, type]) => query(0, name, type));
  let answered = 0;
  let lost = 0;
  const latencies: number[] = [];
  let measuring = false;
  let stopped = false;
  const sentAt = sockets.map(() => new Map<number, number>());
  let nextQuestion = 0;
  const send = (i: number) => {
    if (stopped) return;
    const pending = sentAt[i];
    let id = (Math.random() * 0x10000) | 0;
    while (pending.has(id)) id = (id + 1) & 0xffff;
    const buf = Buffer.from(packets[nextQuestion++ % packets.length]);
    buf.writeUInt16BE(id, 0);
    pending.set(id, performance.now());
    sockets[i].send(buf, port, '127.0.0.1');
  };
  sockets.forEach((s, i) =>
    s.on('message', (buf) => {
      if (buf.length < 12) return;
      const id = buf.readUInt16BE(0);
      const at = sentAt[i].get(id);
      if (at === undefined) return;
      sentAt[i].delete(id);
      if (measuring) {
        answered++;
        if ((answered & 7) === 0) latencies.push(performance.now() - at);
      }
      send(i);
    }),
  );
  const sweeper = setInterval(() => {
    const now = performance.now();
    sentAt.forEach((pending, i) => {
      for (const [id, at] of pending) {
        if (now - at < 1000) continue;
        pending.delete(id);
        if (measuring) lost++;
        send(i);
      }
    });
  }, 100);
  for (let i = 0; i < sockets.length; i++) for (let w = 0; w < o.window; w++) send(i);
  await new Promise((r) => setTimeout(r, 1000));
  measuring = true;
  const cpu0 = cpuSeconds(pid);
  const started = performance.now();
  await new Promise((r) => setTimeout(r, o.seconds * 1000));
  const seconds = (performance.now() - started) / 1000;
  measuring = false;
  const cpu = cpuSeconds(pid) - cpu0;
  const counted = answered;
  stopped = true;
  clearInterval(sweeper);
  sockets.forEach((s) => s.close());
  latencies.sort((a, b) => a - b);
  const pick = (p: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
  return {
    qps: counted / seconds,
    answered: counted,
    lost,
    p50Ms: pick(0.5),
    p99Ms: pick(0.99),
    cpuUsPerQuery: (cpu * 1e6) / Math.max(1, counted),
  };
}

// ---------------------------------------------------------------------------------------------
// The codec alone: what the server does per query (decode the query, encode the answer) with
// wire.ts and with dns-packet, and the edge cases where they differ.

const answerMessage = (q: Message): Message => ({
  ...emptyMessage(q.id),
  qr: true,
  aa: true,
  rd: q.rd,
  questions: q.questions,
  answers: [
    { name: `alias.${ZONE}`, class: 1, ttl: 300, type: RRType.CNAME, target: `www.${ZONE}` },
    { name: `www.${ZONE}`, class: 1, ttl: 300, type: RRType.A, address: '192.0.2.1' },
    { name: `www.${ZONE}`, class: 1, ttl: 300, type: RRType.A, address: '192.0.2.2' },
  ],
  edns: { udpSize: 1232, version: 0, dnssecOk: false, options: [] },
});

function oursOnce(packet: Buffer): number {
  return encodeMessage(answerMessage(decodeMessage(packet)), { maxSize: 1232 }).length;
}

function dnsPacketOnce(packet: Buffer): number {
  const q = dnsPacket.decode(packet);
  const question = q.questions ?? [];
  return dnsPacket.encode({
    id: q.id,
    type: 'response',
    flags: dnsPacket.AUTHORITATIVE_ANSWER | ((q.flags ?? 0) & dnsPacket.RECURSION_DESIRED),
    questions: question,
    answers: [
      { name: `alias.${ZONE}`, type: 'CNAME', class: 'IN', ttl: 300, data: `www.${ZONE}` },
      { name: `www.${ZONE}`, type: 'A', class: 'IN', ttl: 300, data: '192.0.2.1' },
      { name: `www.${ZONE}`, type: 'A', class: 'IN', ttl: 300, data: '192.0.2.2' },
    ],
    additionals: [
      {
        name: '.',
        type: 'OPT',
        udpPayloadSize: 1232,
        extendedRcode: 0,
        ednsVersion: 0,
        flags: 0,
        flag_do: false,
        options: [],
      },
    ],
  }).length;
}

function opsPerSecond(
  fn: (p: Buffer) => number,
  packet: Buffer,
  ms: number,
): { ops: number; bytes: number } {
  let bytes = 0;
  let n = 0;
  const end = performance.now() + ms;
  while (performance.now() < end) {
    for (let i = 0; i < 200; i++) bytes = fn(packet);
    n += 200;
  }
  return { ops: (n * 1000) / ms, bytes };
}

/** Each case: what it checks, and whether each codec gets it right. */
function edgeCases(): string[][] {
  const rows: string[][] = [];
  const attempt = (f: () => boolean): string => {
    try {
      return f() ? 'right' : 'wrong';
    } catch (err) {
      return `throws (${(err as Error).message.slice(0, 40)})`;
    }
  };
  // A label with a dot and a byte that is not UTF-8: a resolver checks the echoed question byte for byte.
  const odd = Buffer.from([
    0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 0x61, 0x2e, 0xff, 4, 0x74, 0x65, 0x73, 0x74, 0, 0, 1, 0,
    1,
  ]);
  const echoed = (out: Buffer) => out.subarray(12, odd.length).equals(odd.subarray(12));
  rows.push([
    'question with "." and 0xFF inside a label echoed byte for byte',
    attempt(() => echoed(encodeMessage({ ...decodeMessage(odd), qr: true }))),
    attempt(() => {
      const q = dnsPacket.decode(odd);
      return echoed(dnsPacket.encode({ ...q, type: 'response' }));
    }),
  ]);
  // An A record whose RDATA is 3 bytes long.
  const shortA = Buffer.from([
    0, 1, 0x80, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 3, 1, 2, 3,
  ]);
  rows.push([
    'A record with 3 bytes of RDATA refused',
    attempt(() => {
      try {
        decodeMessage(shortA);
        return false;
      } catch {
        return true;
      }
    }),
    attempt(() => {
      try {
        dnsPacket.decode(shortA);
        return false;
      } catch {
        return true;
      }
    }),
  ]);
  // Name compression of the answer: the same names written once.
  const q = query(7, `alias.${ZONE}`, RRType.A);
  const oursSize = oursOnce(q);
  const theirSize = dnsPacketOnce(q);
  rows.push([
    `answer names compressed (CNAME + 2 A answer: ${oursSize} vs ${theirSize} bytes)`,
    oursSize < theirSize ? 'right' : 'wrong',
    theirSize <= oursSize ? 'right' : 'wrong',
  ]);
  // Truncation to the client's payload size with TC set.
  const big: Message = {
    ...emptyMessage(9),
    qr: true,
    answers: Array.from({ length: 10 }, (_, i) => ({
      name: `big.${ZONE}`,
      class: 1,
      ttl: 60,
      type: RRType.TXT,
      strings: [Buffer.from(`${i}`.padEnd(200, 'x'))],
    })),
  };
  rows.push([
    'answer cut to 512 bytes with TC set',
    attempt(() => {
      const out = encodeMessage(big, { maxSize: 512 });
      return out.length <= 512 && decodeMessage(out).tc;
    }),
    'no such option',
  ]);
  return rows;
}

export async function main(argv: string[]): Promise<number> {
  const o = parseOrExit(argv, parse, USAGE);
  if (typeof o === 'number') return o;
  const opts = o;
  installCleanupHandlers();
  try {
    const tmp = tempDir('outpost-bench-dns-');
    const loadAtStart = loadavg()[0];
    log(`dns-qps: starting Outpost (node ${process.version})…`);
    const { child, port } = await startZonedOutpost(join(tmp.path, 'data'));
    const pid = child.proc.pid ?? 0;
    const results: LoadResult[] = [];
    for (let r = 1; r <= opts.rounds; r++) {
      const res = await load(port, pid, opts);
      results.push(res);
      log(
        `round ${r}/${opts.rounds}: ${int(res.qps)} queries/s, ${res.lost} lost, p50 ${res.p50Ms.toFixed(2)} ms`,
      );
    }
    await child.stop();
    const codecRows: string[][] = [];
    if (opts.codecMs > 0) {
      const packet = query(7, `alias.${ZONE}`, RRType.A);
      const ours: number[] = [];
      const theirs: number[] = [];
      for (let r = 0; r < 3; r++) {
        ours.push(opsPerSecond(oursOnce, packet, opts.codecMs).ops);
        theirs.push(opsPerSecond(dnsPacketOnce, packet, opts.codecMs).ops);
      }
      codecRows.push([
        'decode the query + encode a CNAME + 2 A answer, per second',
        int(median(ours)),
        int(median(theirs)),
        ratio(median(ours), median(theirs)),
      ]);
    }
    log('');
    log(
      `machine: ${availableParallelism()} CPUs shared by the load loop and the server; ` +
        `1-min load average ${loadAtStart.toFixed(1)} at start, ${loadavg()[0].toFixed(1)} at end`,
    );
    log(
      `load: ${opts.sockets} sockets × ${opts.window} queries in flight, ${opts.seconds} s per round, median of ${opts.rounds}`,
    );
    log('');
    log(
      table(
        ['measure', 'value'],
        [
          ['queries/s (UDP, answered)', int(median(results.map((r) => r.qps)))],
          [
            'lost (no answer within 1 s), all rounds',
            String(results.reduce((n, r) => n + r.lost, 0)),
          ],
          [
            'latency p50 / p99, ms',
            `${median(results.map((r) => r.p50Ms)).toFixed(2)} / ${median(results.map((r) => r.p99Ms)).toFixed(2)}`,
          ],
          ['server CPU µs per query', median(results.map((r) => r.cpuUsPerQuery)).toFixed(1)],
        ],
      ),
    );
    if (codecRows.length) {
      log('');
      log(table(['codec (in this process)', 'wire.ts', 'dns-packet', 'ratio'], codecRows));
    }
    log('');
    log(table(['edge case', 'wire.ts', 'dns-packet'], edgeCases()));
    return results.some((r) => r.answered === 0) ? 1 : 0;
  } finally {
    await runCleanups();
  }
}
