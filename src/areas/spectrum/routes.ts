/**
 * Thin handlers for `/zones/{zone_id}/spectrum/apps…` and `/spectrum/protocols`. A create or
 * update is checked (400), compared with the zone's other applications and DNS records (409),
 * then its listeners are bound (409 when an address and port are taken), the document written and
 * its DNS record reconciled — each step undone if a later one fails, so nothing half-made stays.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import { pageOf, pageQuery } from '../../core/pagination.ts';
import { qString } from '../../core/validate.ts';
import type { Zone } from '../zones/index.ts';
import { canonicalApp, listenAddresses, overlaps, planOf } from './app-rules.ts';
import { checkDnsConflict, reconcileDns } from './dns-records.ts';
import type { SpectrumProxy } from './proxy.ts';
import { AppBody, type AppResponse, type StoredApp } from './schemas.ts';
import { apps, appsNamed, getApp } from './store.ts';
import type { EdgeCertificates } from './tls.ts';

export const ZONE_SETTINGS = 'zone_settings';

export interface AppsDeps {
  ctx: AreaContext;
  proxy: SpectrumProxy;
  certs: EdgeCertificates;
  bindAddresses: string[];
}

const ListQuery = z.object({
  ...pageQuery({ perPage: 20, min: 1, max: 100 }),
  order: qString(z.enum(['protocol', 'app_id', 'created_on', 'modified_on', 'dns'])).default('dns'),
  direction: qString(z.enum(['asc', 'desc'])).default('asc'),
});

const APP_ID = { app_id: 'hex32' } as const;

/** Well-known protocols offered in the dashboard's picker; any `tcp/<port>` or `udp/<port>` works. */
const PROTOCOLS = [
  { name: 'SSH', description: 'Secure Shell', ports: [22], transport: 'tcp' },
  { name: 'RDP', description: 'Remote Desktop Protocol', ports: [3389], transport: 'tcp' },
  { name: 'Minecraft', description: 'Minecraft Java Edition', ports: [25565], transport: 'tcp' },
  { name: 'SMTP', description: 'Simple Mail Transfer Protocol', ports: [25, 587], transport: 'tcp' },
  { name: 'IMAPS', description: 'IMAP over TLS', ports: [993], transport: 'tcp' },
  { name: 'DNS', description: 'Domain Name System', ports: [53], transport: 'udp' },
  { name: 'TCP', description: 'Any TCP port or port range', ports: [], transport: 'tcp' },
  { name: 'UDP', description: 'Any UDP port or port range', ports: [], transport: 'udp' },
];

export function mountAppRoutes(d: AppsDeps): void {
  const { ctx, proxy, certs, bindAddresses } = d;
  const { router, database, clock } = ctx;
  const db = database.db;
  const writer = { database, clock, events: ctx.events };
  const read = { permission: ZONE_SETTINGS, level: 'read' } as const;
  const edit = { permission: ZONE_SETTINGS, level: 'edit' } as const;
  const tags = ['spectrum'];

  /** Writes of one zone run one at a time in this process (name checks, DNS reconciliation). */
  const queues = new Map<string, Promise<unknown>>();
  const serial = <T>(zoneId: string, fn: () => Promise<T>): Promise<T> => {
    const prev = queues.get(zoneId) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.catch(() => undefined);
    queues.set(zoneId, tail);
    void tail.then(() => {
      if (queues.get(zoneId) === tail) queues.delete(zoneId);
    });
    return run;
  };

  const present = (app: StoredApp): AppResponse => ({
    ...app,
    edge_ips: { ...app.edge_ips, ips: proxy.ips(app.id) ?? listenAddresses(app, bindAddresses) },
  });

  const checkConflicts = async (zone: Zone, app: StoredApp) => {
    const clash = (await appsNamed(db, zone.id, app.dns.name)).find((a) => a.id !== app.id && overlaps(a, app));
    if (clash) {
      throw apiError('spectrum_conflict', `An application with name ${app.dns.name} and protocol ${clash.protocol} already exists (${clash.id})`);
    }
    await checkDnsConflict(db, zone, app);
  };

  router.add(
    { method: 'GET', path: '/zones/:zone_id/spectrum/apps', operationId: 'spectrum-applications-list-spectrum-applications', summary: 'List proxied applications', auth: read, query: ListQuery, tags },
    async ({ resolved, query }) => {
      const zone = resolved.zone_id as Zone;
      const all = (await apps.all(db, zone.id)).map((doc) => doc.body);
      const field = (a: StoredApp): string => {
        switch (query.order) {
          case 'protocol':
            return a.protocol;
          case 'app_id':
            return a.id;
          case 'created_on':
            return a.created_on;
          case 'modified_on':
            return a.modified_on;
          default:
            return a.dns.name;
        }
      };
      all.sort((a, b) => (field(a) < field(b) ? -1 : field(a) > field(b) ? 1 : a.id < b.id ? -1 : 1));
      if (query.direction === 'desc') all.reverse();
      return pageOf(all.map(present), query);
    },
  );

  router.add(
    { method: 'POST', path: '/zones/:zone_id/spectrum/apps', operationId: 'spectrum-applications-create-spectrum-application-using-a-name-for-the-origin', summary: 'Create a proxied application (opens its listeners at once)', auth: edit, body: AppBody, tags },
    async ({ resolved, body }) => {
      const zone = resolved.zone_id as Zone;
      const fields = canonicalApp(body, { zoneName: zone.name, bindAddresses });
      return serial(zone.id, async () => {
        const now = clock.now();
        const app: StoredApp = { id: hexId(), created_on: now.toISOString(), modified_on: now.toISOString(), ...fields };
        await checkConflicts(zone, app);
        if (app.tls !== 'off') await certs.ensure(app.dns.name);
        await proxy.open(planOf(app, zone.id, bindAddresses));
        try {
          await apps.insert(db, zone.id, app.id, app, now);
        } catch (err) {
          await proxy.close(app.id);
          throw err;
        }
        try {
          await reconcileDns(writer, zone, app.dns.name, bindAddresses);
        } catch (err) {
          await apps.delete(db, zone.id, app.id);
          await proxy.close(app.id);
          await reconcileDns(writer, zone, app.dns.name, bindAddresses).catch(() => undefined);
          throw err;
        }
        return present(app);
      });
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/spectrum/apps/:app_id', operationId: 'spectrum-applications-get-spectrum-application-configuration', summary: 'Get a proxied application', auth: read, params: APP_ID, tags },
    async ({ resolved, params }) => present((await getApp(db, (resolved.zone_id as Zone).id, params.app_id)).body),
  );

  router.add(
    { method: 'PUT', path: '/zones/:zone_id/spectrum/apps/:app_id', operationId: 'spectrum-applications-update-spectrum-application-configuration-using-a-name-for-the-origin', summary: 'Replace a proxied application (its listeners follow without dropping other applications)', auth: edit, params: APP_ID, body: AppBody, tags },
    async ({ resolved, params, body }) => {
      const zone = resolved.zone_id as Zone;
      const fields = canonicalApp(body, { zoneName: zone.name, bindAddresses });
      return serial(zone.id, async () => {
        const doc = await getApp(db, zone.id, params.app_id);
        const before = doc.body;
        const now = clock.now();
        const app: StoredApp = { id: before.id, created_on: before.created_on, modified_on: now.toISOString(), ...fields };
        await checkConflicts(zone, app);
        if (app.tls !== 'off') await certs.ensure(app.dns.name);
        const wasRunning = proxy.has(app.id);
        await proxy.reconfigure(planOf(app, zone.id, bindAddresses));
        try {
          await apps.update(db, doc, app, now);
        } catch (err) {
          if (wasRunning) await proxy.reconfigure(planOf(before, zone.id, bindAddresses)).catch(() => proxy.close(app.id));
          else await proxy.close(app.id);
          throw err;
        }
        if (before.dns.name !== app.dns.name) await reconcileDns(writer, zone, before.dns.name, bindAddresses);
        await reconcileDns(writer, zone, app.dns.name, bindAddresses);
        return present(app);
      });
    },
  );

  router.add(
    { method: 'DELETE', path: '/zones/:zone_id/spectrum/apps/:app_id', operationId: 'spectrum-applications-delete-spectrum-application', summary: 'Delete a proxied application (closes its listeners and flows)', auth: edit, params: APP_ID, tags },
    async ({ resolved, params }) => {
      const zone = resolved.zone_id as Zone;
      return serial(zone.id, async () => {
        const doc = await getApp(db, zone.id, params.app_id);
        await apps.delete(db, zone.id, doc.id);
        await proxy.close(doc.id);
        await reconcileDns(writer, zone, doc.body.dns.name, bindAddresses);
        return { id: doc.id };
      });
    },
  );

  router.add(
    { method: 'GET', path: '/zones/:zone_id/spectrum/protocols', operationId: 'spectrum-protocols-list', summary: 'Protocols offered for proxied applications', auth: read, tags },
    async () => PROTOCOLS,
  );
}
