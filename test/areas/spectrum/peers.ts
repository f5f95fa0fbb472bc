/**
 * Real peers and bounded waits for the proxied-application tests: free ports, a TCP echo origin
 * (half-close aware), one-shot TCP exchanges, and collectors of the proxy's flow events.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import type { EventBus } from '../../../src/core/events.ts';
import type { SpectrumFlowEvent } from '../../../src/areas/spectrum/index.ts';

export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]);
}

export async function waitFor(cond: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const until = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A port free on both loopback addresses (applications listen on 127.0.0.1 and ::1). */
/** Ports already handed out: the kernel may give a just-closed port again, and a test asking for three wants three. */
const handedOut = new Set<number>();

export async function freePort(transport: 'tcp' | 'udp' = 'tcp'): Promise<number> {
  for (let i = 0; i < 20; i++) {
    const port = await bindZero(transport, '127.0.0.1');
    if (handedOut.has(port)) continue;
    if ((await canBind(transport, '::1', port)) && (await canBind(transport === 'tcp' ? 'udp' : 'tcp', '127.0.0.1', port))) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error('no free port found');
}

/** The first of `count` consecutive ports free on both loopback addresses. */
export async function freePortRange(count: number, transport: 'tcp' | 'udp' = 'tcp'): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const first = await freePort(transport);
    let ok = first + count - 1 <= 65535;
    for (let p = first + 1; ok && p < first + count; p++) {
      ok = (await canBind(transport, '127.0.0.1', p)) && (await canBind(transport, '::1', p));
    }
    if (ok) return first;
  }
  throw new Error(`no ${count} consecutive free ports found`);
}

function bindZero(transport: 'tcp' | 'udp', host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    if (transport === 'tcp') {
      const s = net.createServer();
      s.once('error', reject);
      s.listen(0, host, () => {
        const port = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(port));
      });
    } else {
      const s = dgram.createSocket('udp4');
      s.once('error', reject);
      s.bind(0, host, () => {
        const port = s.address().port;
        s.close(() => resolve(port));
      });
    }
  });
}

export function canBind(transport: 'tcp' | 'udp', host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    if (transport === 'tcp') {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen({ port, host, exclusive: true }, () => s.close(() => resolve(true)));
    } else {
      const s = dgram.createSocket(net.isIPv6(host) ? 'udp6' : 'udp4');
      s.once('error', () => {
        s.close();
        resolve(false);
      });
      s.bind(port, host, () => s.close(() => resolve(true)));
    }
  });
}

export interface EchoOrigin {
  port: number;
  server: net.Server;
  /** Remote addresses of the connections it accepted. */
  peers: string[];
  close(): Promise<void>;
}

/** Echoes every byte back and passes the client's FIN on once everything is echoed. */
export async function startEcho(host = '127.0.0.1', port = 0): Promise<EchoOrigin> {
  const sockets = new Set<net.Socket>();
  const peers: string[] = [];
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    peers.push(`${s.remoteAddress}:${s.remotePort}`);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
    s.pipe(s);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    server,
    peers,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Connects, sends `payload`, half-closes, and returns everything received until the close. */
export function tcpExchange(port: number, payload: Buffer | string, opts: { host?: string; localAddress?: string; timeoutMs?: number } = {}): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const run = new Promise<Buffer>((resolve, reject) => {
    const s = net.connect({ port, host: opts.host ?? '127.0.0.1', localAddress: opts.localAddress, allowHalfOpen: true }, () => {
      s.end(payload);
    });
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', reject);
    s.on('close', () => resolve(Buffer.concat(chunks)));
  });
  return withTimeout(run, opts.timeoutMs ?? 5000, `TCP exchange on port ${port}`);
}

/** Collects `spectrum.event` publications of a server. */
export function flowEvents(events: EventBus): {
  list: SpectrumFlowEvent[];
  wait(pred: (e: SpectrumFlowEvent) => boolean, ms: number, what: string): Promise<SpectrumFlowEvent>;
  stop(): void;
} {
  const list: SpectrumFlowEvent[] = [];
  const off = events.subscribe('spectrum.event', (e) => list.push(e as SpectrumFlowEvent));
  return {
    list,
    async wait(pred, ms, what) {
      let found: SpectrumFlowEvent | undefined;
      await waitFor(() => (found = list.find(pred)) !== undefined, ms, what);
      return found!;
    },
    stop: off,
  };
}
