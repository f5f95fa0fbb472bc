/**
 * The request attributes of a TLS connection, filled before any other phase reads them:
 * `cf.tls_version`, `cf.tls_cipher`, `cf.tls_client_auth.*` (presented, verified against the
 * zone's client CA, SHA-256 fingerprint, subject, issuer, serial, validity). Plain-HTTP requests
 * keep the defaults (empty strings, false).
 */
import type { TLSSocket } from 'node:tls';
import type { EdgeRequest, Phase } from '../types.ts';

/** Runs before the first platform phase (`ddos_l7` is 10). */
export const TLS_CONTEXT_ORDER = 1;

export function tlsContextPhase(zoneChecksClients: (servername: string) => Promise<boolean>): Phase {
  return {
    name: 'tls_context',
    order: TLS_CONTEXT_ORDER,
    async run(er: EdgeRequest) {
      const socket = er.req.socket as Partial<TLSSocket>;
      if (!socket.encrypted || typeof socket.getProtocol !== 'function') return 'continue';
      const f = er.fields;
      f['cf.tls_version'] = socket.getProtocol() ?? '';
      f['cf.tls_cipher'] = socket.getCipher?.()?.standardName ?? '';
      const peer = socket.getPeerCertificate?.();
      if (!peer || !peer.fingerprint256) return 'continue';
      const servername = (socket as { servername?: string | false }).servername;
      const checked = typeof servername === 'string' && (await zoneChecksClients(servername));
      const verified = checked && socket.authorized === true;
      f['cf.tls_client_auth.cert_presented'] = true;
      f['cf.tls_client_auth.cert_verified'] = verified;
      f['cf.tls_client_auth.cert_fingerprint_sha256'] = peer.fingerprint256.replace(/:/g, '').toLowerCase();
      f['cf.tls_client_auth.cert_fingerprint_sha1'] = (peer.fingerprint ?? '').replace(/:/g, '').toLowerCase();
      f['cf.tls_client_auth.cert_subject_dn'] = dn(peer.subject);
      f['cf.tls_client_auth.cert_issuer_dn'] = dn(peer.issuer);
      f['cf.tls_client_auth.cert_serial'] = (peer.serialNumber ?? '').toUpperCase();
      f['cf.tls_client_auth.cert_not_before'] = peer.valid_from ?? '';
      f['cf.tls_client_auth.cert_not_after'] = peer.valid_to ?? '';
      // Why a presented certificate failed, in the platform's `certVerified` wording.
      f['edge.tls_client_auth.failure'] = verified ? '' : checked ? `FAILED:${socket.authorizationError ?? 'unknown'}` : 'FAILED:no client CA for this zone';
      return 'continue';
    },
  };
}

function dn(obj: object | undefined): string {
  if (!obj) return '';
  return Object.entries(obj)
    .map(([k, v]) => `${k}=${Array.isArray(v) ? v.join('+') : String(v)}`)
    .join(',');
}

/** `request.cf.tlsClientAuth` for scripts, from the attributes above. */
export function tlsClientAuthOf(fields: Record<string, unknown>): Record<string, string> {
  const presented = fields['cf.tls_client_auth.cert_presented'] === true;
  const verified = fields['cf.tls_client_auth.cert_verified'] === true;
  return {
    certPresented: presented ? '1' : '0',
    certVerified: verified ? 'SUCCESS' : presented ? String(fields['edge.tls_client_auth.failure'] ?? 'FAILED') : 'NONE',
    certRevoked: '0',
    certFingerprintSHA256: presented ? String(fields['cf.tls_client_auth.cert_fingerprint_sha256'] ?? '') : '',
    certFingerprintSHA1: presented ? String(fields['cf.tls_client_auth.cert_fingerprint_sha1'] ?? '') : '',
    certSubjectDN: presented ? String(fields['cf.tls_client_auth.cert_subject_dn'] ?? '') : '',
    certIssuerDN: presented ? String(fields['cf.tls_client_auth.cert_issuer_dn'] ?? '') : '',
    certSerial: presented ? String(fields['cf.tls_client_auth.cert_serial'] ?? '') : '',
    certNotBefore: presented ? String(fields['cf.tls_client_auth.cert_not_before'] ?? '') : '',
    certNotAfter: presented ? String(fields['cf.tls_client_auth.cert_not_after'] ?? '') : '',
  };
}
