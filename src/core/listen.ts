/**
 * Binds a server and resolves with its address once it listens; a bind error (port in use,
 * address not available) rejects instead of surfacing later as an unhandled 'error' event.
 */
import type { AddressInfo, Server } from 'node:net';

export function listenOn(server: Server, port: number, host: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}
