/**
 * HTTP/1.1 upgrades on the API port (tunnel connectors, private-network access): an area claims a
 * path; the server hands it the socket after the upgrade request. Upgraded sockets are tracked so
 * a graceful stop can close them — the HTTP server no longer does once a socket is upgraded.
 */
import http, { type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

export type UpgradeHandler = (req: IncomingMessage, socket: Socket, head: Buffer) => void;

export class Upgrades {
  private readonly handlers = new Map<string, UpgradeHandler>();
  private readonly sockets = new Set<Socket>();

  /** Claims upgrades to `path` (exact path, any query string). */
  on(path: string, handler: UpgradeHandler): void {
    if (this.handlers.has(path)) throw new Error(`upgrade path ${path} is claimed twice`);
    this.handlers.set(path, handler);
  }

  /** The server's `upgrade` listener; requests nobody claims are answered as ordinary requests. */
  dispatch(server: http.Server, req: IncomingMessage, socket: Socket, head: Buffer): void {
    const path = (req.url ?? '/').split('?')[0];
    const handler = this.handlers.get(path) ?? this.handlers.get(path.replace(/^\/client\/v4/, ''));
    if (handler) {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
      handler(req, socket, head);
      return;
    }
    const res = new http.ServerResponse(req);
    res.assignSocket(socket);
    res.shouldKeepAlive = false;
    res.on('finish', () => {
      res.detachSocket(socket);
      socket.destroySoon();
    });
    server.emit('request', req, res);
  }

  /** Closes every upgraded socket (server stop). */
  closeAll(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }
}
