/**
 * TLS for proxied applications. At the edge (`tls` flexible/full/strict) each application host
 * name gets a self-signed certificate made with openssl into `<data dir>/spectrum/tls/` (kept
 * across restarts). Towards the origin, `full` encrypts without checking the certificate and
 * `strict` checks it against the system roots plus the `--spectrum-origin-ca` file.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import tls from 'node:tls';
import { promisify } from 'node:util';

const run = promisify(execFile);

export class EdgeCertificates {
  private readonly contexts = new Map<string, tls.SecureContext>();
  private readonly pending = new Map<string, Promise<tls.SecureContext>>();
  private readonly dir: string;

  constructor(dataDir: string) {
    this.dir = join(dataDir, 'spectrum', 'tls');
  }

  /** The context for a host name, once `ensure` has made it. */
  get(hostname: string): tls.SecureContext | undefined {
    return this.contexts.get(hostname);
  }

  /** Makes (or loads) the certificate of a host name. */
  ensure(hostname: string): Promise<tls.SecureContext> {
    const ready = this.contexts.get(hostname);
    if (ready) return Promise.resolve(ready);
    let p = this.pending.get(hostname);
    if (!p) {
      p = this.load(hostname).finally(() => this.pending.delete(hostname));
      this.pending.set(hostname, p);
    }
    return p;
  }

  private async load(hostname: string): Promise<tls.SecureContext> {
    const cert = join(this.dir, `${hostname}.crt`);
    const key = join(this.dir, `${hostname}.key`);
    if (!existsSync(cert) || !existsSync(key)) {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      // openssl ships with every supported system; making X.509 in Node would need a library.
      await run('openssl', [
        'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '825',
        '-subj', `/CN=${hostname}`, '-addext', `subjectAltName=DNS:${hostname}`, '-keyout', key, '-out', cert,
      ], { timeout: 30_000 });
    }
    const context = tls.createSecureContext({ cert: readFileSync(cert), key: readFileSync(key) });
    this.contexts.set(hostname, context);
    return context;
  }
}

/** The CA list `strict` origins are checked against (undefined = Node's default roots). */
export function originCa(file: string | undefined): string[] | undefined {
  if (!file) return undefined;
  return [...tls.rootCertificates, readFileSync(file, 'utf8')];
}
