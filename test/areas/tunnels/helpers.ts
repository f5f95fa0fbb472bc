/** Helpers for tunnel data-plane tests: connector and access processes, waits with deadlines, edge requests. */
import http from 'node:http';
import net from 'node:net';
import { spawn, type ChildProcess } from 'node:child_process';
import { BIN, waitExit } from '../../support/process.ts';

export interface Proc {
  child: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

/** Starts `outpost tunnel <args>`; `stop` sends SIGTERM, then SIGKILL if it lingers. */
export function spawnOutpost(args: string[], env: Record<string, string> = {}): Proc {
  const child = spawn(process.execPath, [BIN, 'tunnel', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  return {
    child,
    output: () => out,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      try {
        await waitExit(child, 8000);
      } catch {
        child.kill('SIGKILL');
        await waitExit(child, 5000).catch(() => {});
      }
    },
  };
}

export function spawnConnector(token: string, extra: string[] = []): Proc {
  return spawnOutpost([
    'run',
    '--token',
    token,
    '--retry-base',
    '200ms',
    '--retry-max',
    '2s',
    '--grace-period',
    '2s',
    ...extra,
  ]);
}

/** Polls `fn` until it returns a truthy value; throws with `label` after `timeoutMs`. */
export async function until<T>(
  label: string,
  fn: () => Promise<T | undefined | null | false>,
  timeoutMs = 20_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${label}${last ? `: ${String(last)}` : ''}`,
      );
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Waits for a line matching `re` in a process's output. */
export function waitOutput(p: Proc, re: RegExp, timeoutMs = 20_000): Promise<RegExpExecArray> {
  return until(
    `output ${re} (got: ${p.output().slice(-500)})`,
    async () => re.exec(p.output()),
    timeoutMs,
    50,
  );
}

export interface Got {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** One request to the edge for `host`; the body may be a Buffer or a readable stream. */
export function edgeRequest(
  edge: URL,
  host: string,
  path = '/',
  opts: {
    method?: string;
    body?: Buffer | NodeJS.ReadableStream;
    headers?: Record<string, string>;
    agent?: http.Agent;
    timeoutMs?: number;
  } = {},
): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: edge.hostname,
        port: edge.port,
        path,
        method: opts.method ?? 'GET',
        headers: { host, ...opts.headers },
        agent: opts.agent,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(opts.timeoutMs ?? 30_000, () =>
      req.destroy(new Error(`request to ${host}${path} timed out`)),
    );
    req.on('error', reject);
    if (opts.body && !Buffer.isBuffer(opts.body)) (opts.body as NodeJS.ReadableStream).pipe(req);
    else req.end(opts.body);
  });
}

/** A minimal SOCKS5 client: CONNECT to ip:port; resolves with the socket or the reply code. */
export function socksConnect(
  proxyPort: number,
  ip: string,
  port: number,
  timeoutMs = 10_000,
): Promise<{ socket?: net.Socket; rep: number }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(proxyPort, '127.0.0.1');
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('SOCKS5 handshake timed out'));
    }, timeoutMs);
    let buf = Buffer.alloc(0);
    let stage = 0;
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.on('connect', () => socket.write(Buffer.from([5, 1, 0])));
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (stage === 0 && buf.length >= 2) {
        buf = buf.subarray(2);
        stage = 1;
        const addr = Buffer.from(ip.split('.').map(Number));
        const p = Buffer.alloc(2);
        p.writeUInt16BE(port);
        socket.write(Buffer.concat([Buffer.from([5, 1, 0, 1]), addr, p]));
      }
      if (stage === 1 && buf.length >= 10) {
        clearTimeout(timer);
        socket.off('data', onData);
        const rep = buf[1];
        const rest = buf.subarray(10);
        if (rest.length) socket.unshift(rest);
        if (rep !== 0) socket.destroy();
        resolve({ socket: rep === 0 ? socket : undefined, rep });
      }
    };
    socket.on('data', onData);
  });
}

/** A free TCP port on loopback (for servers that must come back on the same port). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}
