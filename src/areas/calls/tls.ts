/** TLS material for TURN over TLS: operator-supplied files, or a self-signed pair for local use. */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export function relayTlsMaterial(setting: string, dataDir: string, host: string): { cert: Buffer; key: Buffer } | undefined {
  if (setting === 'off' || setting === '') return undefined;
  if (setting === 'self-signed') {
    const dir = join(dataDir, 'relay-tls');
    const cert = join(dir, 'cert.pem');
    const key = join(dir, 'key.pem');
    if (!existsSync(cert) || !existsSync(key)) {
      mkdirSync(dir, { recursive: true });
      const san = /^[\d.]+$/.test(host) || host.includes(':') ? `IP:${host}` : `DNS:${host}`;
      // openssl ships with every supported system; generating X.509 in Node would need a library.
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '825', '-subj', '/CN=outpost relay', '-addext', `subjectAltName=${san}`, '-keyout', key, '-out', cert], { stdio: 'ignore' });
    }
    return { cert: readFileSync(cert), key: readFileSync(key) };
  }
  const [certPath, keyPath] = setting.split(',');
  if (!certPath || !keyPath) throw new Error(`relay TLS setting must be off, self-signed or <cert.pem>,<key.pem>; got ${setting}`);
  return { cert: readFileSync(certPath), key: readFileSync(keyPath) };
}
