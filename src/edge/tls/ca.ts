/**
 * The edge's local certificate authority: an ECDSA P-256 root created once in the data directory
 * (`<data>/edge-tls/ca.crt` and `ca.key`, the key readable by the owner only), which signs a
 * server certificate per zone on first use (the zone's name and `*.<zone>`, plus the requested
 * name when it is deeper than one label). Clients trust the edge by trusting `ca.crt`.
 * X.509 encoding and signing come from `@peculiar/x509` over Node's WebCrypto.
 */
import { createPrivateKey, randomBytes, webcrypto } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY = 86_400_000;

export interface Issuer {
  cert: x509.X509Certificate;
  key: CryptoKey;
}

export interface IssuedPem {
  certPem: string;
  keyPem: string;
}

async function keyPemOf(key: CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key));
  return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }).export({ format: 'pem', type: 'pkcs8' }).toString();
}

async function importKeyPem(pem: string): Promise<CryptoKey> {
  const der = createPrivateKey(pem).export({ format: 'der', type: 'pkcs8' });
  return webcrypto.subtle.importKey('pkcs8', der, ALG, true, ['sign']) as Promise<CryptoKey>;
}

/** A new self-signed CA (also used by tests to play a client-certificate authority). */
export async function createCa(commonName: string, days = 3650): Promise<Issuer & IssuedPem> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01' + randomBytes(8).toString('hex'),
    name: `CN=${commonName}, O=Outpost`,
    notBefore: new Date(now - DAY),
    notAfter: new Date(now + days * DAY),
    signingAlgorithm: ALG,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { cert, key: keys.privateKey, certPem: cert.toString('pem'), keyPem: await keyPemOf(keys.privateKey) };
}

/** A leaf certificate signed by `issuer`: server certificates carry DNS names, client ones a CN. */
export async function issueCertificate(
  issuer: Issuer,
  opts: { commonName: string; dnsNames?: string[]; usage: 'server' | 'client'; days?: number },
): Promise<IssuedPem> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyAgreement, true),
    new x509.ExtendedKeyUsageExtension([opts.usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth]),
    await x509.AuthorityKeyIdentifierExtension.create(issuer.cert),
  ];
  if (opts.dnsNames?.length) {
    extensions.push(new x509.SubjectAlternativeNameExtension(opts.dnsNames.map((value) => ({ type: 'dns' as const, value }))));
  }
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: '02' + randomBytes(8).toString('hex'),
    subject: `CN=${opts.commonName}`,
    issuer: issuer.cert.subject,
    notBefore: new Date(now - DAY),
    // Server certificates stay under the 398 days clients accept.
    notAfter: new Date(now + (opts.days ?? 397) * DAY),
    signingAlgorithm: ALG,
    publicKey: keys.publicKey,
    signingKey: issuer.key,
    extensions,
  });
  return { certPem: cert.toString('pem'), keyPem: await keyPemOf(keys.privateKey) };
}

/** The CA in the data directory, created on first start and reused after. */
export class LocalCa {
  readonly dir: string;
  readonly certPath: string;
  private issuer?: Issuer;
  private pem = '';

  constructor(dataDir: string) {
    this.dir = join(dataDir, 'edge-tls');
    this.certPath = join(this.dir, 'ca.crt');
  }

  async load(): Promise<void> {
    const keyPath = join(this.dir, 'ca.key');
    if (existsSync(this.certPath) && existsSync(keyPath)) {
      this.pem = readFileSync(this.certPath, 'utf8');
      this.issuer = { cert: new x509.X509Certificate(this.pem), key: await importKeyPem(readFileSync(keyPath, 'utf8')) };
      return;
    }
    mkdirSync(this.dir, { recursive: true });
    const ca = await createCa('Outpost local edge CA');
    writeFileSync(keyPath, ca.keyPem, { mode: 0o600 });
    chmodSync(keyPath, 0o600);
    writeFileSync(this.certPath, ca.certPem);
    this.issuer = ca;
    this.pem = ca.certPem;
  }

  /** The CA certificate (PEM) clients add to their trust store. */
  certificatePem(): string {
    return this.pem;
  }

  /** A server certificate for a zone (and a deeper host name when given). */
  issueServer(zoneName: string, extraName?: string): Promise<IssuedPem> {
    if (!this.issuer) throw new Error('local CA not loaded');
    const names = [zoneName, `*.${zoneName}`];
    if (extraName && !names.includes(extraName)) names.push(extraName);
    return issueCertificate(this.issuer, { commonName: zoneName, dnsNames: names, usage: 'server' });
  }
}
