/**
 * Thin handlers for what makes scripts reachable: `/zones/{zone_id}/workers/routes`,
 * `/accounts/{account_id}/workers/domains`, `/accounts/{account_id}/workers/subdomain` and
 * `/accounts/{account_id}/workers/scripts/{script_name}/subdomain`.
 */
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { GLOBAL_SCOPE } from '../../core/accounts.ts';
import { apiError } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import type { Req } from '../../core/router.ts';
import type { ZoneIndex } from '../dns/index.ts';
import type { Zone } from '../zones/index.ts';
import { requireScript, scripts } from './store.ts';
import {
  compilePattern,
  PatternError,
  patternInZone,
  scriptSubdomains,
  TRIGGERS_CHANGED,
  workerDomains,
  workerRoutes,
  workerSubdomains,
  type StoredDomain,
  type StoredRoute,
  type TriggersChange,
  type TriggerViews,
} from './triggers.ts';

export const ROUTES_PERMISSION = 'workers_routes';
const SUBDOMAIN = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const HOSTNAME = /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{2,63}$/;

const RouteBody = z.object({
  pattern: z.string({ error: 'pattern is required' }),
  script: z.string().optional().nullable(),
});
const DomainBody = z.object({
  hostname: z.string({ error: 'hostname is required' }),
  service: z.string({ error: 'service (the script name) is required' }),
  environment: z.string().optional(),
  zone_id: z.string().optional(),
  zone_name: z.string().optional(),
  override_existing_dns_record: z.boolean().optional(),
});
const DomainQuery = z.object({
  environment: z.string().optional(),
  hostname: z.string().optional(),
  service: z.string().optional(),
  zone_id: z.string().optional(),
  zone_name: z.string().optional(),
});
const SubdomainBody = z.object({ subdomain: z.string({ error: 'subdomain is required' }) });
const ScriptSubdomainBody = z.object({
  enabled: z.boolean({ error: 'enabled (true or false) is required' }),
  previews_enabled: z.boolean().optional(),
});

const routeView = (r: StoredRoute) => ({ id: r.id, pattern: r.pattern, script: r.script });
const domainView = (d: StoredDomain) => ({ ...d });

export function mountTriggerRoutes(ctx: AreaContext, index: ZoneIndex, views: TriggerViews): void {
  const { router, clock } = ctx;
  const db = ctx.database.db;
  const zoneRead = { permission: ROUTES_PERMISSION, level: 'read' } as const;
  const zoneEdit = { permission: ROUTES_PERMISSION, level: 'edit' } as const;
  const read = { permission: 'workers_scripts', level: 'read' } as const;
  const edit = { permission: 'workers_scripts', level: 'edit' } as const;
  const tags = ['workers'];
  // This node's views are current before the answer; other nodes follow the event.
  const changed = async (c: TriggersChange) => {
    await views.changed(c);
    ctx.events.publish(TRIGGERS_CHANGED, c);
  };
  const zoneOf = (req: Req<unknown, unknown>) => req.resolved.zone_id as Zone;

  async function checkScript(accountId: string, name: string, what: string) {
    if (!(await scripts.get(db, accountId, name)))
      throw apiError(
        'worker_route_invalid',
        `${what}: there is no script named ${JSON.stringify(name)} in this account; upload it first`,
      );
  }

  async function checkRoute(zone: Zone, body: z.infer<typeof RouteBody>, exceptId?: string) {
    let compiled;
    try {
      compiled = compilePattern(body.pattern);
    } catch (err) {
      if (err instanceof PatternError) throw apiError('worker_route_invalid', err.message);
      throw err;
    }
    if (!patternInZone(compiled, zone.name))
      throw apiError(
        'worker_route_invalid',
        `route pattern ${JSON.stringify(body.pattern)} is outside the zone ${zone.name}`,
      );
    if (body.script) await checkScript(zone.account.id, body.script, 'script');
    const same = (await workerRoutes.all(db, zone.id)).find(
      (r) => r.id !== exceptId && r.body.pattern === compiled.pattern,
    );
    if (same) throw apiError('worker_route_exists', compiled.pattern);
    return compiled.pattern;
  }

  router.add(
    {
      method: 'POST',
      path: '/zones/:zone_id/workers/routes',
      operationId: 'worker-routes-create-route',
      summary: 'Create a route',
      auth: zoneEdit,
      body: RouteBody,
      tags,
    },
    async (req) => {
      const zone = zoneOf(req);
      const pattern = await checkRoute(zone, req.body);
      const route: StoredRoute = {
        id: hexId(),
        pattern,
        ...(req.body.script ? { script: req.body.script } : {}),
      };
      await workerRoutes.insert(db, zone.id, route.id, route, clock.now());
      await changed({ kind: 'routes', zoneId: zone.id });
      return routeView(route);
    },
  );
  router.add(
    {
      method: 'GET',
      path: '/zones/:zone_id/workers/routes',
      operationId: 'worker-routes-list-routes',
      summary: 'List routes',
      auth: zoneRead,
      tags,
    },
    async (req) => (await workerRoutes.all(db, zoneOf(req).id)).map((d) => routeView(d.body)),
  );
  const routeParams = { route_id: 'hex32' } as const;
  async function requireRoute(zoneId: string, id: string) {
    const doc = await workerRoutes.get(db, zoneId, id);
    if (!doc) throw apiError('worker_route_not_found', id);
    return doc;
  }
  router.add(
    {
      method: 'GET',
      path: '/zones/:zone_id/workers/routes/:route_id',
      operationId: 'worker-routes-get-route',
      summary: 'Get a route',
      auth: zoneRead,
      params: routeParams,
      tags,
    },
    async (req) => routeView((await requireRoute(zoneOf(req).id, req.params.route_id)).body),
  );
  router.add(
    {
      method: 'PUT',
      path: '/zones/:zone_id/workers/routes/:route_id',
      operationId: 'worker-routes-update-route',
      summary: 'Replace a route',
      auth: zoneEdit,
      body: RouteBody,
      params: routeParams,
      tags,
    },
    async (req) => {
      const zone = zoneOf(req);
      const doc = await requireRoute(zone.id, req.params.route_id);
      const pattern = await checkRoute(zone, req.body, doc.id);
      const route: StoredRoute = {
        id: doc.id,
        pattern,
        ...(req.body.script ? { script: req.body.script } : {}),
      };
      await workerRoutes.update(db, doc, route, clock.now());
      await changed({ kind: 'routes', zoneId: zone.id });
      return routeView(route);
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: '/zones/:zone_id/workers/routes/:route_id',
      operationId: 'worker-routes-delete-route',
      summary: 'Delete a route',
      auth: zoneEdit,
      params: routeParams,
      tags,
    },
    async (req) => {
      const zone = zoneOf(req);
      await requireRoute(zone.id, req.params.route_id);
      await workerRoutes.delete(db, zone.id, req.params.route_id);
      await changed({ kind: 'routes', zoneId: zone.id });
      return { id: req.params.route_id };
    },
  );

  // ---- a script's routes across the account's zones (what deploy tools replace at once) ----
  const ScriptRoutesBody = z.array(
    z.object({
      pattern: z.string({ error: 'pattern is required' }),
      zone_id: z.string().optional(),
      zone_name: z.string().optional(),
      custom_domain: z.boolean().optional(),
    }),
  );
  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/scripts/:script_name/routes',
      operationId: 'worker-script-list-routes',
      summary: "A script's routes in every zone of the account",
      auth: read,
      params: { script_name: 'any' },
      tags,
    },
    async (req) => {
      const { account_id: accountId, script_name: name } = req.params;
      if (!(await scripts.get(db, accountId, name))) throw apiError('worker_not_found', name);
      return (await workerRoutes.findBy(db, 'script', name))
        .filter((d) => index.zoneById(d.scopeId)?.accountId === accountId)
        .map((d) => ({
          ...routeView(d.body),
          zone_id: d.scopeId,
          zone_name: index.zoneById(d.scopeId)?.name,
        }));
    },
  );
  router.add(
    {
      method: 'PUT',
      path: '/accounts/:account_id/workers/scripts/:script_name/routes',
      operationId: 'worker-script-put-routes',
      summary: "Replace a script's routes in every zone of the account",
      auth: edit,
      body: ScriptRoutesBody,
      params: { script_name: 'any' },
      tags,
    },
    async (req) => {
      const { account_id: accountId, script_name: name } = req.params;
      if (!(await scripts.get(db, accountId, name))) throw apiError('worker_not_found', name);
      const wanted: { zoneId: string; pattern: string }[] = [];
      for (const [i, r] of req.body.entries()) {
        if (r.custom_domain)
          throw apiError(
            'worker_route_invalid',
            `${i}: custom domains are attached with PUT /accounts/${accountId}/workers/domains`,
          );
        let compiled;
        try {
          compiled = compilePattern(r.pattern);
        } catch (err) {
          if (err instanceof PatternError)
            throw apiError('worker_route_invalid', `${i}: ${err.message}`);
          throw err;
        }
        const zone = r.zone_id
          ? index.zoneById(r.zone_id)
          : r.zone_name
            ? index.zoneFor(r.zone_name.toLowerCase())
            : index.zoneFor(compiled.host);
        if (
          !zone ||
          zone.accountId !== accountId ||
          (r.zone_name && zone.name !== r.zone_name.toLowerCase())
        )
          throw apiError(
            'worker_route_invalid',
            `${i}: no zone of this account serves ${r.zone_name ?? r.zone_id ?? compiled.host}`,
          );
        if (!patternInZone(compiled, zone.name))
          throw apiError(
            'worker_route_invalid',
            `route pattern ${JSON.stringify(r.pattern)} is outside the zone ${zone.name}`,
          );
        const other = (await workerRoutes.all(db, zone.id)).find(
          (d) => d.body.pattern === compiled.pattern && d.body.script !== name,
        );
        if (other)
          throw apiError(
            'worker_route_exists',
            `${compiled.pattern} (assigned to ${other.body.script ?? 'no script'})`,
          );
        wanted.push({ zoneId: zone.id, pattern: compiled.pattern });
      }
      const mine = (await workerRoutes.findBy(db, 'script', name)).filter(
        (d) => index.zoneById(d.scopeId)?.accountId === accountId,
      );
      const now = clock.now();
      const zones = new Set<string>([
        ...mine.map((d) => d.scopeId),
        ...wanted.map((w) => w.zoneId),
      ]);
      const out: StoredRoute[] = [];
      await db.transaction().execute(async (tx) => {
        for (const d of mine) await workerRoutes.delete(tx, d.scopeId, d.id);
        for (const w of wanted) {
          const keep = mine.find((d) => d.scopeId === w.zoneId && d.body.pattern === w.pattern);
          const route: StoredRoute = { id: keep?.id ?? hexId(), pattern: w.pattern, script: name };
          await workerRoutes.insert(tx, w.zoneId, route.id, route, now);
          out.push(route);
        }
      });
      for (const zoneId of zones) await changed({ kind: 'routes', zoneId });
      return out.map(routeView);
    },
  );

  // ---- custom domains ----------------------------------------------------------------------
  router.add(
    {
      method: 'PUT',
      path: '/accounts/:account_id/workers/domains',
      operationId: 'worker-domain-attach-to-domain',
      summary: 'Attach a script to a host name',
      auth: edit,
      body: DomainBody,
      tags,
    },
    async (req) => {
      const accountId = req.params.account_id;
      const b = req.body;
      const hostname = b.hostname.trim().toLowerCase().replace(/\.$/, '');
      if (!HOSTNAME.test(hostname))
        throw apiError(
          'worker_domain_invalid',
          `hostname ${JSON.stringify(b.hostname)} is not a valid host name (wildcards are not allowed)`,
        );
      const zone = index.zoneFor(hostname);
      if (!zone || zone.accountId !== accountId)
        throw apiError(
          'worker_domain_invalid',
          `hostname ${hostname} is not inside a zone of this account: add the zone first`,
        );
      if (b.zone_id && b.zone_id !== zone.id)
        throw apiError(
          'worker_domain_invalid',
          `hostname ${hostname} is in zone ${zone.id} (${zone.name}), not in zone_id ${b.zone_id}`,
        );
      if (b.zone_name && b.zone_name.toLowerCase() !== zone.name)
        throw apiError(
          'worker_domain_invalid',
          `hostname ${hostname} is in zone ${zone.name}, not in zone_name ${b.zone_name}`,
        );
      if (!(await scripts.get(db, accountId, b.service)))
        throw apiError(
          'worker_domain_invalid',
          `service: there is no script named ${JSON.stringify(b.service)} in this account; upload it first`,
        );
      const [existing] = await workerDomains.findBy(db, 'hostname', hostname);
      if (existing && existing.scopeId !== accountId)
        throw apiError(
          'worker_domain_conflict',
          `hostname ${hostname} is already attached to another account's script`,
        );
      if (
        !existing &&
        !b.override_existing_dns_record &&
        index.recordsAt(zone, hostname)?.owner === hostname
      )
        throw apiError(
          'worker_domain_conflict',
          `hostname ${hostname} already has DNS records; delete them or send override_existing_dns_record: true`,
        );
      const domain: StoredDomain = {
        id: existing?.id ?? hexId(),
        hostname,
        service: b.service,
        environment: b.environment ?? 'production',
        zone_id: zone.id,
        zone_name: zone.name,
        cert_id: existing?.body.cert_id ?? hexId(),
      };
      if (existing) await workerDomains.update(db, existing, domain, clock.now());
      else await workerDomains.insert(db, accountId, domain.id, domain, clock.now());
      await changed({ kind: 'domains' });
      return domainView(domain);
    },
  );
  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/domains',
      operationId: 'worker-domain-list-domains',
      summary: 'List custom domains',
      auth: read,
      query: DomainQuery,
      tags,
    },
    async (req) => {
      const q = req.query;
      return (await workerDomains.all(db, req.params.account_id))
        .map((d) => d.body)
        .filter(
          (d) =>
            (!q.environment || d.environment === q.environment) &&
            (!q.hostname || d.hostname === q.hostname.toLowerCase()) &&
            (!q.service || d.service === q.service) &&
            (!q.zone_id || d.zone_id === q.zone_id) &&
            (!q.zone_name || d.zone_name === q.zone_name.toLowerCase()),
        )
        .map(domainView);
    },
  );
  const domainParams = { domain_id: 'hex32' } as const;
  async function requireDomain(accountId: string, id: string) {
    const doc = await workerDomains.get(db, accountId, id);
    if (!doc) throw apiError('worker_domain_not_found', id);
    return doc;
  }
  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/domains/:domain_id',
      operationId: 'worker-domain-get-a-domain',
      summary: 'Get a custom domain',
      auth: read,
      params: domainParams,
      tags,
    },
    async (req) =>
      domainView((await requireDomain(req.params.account_id, req.params.domain_id)).body),
  );
  router.add(
    {
      method: 'DELETE',
      path: '/accounts/:account_id/workers/domains/:domain_id',
      operationId: 'worker-domain-detach-from-domain',
      summary: 'Detach a custom domain',
      auth: edit,
      params: domainParams,
      tags,
    },
    async (req) => {
      await requireDomain(req.params.account_id, req.params.domain_id);
      await workerDomains.delete(db, req.params.account_id, req.params.domain_id);
      await changed({ kind: 'domains' });
      return { id: req.params.domain_id };
    },
  );

  // ---- the account's subdomain and per-script enablement -----------------------------------
  router.add(
    {
      method: 'GET',
      path: '/accounts/:account_id/workers/subdomain',
      operationId: 'worker-subdomain-get-subdomain',
      summary: "The account's workers subdomain",
      auth: read,
      tags,
    },
    async (req) => {
      const doc = await workerSubdomains.get(db, GLOBAL_SCOPE, req.params.account_id);
      if (!doc) throw apiError('worker_subdomain_not_found', req.params.account_id);
      return { subdomain: doc.body.subdomain };
    },
  );
  router.add(
    {
      method: 'PUT',
      path: '/accounts/:account_id/workers/subdomain',
      operationId: 'worker-subdomain-create-subdomain',
      summary: "Set the account's workers subdomain",
      auth: edit,
      body: SubdomainBody,
      tags,
    },
    async (req) => {
      const accountId = req.params.account_id;
      const subdomain = req.body.subdomain.trim().toLowerCase();
      if (!SUBDOMAIN.test(subdomain))
        throw apiError(
          'worker_subdomain_invalid',
          `subdomain ${JSON.stringify(req.body.subdomain)} is invalid: use 1-63 letters, digits and inner dashes`,
        );
      const [taken] = await workerSubdomains.findBy(db, 'subdomain', subdomain);
      if (taken && taken.id !== accountId) throw apiError('worker_subdomain_taken', subdomain);
      const doc = await workerSubdomains.get(db, GLOBAL_SCOPE, accountId);
      if (doc) await workerSubdomains.update(db, doc, { subdomain }, clock.now());
      else await workerSubdomains.insert(db, GLOBAL_SCOPE, accountId, { subdomain }, clock.now());
      await changed({ kind: 'subdomains' });
      return { subdomain };
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: '/accounts/:account_id/workers/subdomain',
      operationId: 'worker-subdomain-delete-subdomain',
      summary: "Remove the account's workers subdomain",
      auth: edit,
      tags,
    },
    async (req) => {
      if (!(await workerSubdomains.delete(db, GLOBAL_SCOPE, req.params.account_id)))
        throw apiError('worker_subdomain_not_found', req.params.account_id);
      await changed({ kind: 'subdomains' });
      return null;
    },
  );

  const scriptParams = { script_name: 'any' } as const;
  const scriptSubdomainPath = '/accounts/:account_id/workers/scripts/:script_name/subdomain';
  router.add(
    {
      method: 'GET',
      path: scriptSubdomainPath,
      operationId: 'worker-script-get-subdomain',
      summary: "Whether a script is served on the account's subdomain",
      auth: read,
      params: scriptParams,
      tags,
    },
    async (req) => {
      await requireScript(db, req.params.account_id, req.params.script_name);
      const doc = await scriptSubdomains.get(db, req.params.account_id, req.params.script_name);
      return doc?.body ?? { enabled: false, previews_enabled: false };
    },
  );
  async function setScriptSubdomain(
    accountId: string,
    name: string,
    enabled: boolean,
    previews?: boolean,
  ) {
    await requireScript(db, accountId, name);
    const doc = await scriptSubdomains.get(db, accountId, name);
    const body = { enabled, previews_enabled: previews ?? doc?.body.previews_enabled ?? enabled };
    if (doc) await scriptSubdomains.update(db, doc, body, clock.now());
    else await scriptSubdomains.insert(db, accountId, name, body, clock.now());
    changed({ kind: 'subdomains' });
    return body;
  }
  router.add(
    {
      method: 'POST',
      path: scriptSubdomainPath,
      operationId: 'worker-script-post-subdomain',
      summary: "Serve a script on the account's subdomain (or stop)",
      auth: edit,
      body: ScriptSubdomainBody,
      params: scriptParams,
      tags,
    },
    async (req) =>
      setScriptSubdomain(
        req.params.account_id,
        req.params.script_name,
        req.body.enabled,
        req.body.previews_enabled,
      ),
  );
  router.add(
    {
      method: 'DELETE',
      path: scriptSubdomainPath,
      operationId: 'worker-script-delete-subdomain',
      summary: "Stop serving a script on the account's subdomain",
      auth: edit,
      params: scriptParams,
      tags,
    },
    async (req) => setScriptSubdomain(req.params.account_id, req.params.script_name, false, false),
  );
}
