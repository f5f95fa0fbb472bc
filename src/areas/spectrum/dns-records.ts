/**
 * The DNS records of proxied applications, written through the DNS area's exported helpers.
 * A `CNAME` application gets a proxied CNAME at its name (proxied names answer with the edge
 * addresses); an `ADDRESS` application gets A/AAAA records with its edge IPs. Several
 * applications may share a name (one per port): the records at a name are reconciled from every
 * application that uses it, and removed with the last one. Records are marked
 * `meta.managed_by_apps`; records someone else made at the name are never touched — an
 * application whose records would clash with them is refused (409).
 */
import net from 'node:net';
import { apiError } from '../../core/errors.ts';
import type { Executor } from '../../core/storage/db.ts';
import { deleteRecord, recordsNamed, upsertRecord, type RecordWriter, type StoredRecord } from '../dns/index.ts';
import type { Zone } from '../zones/index.ts';
import { listenAddresses } from './app-rules.ts';
import type { StoredApp } from './schemas.ts';
import { appsNamed } from './store.ts';

interface WantedRecord {
  type: 'A' | 'AAAA' | 'CNAME';
  content: string;
  proxied: boolean;
}

/** The (never resolved) target of an application's CNAME; proxied answers replace it. */
export function cnameTarget(name: string): string {
  const target = `${name}.spectrum.outpost.invalid`;
  return target.length <= 253 ? target : 'spectrum.outpost.invalid';
}

function wantedFor(app: StoredApp, bindAddresses: string[]): WantedRecord[] {
  if (app.dns.type === 'CNAME') return [{ type: 'CNAME', content: cnameTarget(app.dns.name), proxied: true }];
  return listenAddresses(app, bindAddresses)
    .filter((ip) => ip !== '0.0.0.0' && ip !== '::')
    .map((ip) => ({ type: net.isIPv6(ip) ? 'AAAA' : 'A', content: ip, proxied: false }));
}

const same = (r: StoredRecord, w: WantedRecord) => r.type === w.type && r.content === w.content && r.proxied === w.proxied;

/** Refuses (409) an application whose DNS record would clash with records at its name. */
export async function checkDnsConflict(db: Executor, zone: Zone, app: Pick<StoredApp, 'id' | 'dns'>): Promise<void> {
  const name = app.dns.name;
  const foreign = (await recordsNamed(db, zone.id, name)).filter((r) => !r.meta.managed_by_apps);
  const clash = foreign.find((r) => app.dns.type === 'CNAME' || r.type === 'CNAME' || r.type === 'A' || r.type === 'AAAA');
  if (clash) throw apiError('spectrum_dns_conflict', name, `${clash.type} ${clash.content} (record ${clash.id})`);
  const other = (await appsNamed(db, zone.id, name)).find((a) => a.id !== app.id && a.dns.type !== app.dns.type);
  if (other) {
    throw apiError('spectrum_conflict', `dns: application ${other.id} already uses ${name} with dns.type ${other.dns.type}; applications sharing a name must share its type`);
  }
}

/** Makes the managed records at `name` match the applications that use it. */
export async function reconcileDns(w: RecordWriter, zone: Zone, name: string, bindAddresses: string[]): Promise<void> {
  const db = w.database.db;
  const wanted: WantedRecord[] = [];
  for (const app of await appsNamed(db, zone.id, name)) {
    for (const rec of wantedFor(app, bindAddresses)) {
      if (!wanted.some((x) => x.type === rec.type && x.content === rec.content)) wanted.push(rec);
    }
  }
  const existing = (await recordsNamed(db, zone.id, name)).filter((r) => r.meta.managed_by_apps);
  for (const r of existing) if (!wanted.some((x) => same(r, x))) await deleteRecord(w, zone, r.id);
  for (const x of wanted) {
    if (existing.some((r) => same(r, x))) continue;
    await upsertRecord(w, zone, { type: x.type, name, content: x.content, proxied: x.proxied, ttl: 1 }, { managedByApps: true });
  }
}
