/**
 * Real HTTP origins for edge tests. The edge reaches origins on port 80 (the platform's default),
 * so each origin binds port 80 on its own loopback address (127.0.0.0/8); that needs root, which
 * the test machines and CI have.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';

export interface Origin {
  address: string;
  server: http.Server;
  close(): Promise<void>;
}

export async function startOrigin(
  address: string,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  onUpgrade?: (req: IncomingMessage, socket: Socket, head: Buffer) => void,
  port = 80,
): Promise<Origin> {
  if (port < 1024 && process.getuid && process.getuid() !== 0) {
    throw new Error('edge tests bind origins on port 80 of loopback addresses: run them as root (CI does)');
  }
  const server = http.createServer(handler);
  // Upgraded sockets leave the server's bookkeeping; track every socket to close them all.
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  if (onUpgrade) server.on('upgrade', onUpgrade);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, address, () => resolve());
  });
  return {
    address,
    server,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Answers with what it received: method, url, headers, sha256 and length of the body. */
export function echoHandler(req: IncomingMessage, res: ServerResponse): void {
  const hash = createHash('sha256');
  let length = 0;
  req.on('data', (c: Buffer) => {
    hash.update(c);
    length += c.length;
  });
  req.on('end', () => {
    const body = JSON.stringify({ method: req.method, url: req.url, headers: req.headers, length, sha256: hash.digest('hex') });
    res.writeHead(200, { 'content-type': 'application/json', 'x-origin': 'echo' });
    res.end(body);
  });
}

// --- a minimal WebSocket (RFC 6455) for upgrade tests: handshake plus unfragmented text frames ---

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

export function wsAccept(key: string): string {
  return createHash('sha1').update(key + WS_GUID).digest('base64');
}

export function encodeFrame(text: string, mask: boolean): Buffer {
  const payload = Buffer.from(text);
  const header = [0x81];
  if (payload.length < 126) header.push((mask ? 0x80 : 0) | payload.length);
  else header.push((mask ? 0x80 : 0) | 126, payload.length >> 8, payload.length & 0xff);
  if (!mask) return Buffer.concat([Buffer.from(header), payload]);
  const key = Buffer.from([1, 2, 3, 4]);
  const masked = Buffer.from(payload.map((b, i) => b ^ key[i % 4]));
  return Buffer.concat([Buffer.from(header), key, masked]);
}

export function decodeFrame(buf: Buffer): string | undefined {
  if (buf.length < 2) return undefined;
  let len = buf[1] & 0x7f;
  let off = 2;
  if (len === 126) {
    len = buf.readUInt16BE(2);
    off = 4;
  }
  const masked = (buf[1] & 0x80) !== 0;
  const key = masked ? buf.subarray(off, off + 4) : undefined;
  if (masked) off += 4;
  if (buf.length < off + len) return undefined;
  const payload = Buffer.from(buf.subarray(off, off + len));
  if (key) for (let i = 0; i < payload.length; i++) payload[i] ^= key[i % 4];
  return payload.toString();
}

/** A WebSocket origin that answers each text message with `echo: <message>`. */
export function wsEchoUpgrade(req: IncomingMessage, socket: Socket): void {
  const key = req.headers['sec-websocket-key'];
  if (typeof key !== 'string') {
    socket.end('HTTP/1.1 400 Bad Request\r\n\r\n');
    return;
  }
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${wsAccept(key)}\r\n\r\n`);
  let pending = Buffer.alloc(0);
  socket.on('data', (d: Buffer) => {
    pending = Buffer.concat([pending, d]);
    const text = decodeFrame(pending);
    if (text !== undefined) {
      pending = Buffer.alloc(0);
      socket.write(encodeFrame(`echo: ${text}`, false));
    }
  });
  socket.on('error', () => socket.destroy());
}
