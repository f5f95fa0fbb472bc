/**
 * What makes a script reachable by traffic: zone routes (`example.com/api/*` → script), custom
 * domains (a host name served by a script) and the account's workers.dev-style subdomain with the
 * scripts enabled on it. Stored as documents; the edge reads them from in-memory views that are
 * rebuilt from the database when a change event arrives (the event bus spans nodes when it is
 * PostgreSQL's), so the hot path never waits on SQL for a host lookup.
 */
import type { Executor } from '../../core/storage/db.ts';
import { defineCollection } from '../../core/storage/collection.ts';
import { GLOBAL_SCOPE } from '../../core/accounts.ts';

export interface StoredRoute {
  id: string;
  pattern: string;
  /** Absent: a route that turns scripts off for what it matches. */
  script?: string;
}

export interface StoredDomain {
  id: string;
  hostname: string;
  service: string;
  environment: string;
  zone_id: string;
  zone_name: string;
  cert_id: string;
}

export interface StoredSubdomain {
  subdomain: string;
}

export interface StoredScriptSubdomain {
  enabled: boolean;
  previews_enabled: boolean;
}

export const workerRoutes = defineCollection<StoredRoute, 'script'>({
  kind: 'worker_route',
  indexes: { script: (b) => b.script ?? null },
});
export const workerDomains = defineCollection<StoredDomain, 'hostname' | 'service'>({
  kind: 'worker_domain',
  indexes: { hostname: (b) => b.hostname, service: (b) => b.service },
});
/** One per account, id = account id, in the global scope (names are unique across accounts). */
export const workerSubdomains = defineCollection<StoredSubdomain, 'subdomain'>({
  kind: 'worker_subdomain',
  indexes: { subdomain: (b) => b.subdomain },
});
/** Per script (scope = account, id = script name). */
export const scriptSubdomains = defineCollection<StoredScriptSubdomain>({
  kind: 'worker_script_subdomain',
});

export const TRIGGERS_CHANGED = 'workers.triggers.changed';
export type TriggersChange =
  { kind: 'routes'; zoneId: string } | { kind: 'domains' } | { kind: 'subdomains' };

// ---- route patterns ---------------------------------------------------------------------------

export interface CompiledPattern {
  pattern: string;
  scheme?: 'http' | 'https';
  /** Host without the wildcard; `wildcard` says how the host may extend it. */
  host: string;
  /** `*.example.com`: subdomains only; `*example.com`: the name and anything ending in it. */
  wildcard: 'none' | 'subdomains' | 'suffix';
  path: string;
  pathWildcard: boolean;
}

export class PatternError extends Error {}

const HOST_CHARS = /^[a-z0-9.-]+$/;

/** Parses a route pattern (`[http[s]://]host[/path]`, `*` first in the host, last in the path). */
export function compilePattern(raw: string): CompiledPattern {
  const pattern = raw.trim();
  if (pattern.length === 0) throw new PatternError('the route pattern is empty');
  if (pattern.length > 1024)
    throw new PatternError('the route pattern is longer than 1024 characters');
  if (/[\s?#]/.test(pattern))
    throw new PatternError(
      `route pattern ${JSON.stringify(raw)}: spaces, query strings and fragments are not allowed`,
    );
  let rest = pattern;
  let scheme: CompiledPattern['scheme'];
  const m = /^(https?):\/\//i.exec(rest);
  if (m) {
    scheme = m[1].toLowerCase() as 'http' | 'https';
    rest = rest.slice(m[0].length);
  } else if (rest.includes('://')) {
    throw new PatternError(
      `route pattern ${JSON.stringify(raw)}: only http:// and https:// are allowed`,
    );
  }
  const slash = rest.indexOf('/');
  let host = (slash < 0 ? rest : rest.slice(0, slash)).toLowerCase();
  const path = slash < 0 ? '/' : rest.slice(slash);
  if (host.includes(':'))
    throw new PatternError(
      `route pattern ${JSON.stringify(raw)}: ports are not allowed in a route pattern`,
    );
  let wildcard: CompiledPattern['wildcard'] = 'none';
  if (host.startsWith('*.')) {
    wildcard = 'subdomains';
    host = host.slice(2);
  } else if (host.startsWith('*')) {
    wildcard = 'suffix';
    host = host.slice(1);
  }
  if (
    !host ||
    !HOST_CHARS.test(host) ||
    host.startsWith('.') ||
    host.endsWith('.') ||
    host.includes('..')
  )
    throw new PatternError(
      `route pattern ${JSON.stringify(raw)}: ${JSON.stringify(host)} is not a valid host name (a "*" may only lead the host)`,
    );
  const star = path.indexOf('*');
  if (star >= 0 && star !== path.length - 1)
    throw new PatternError(`route pattern ${JSON.stringify(raw)}: "*" may only end the path`);
  const pathWildcard = star >= 0;
  return {
    pattern,
    scheme,
    host,
    wildcard,
    path: pathWildcard ? path.slice(0, -1) : path,
    pathWildcard,
  };
}

/** Whether the pattern's host lies inside the zone `zoneName`. */
export function patternInZone(p: CompiledPattern, zoneName: string): boolean {
  const zone = zoneName.toLowerCase();
  return p.host === zone || p.host.endsWith(`.${zone}`);
}

export function matchPattern(
  p: CompiledPattern,
  scheme: string,
  host: string,
  path: string,
): boolean {
  if (p.scheme && p.scheme !== scheme) return false;
  if (p.wildcard === 'none') {
    if (host !== p.host) return false;
  } else if (p.wildcard === 'subdomains') {
    if (!host.endsWith(`.${p.host}`)) return false;
  } else if (host !== p.host && !host.endsWith(p.host)) {
    return false;
  }
  return p.pathWildcard ? path.startsWith(p.path) : path === p.path;
}

/** Most specific first: exact host, longer host, exact path, longer path. */
export function bySpecificity(a: CompiledPattern, b: CompiledPattern): number {
  const rank = (p: CompiledPattern) => [
    p.wildcard === 'none' ? 1 : 0,
    p.host.length,
    p.pathWildcard ? 0 : 1,
    p.path.length,
    p.scheme ? 1 : 0,
  ];
  const ra = rank(a);
  const rb = rank(b);
  for (let i = 0; i < ra.length; i++) if (ra[i] !== rb[i]) return rb[i] - ra[i];
  return 0;
}

// ---- in-memory views for the edge -------------------------------------------------------------

export interface CompiledRoute {
  id: string;
  script?: string;
  match: CompiledPattern;
}

export interface DomainTarget {
  accountId: string;
  zoneId: string;
  zoneName: string;
  service: string;
}

export class TriggerViews {
  private readonly routes = new Map<string, Promise<CompiledRoute[]>>();
  private domains = new Map<string, DomainTarget>();
  private subdomains = new Map<string, string>();
  private readonly scriptSubdomain = new Map<string, Promise<boolean>>();

  constructor(private readonly db: Executor) {}

  async load(): Promise<void> {
    await Promise.all([this.loadDomains(), this.loadSubdomains()]);
  }

  private async loadDomains(): Promise<void> {
    const next = new Map<string, DomainTarget>();
    for (const d of await workerDomains.all(this.db, null)) {
      next.set(d.body.hostname, {
        accountId: d.scopeId,
        zoneId: d.body.zone_id,
        zoneName: d.body.zone_name,
        service: d.body.service,
      });
    }
    this.domains = next;
  }

  private async loadSubdomains(): Promise<void> {
    const next = new Map<string, string>();
    for (const d of await workerSubdomains.all(this.db, GLOBAL_SCOPE))
      next.set(d.body.subdomain, d.id);
    this.subdomains = next;
    this.scriptSubdomain.clear();
  }

  /** Applies a change event (from this node or another). */
  changed(change: TriggersChange): Promise<void> {
    if (change.kind === 'routes') {
      this.routes.delete(change.zoneId);
      return Promise.resolve();
    }
    if (change.kind === 'domains') return this.loadDomains();
    return this.loadSubdomains();
  }

  zoneRoutes(zoneId: string): Promise<CompiledRoute[]> {
    let hit = this.routes.get(zoneId);
    if (!hit) {
      hit = workerRoutes.all(this.db, zoneId).then((docs) =>
        docs
          .map((d) => ({
            id: d.id,
            script: d.body.script,
            match: compilePattern(d.body.pattern),
          }))
          .sort((a, b) => bySpecificity(a.match, b.match)),
      );
      this.routes.set(zoneId, hit);
      hit.catch(() => this.routes.delete(zoneId));
    }
    return hit;
  }

  domain(host: string): DomainTarget | undefined {
    return this.domains.get(host);
  }

  accountOfSubdomain(subdomain: string): string | undefined {
    return this.subdomains.get(subdomain);
  }

  subdomainEnabled(accountId: string, script: string): Promise<boolean> {
    const key = `${accountId}/${script}`;
    let hit = this.scriptSubdomain.get(key);
    if (!hit) {
      hit = scriptSubdomains.get(this.db, accountId, script).then((d) => d?.body.enabled ?? false);
      this.scriptSubdomain.set(key, hit);
      hit.catch(() => this.scriptSubdomain.delete(key));
    }
    return hit;
  }

  forgetScript(accountId: string, script: string): void {
    this.scriptSubdomain.delete(`${accountId}/${script}`);
  }
}
