/**
 * The ICE server list handed to browsers: the platform's seven URL forms (stun 3478; turn 3478
 * udp and tcp, 53 udp, 80 tcp; turns 5349 and 443). Each form shows the port that serves it here:
 * an alternative port that is not open falls back to the main port of the same transport, and the
 * `turns:` forms appear only when TURN over TLS is on.
 */

export interface RelayPorts {
  udp?: number;
  tcp?: number;
  tls?: number;
  /** Alternative listeners (the platform's 53/udp, 80/tcp, 443/tls) when they are open. */
  altUdp53?: number;
  altTcp80?: number;
  altTls443?: number;
}

export function iceUrls(host: string, p: RelayPorts): string[] {
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  const urls: string[] = [];
  if (p.udp) urls.push(`stun:${h}:${p.udp}`, `turn:${h}:${p.udp}?transport=udp`);
  if (p.tcp) urls.push(`turn:${h}:${p.tcp}?transport=tcp`);
  const udp53 = p.altUdp53 ?? p.udp;
  if (udp53) urls.push(`turn:${h}:${udp53}?transport=udp`);
  const tcp80 = p.altTcp80 ?? p.tcp;
  if (tcp80) urls.push(`turn:${h}:${tcp80}?transport=tcp`);
  if (p.tls) urls.push(`turns:${h}:${p.tls}?transport=tcp`);
  const tls443 = p.altTls443 ?? p.tls;
  if (tls443) urls.push(`turns:${h}:${tls443}?transport=tcp`);
  return urls;
}

export type AltForm = 'udp53' | 'tcp80' | 'tls443';

/** Parses `--relay-alt-ports`: `auto`, `off`, or `udp53=<port>,tcp80=<port>,tls443=<port>`. */
export function parseAltPorts(text: string, turnPort: number, tlsOn: boolean): Array<{ form: AltForm; port: number }> {
  const value = text.trim();
  if (value === 'off' || value === '') return [];
  if (value === 'auto') {
    if (turnPort === 0) return [];
    const auto: Array<{ form: AltForm; port: number }> = [{ form: 'udp53', port: 53 }, { form: 'tcp80', port: 80 }];
    if (tlsOn) auto.push({ form: 'tls443', port: 443 });
    return auto;
  }
  return value.split(',').map((part) => {
    const m = /^\s*(udp53|tcp80|tls443)\s*=\s*(\d{1,5})\s*$/.exec(part);
    if (!m || Number(m[2]) > 65535) {
      throw new Error(`relay alternative ports must look like udp53=10053,tcp80=8080,tls443=8443 (or auto, off); got ${part}`);
    }
    return { form: m[1] as AltForm, port: Number(m[2]) };
  });
}
