/**
 * Reading a request body at the edge without losing it for the origin: the body is gathered (up
 * to a limit, only when its length is declared) and the request is replaced by a stream that
 * replays it with the same method, URL, headers and socket.
 */
import type { IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import type { EdgeRequest } from '../../edge/index.ts';

/** The body when `content-length` is declared and at most `limit`; otherwise undefined (stream untouched). */
export async function bufferBody(er: EdgeRequest, limit: number): Promise<Buffer | undefined> {
  const req = er.req;
  const declared = Number(req.headers['content-length']);
  if (!Number.isFinite(declared) || declared <= 0 || declared > limit || req.headers['transfer-encoding'] !== undefined) return undefined;
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  const replay = new PassThrough();
  replay.end(body);
  for (const prop of ['method', 'url', 'headers', 'rawHeaders', 'httpVersion', 'httpVersionMajor', 'httpVersionMinor', 'socket', 'trailers', 'rawTrailers'] as const) {
    Object.defineProperty(replay, prop, { value: (req as unknown as Record<string, unknown>)[prop], enumerable: true, configurable: true, writable: true });
  }
  Object.defineProperty(replay, 'connection', { value: req.socket, configurable: true });
  er.req = replay as unknown as IncomingMessage;
  return body;
}
