/**
 * RTMP ingest with a real stream-key check. Each livestream has its own RTMP port; a publisher's
 * TCP connection is relayed to an ffmpeg started for it in RTMP listen mode on a private loopback
 * port, which writes HLS segments. ffmpeg in listen mode accepts any stream name, so the relay
 * reads the client's commands on their way through: the `publish` command (AMF0 string "publish",
 * transaction number, null, stream name) is forwarded only when the name equals the stream key;
 * any other name closes the connection before ffmpeg has seen a publish, so nothing is written.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import type { Logger } from '../../../core/log.ts';

const PUBLISH = Buffer.concat([Buffer.from([0x02, 0x00, 0x07]), Buffer.from('publish')]);
/** Bytes of client traffic held back while the publish command is not yet complete. */
const MAX_SCAN = 64 * 1024;
const FFMPEG_LISTEN_WAIT_MS = 5000;

/** The stream name of a complete AMF0 `publish` command in `buf`, `undefined` if none yet. */
export function publishName(buf: Buffer): string | undefined {
  const at = buf.indexOf(PUBLISH);
  if (at < 0) return undefined;
  let i = at + PUBLISH.length;
  // transaction id: number marker + 8 bytes
  if (buf.length < i + 9 || buf[i] !== 0x00) return undefined;
  i += 9;
  // command object: null
  if (buf.length < i + 1) return undefined;
  if (buf[i] === 0x05) i += 1;
  if (buf.length < i + 3 || buf[i] !== 0x02) return undefined;
  const len = buf.readUInt16BE(i + 1);
  if (buf.length < i + 3 + len) return undefined;
  return buf.subarray(i + 3, i + 3 + len).toString('utf8');
}

/** Length of the longest tail of `buf` that begins the publish marker (it may complete later). */
function partialTail(buf: Buffer): number {
  for (let n = Math.min(PUBLISH.length - 1, buf.length); n > 0; n--) {
    if (buf.subarray(buf.length - n).equals(PUBLISH.subarray(0, n))) return n;
  }
  return 0;
}

export interface IngestEvents {
  /** The key matched and media is being received. */
  live(): void;
  /** The publisher went away or ffmpeg stopped; `error` when it failed. */
  ended(error?: string): void;
  refused(reason: string): void;
}

export interface IngestOptions {
  host: string;
  port: number;
  streamKey: string;
  /** ffmpeg output arguments (after the input); the HLS directory is theirs. */
  outputArgs: () => string[];
  /**
   * Called when the stream key matched, before ffmpeg sees the publish (so before it writes
   * anything): the place to clear the previous output, which a refused publisher must not touch.
   */
  accepted?: () => void;
  log: Logger;
  events: IngestEvents;
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

async function connectWhenListening(host: string, port: number, ms: number): Promise<net.Socket> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      return await new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect(port, host, () => resolve(s));
        s.once('error', reject);
      });
    } catch (err) {
      if (Date.now() > end) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

export class RtmpIngest {
  private server?: net.Server;
  private active?: { client: net.Socket; ffmpeg: ChildProcess };

  constructor(private readonly opts: IngestOptions) {}

  get busy(): boolean {
    return !!this.active;
  }

  listen(): Promise<number> {
    return new Promise((resolve, reject) => {
      const server = net.createServer((client) => void this.accept(client));
      server.once('error', reject);
      server.listen(this.opts.port, this.opts.host, () => {
        this.server = server;
        resolve((server.address() as net.AddressInfo).port);
      });
    });
  }

  private async accept(client: net.Socket): Promise<void> {
    const { log, events, streamKey, host } = this.opts;
    if (this.active) {
      client.destroy();
      events.refused('another publisher is already live on this stream');
      return;
    }
    client.pause();
    const port = await freePort(host);
    const ff = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-listen', '1', '-i', `rtmp://${host}:${port}/live/${streamKey}`, ...this.opts.outputArgs()], { stdio: ['ignore', 'ignore', 'pipe'] });
    this.active = { client, ffmpeg: ff };
    let err = '';
    ff.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
    let accepted = false;
    let refused = false;
    const finished = new Promise<number | null>((resolve) => ff.on('close', resolve));
    ff.on('error', (e) => (err = `ffmpeg could not start: ${e.message}`));
    let upstream: net.Socket;
    try {
      upstream = await connectWhenListening(host, port, FFMPEG_LISTEN_WAIT_MS);
    } catch (e) {
      ff.kill('SIGKILL');
      client.destroy();
      this.active = undefined;
      events.ended(`the ingest could not start: ${err || (e as Error).message}`);
      return;
    }
    let held = Buffer.alloc(0);
    client.on('data', (chunk: Buffer) => {
      if (accepted) {
        upstream.write(chunk);
        return;
      }
      held = Buffer.concat([held, chunk]);
      const name = publishName(held);
      if (name === undefined) {
        if (held.length > MAX_SCAN) {
          refused = true;
          client.destroy();
          upstream.destroy();
          events.refused('no publish command');
          return;
        }
        // Everything before the publish (handshake, connect, createStream) goes through now.
        const cut = held.indexOf(PUBLISH);
        const upto = cut < 0 ? held.length - partialTail(held) : Math.max(0, cut - 16);
        if (upto > 0) {
          upstream.write(held.subarray(0, upto));
          held = held.subarray(upto);
        }
        return;
      }
      if (name !== streamKey) {
        refused = true;
        log.info({ port: this.opts.port }, 'RTMP publish refused: wrong stream key');
        client.destroy();
        upstream.destroy();
        // ffmpeg never saw a publish; stop it now so the next publisher finds the stream free.
        ff.kill('SIGKILL');
        if (this.active?.ffmpeg === ff) this.active = undefined;
        events.refused('wrong stream key');
        return;
      }
      accepted = true;
      this.opts.accepted?.();
      upstream.write(held);
      held = Buffer.alloc(0);
      events.live();
    });
    upstream.on('data', (d: Buffer) => client.write(d));
    client.on('close', () => upstream.end());
    upstream.on('close', () => client.destroy());
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
    client.resume();
    const code = await finished;
    client.destroy();
    if (this.active?.ffmpeg === ff) this.active = undefined;
    if (refused) return;
    events.ended(accepted && code === 0 ? undefined : accepted ? `ffmpeg exited ${code}: ${err.trim()}` : undefined);
  }

  async close(): Promise<void> {
    this.active?.client.destroy();
    this.active?.ffmpeg.kill('SIGKILL');
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
