/**
 * The site the L7 DDoS tests flood: a test server with detection scaled down (floors at 10 %,
 * 250 ms windows, a two-window cooldown), an origin on its own loopback address, and a zone whose
 * names are proxied A records to that origin.
 */
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { startOrigin, type Origin } from '../../support/origins.ts';

export interface FloodSite {
  t: TestServer;
  /** The edge listener's address, where floods are sent. */
  edge: URL;
  origin: Origin;
  zone: { id: string; name: string };
  close(): Promise<void>;
}

export async function startFloodSite(originAddress: string, zoneName: string, names: string[]): Promise<FloodSite> {
  const t = await startTestServer({ ddosDetection: true, ddosWindowMs: 250, ddosCooldownWindows: 2, ddosThresholdPercent: 10 });
  const edge = new URL(t.server.listeners.find((l) => l.name.startsWith('edge'))!.address);
  const origin = await startOrigin(originAddress, (_req, res) => res.end('origin ok'));
  const zone = await createZone(t, zoneName);
  for (const name of names) {
    const res = await t.call('POST', `/zones/${zone.id}/dns_records`, { type: 'A', name, content: originAddress, proxied: true, ttl: 1 });
    if (res.status !== 200) throw new Error(`creating ${name}.${zoneName} answered ${res.status}: ${res.text}`);
  }
  return {
    t,
    edge,
    origin,
    zone,
    close: async () => {
      await origin.close();
      await t.stop();
    },
  };
}
