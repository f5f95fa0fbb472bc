/** Helpers for media forwarding tests: an app, calls to its host, and werift client peers on loopback. */
import { RTCPeerConnection } from 'werift';
import type { TestServer } from '../../support/server.ts';

export interface SfuApp {
  uid: string;
  secret: string;
}

export async function createApp(t: TestServer, name = 'sfu test'): Promise<SfuApp> {
  const res = await t.call('POST', `/accounts/${t.accountId}/calls/apps`, { name });
  if (res.status !== 201) throw new Error(`app create failed: ${res.text}`);
  return res.body.result as SfuApp;
}

export interface SfuResult {
  status: number;
  headers: Headers;
  body: any;
}

/** One call to the media host, `${url}/v1/apps/{appId}${path}`. */
export async function sfuCall(t: TestServer, app: SfuApp, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<SfuResult> {
  const h: Record<string, string> = { authorization: `Bearer ${app.secret}`, ...headers };
  let payload: string | undefined;
  if (body !== undefined) {
    payload = typeof body === 'string' ? body : JSON.stringify(body);
    h['content-type'] = 'application/json';
  }
  const res = await fetch(`${t.url}/v1/apps/${app.uid}${path}`, { method, headers: h, body: payload });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

/** Outpost's own STUN service (the relay's UDP listener), on loopback. */
export function stunUrl(t: TestServer): string {
  const relay = t.server.listeners.find((l) => l.name === 'TURN/STUN relay' && l.protocol.startsWith('udp'));
  if (!relay) throw new Error('the test server has no relay listener');
  return `stun:${relay.address}`;
}

/**
 * A werift client kept on loopback (it would gather on other interfaces otherwise), with Outpost's
 * STUN service so it never falls back to its built-in public STUN host.
 */
export function loopbackPeer(t: TestServer): RTCPeerConnection {
  return new RTCPeerConnection({
    iceServers: [{ urls: stunUrl(t) }],
    iceUseIpv6: false,
    iceInterfaceAddresses: { udp4: '127.0.0.1' },
    iceAdditionalHostAddresses: ['127.0.0.1'],
    iceFilterCandidatePair: (p) => p.localCandidate.host === '127.0.0.1' && p.remoteCandidate.host === '127.0.0.1',
    bundlePolicy: 'max-bundle',
  });
}

export async function connected(pc: RTCPeerConnection, ms = 8000, name = "peer"): Promise<void> {
  if (pc.connectionState === 'connected') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} connection still ${pc.connectionState} (ICE ${pc.iceConnectionState}) after ${ms} ms`)), ms);
    pc.connectionStateChange.subscribe((s) => {
      if (s === 'connected') {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

/** Polls `check` every 50 ms until it is true or `ms` passed. */
export async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
