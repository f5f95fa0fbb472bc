/** The ICE server list handed to browsers: only URLs for ports this relay really listens on. */

export interface RelayPorts {
  udp?: number;
  tcp?: number;
  tls?: number;
  /** Extra ports the platform also offers (53/udp, 80/tcp, 443/tls) when an operator opens them. */
  altUdp53?: number;
  altTcp80?: number;
  altTls443?: number;
}

export function iceUrls(host: string, p: RelayPorts): string[] {
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  const urls: string[] = [];
  if (p.udp) urls.push(`stun:${h}:${p.udp}`, `turn:${h}:${p.udp}?transport=udp`);
  if (p.tcp) urls.push(`turn:${h}:${p.tcp}?transport=tcp`);
  if (p.altUdp53) urls.push(`turn:${h}:${p.altUdp53}?transport=udp`);
  if (p.altTcp80) urls.push(`turn:${h}:${p.altTcp80}?transport=tcp`);
  if (p.tls) urls.push(`turns:${h}:${p.tls}?transport=tcp`);
  if (p.altTls443) urls.push(`turns:${h}:${p.altTls443}?transport=tcp`);
  return urls;
}
