/**
 * GRE and IPsec tunnels of the network-transit service (`/accounts/{account_id}/magic/gre_tunnels`,
 * `/magic/ipsec_tunnels`) and their health checks (spec 000 "Tunnel health check"). Unlike the
 * CNI routes these answer in the v4 envelope, with the official client's result shapes: create →
 * the tunnel, list → `{gre_tunnels}`, get → `{gre_tunnel}`, update → `{modified,
 * modified_gre_tunnel}`, bulk update → `{modified, modified_gre_tunnels}`, delete → `{deleted,
 * deleted_gre_tunnel}` (and the `ipsec_` forms).
 *
 * A PUT on one tunnel is a merge: fields left out keep their stored value (the platform's own
 * example sends only `{health_check: {rate: "low"}}`), and `health_check` merges field by field.
 * The records are checked whole after the merge, so a PUT cannot leave an invalid tunnel behind.
 * Names are unique per account across GRE and IPsec tunnels.
 */
import { randomInt } from 'node:crypto';
import { isIPv6 } from 'node:net';
import { z } from 'zod';
import type { AreaContext } from '../../core/area.ts';
import { ApiError, apiError, CODES, type ErrorItem } from '../../core/errors.ts';
import { hexId } from '../../core/ids.ts';
import type { Executor } from '../../core/storage/db.ts';
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { qBool, validate } from '../../core/validate.ts';
import { asnProblem, parseCidr, parseIpv4 } from './addressing.ts';
import { requireAccount } from '../../core/accounts.ts';
import { CNI_PERMISSIONS } from './http.ts';
import type { ProbeSpec, ProbeState, TunnelProber } from './prober.ts';

// --- request shapes ------------------------------------------------------------------------------

const HealthCheckBody = z.object({
  enabled: z.boolean().optional(),
  // A string address, or the object form `{saved}` (`effective` is answered, ignored on input).
  target: z
    .union([z.string(), z.object({ saved: z.string().optional(), effective: z.string().optional() })])
    .optional(),
  // `medium` is the spec's name for the platform's `mid`; both are accepted and stored as `mid`.
  rate: z.enum(['low', 'mid', 'medium', 'high']).optional(),
  type: z.enum(['reply', 'request']).optional(),
  direction: z.enum(['unidirectional', 'bidirectional']).optional(),
});

const BgpBody = z.object({
  customer_asn: z.number().int(),
  extra_prefixes: z.array(z.string()).max(256).optional(),
  md5_key: z.string().max(80).optional(),
  export_filter_id: z.string().max(64).optional(),
  import_filter_id: z.string().max(64).optional(),
});

const common = {
  name: z.string().optional(),
  description: z.string().max(1000).optional(),
  interface_address: z.string().optional(),
  interface_address6: z.string().nullable().optional(),
  automatic_return_routing: z.boolean().optional(),
  health_check: HealthCheckBody.optional(),
  bgp: BgpBody.nullable().optional(),
};

export const GreBody = z.object({
  ...common,
  cloudflare_gre_endpoint: z.string().optional(),
  customer_gre_endpoint: z.string().optional(),
  mtu: z.number().int().optional(),
  ttl: z.number().int().optional(),
});
type GreBody = z.infer<typeof GreBody>;

export const IpsecBody = z.object({
  ...common,
  cloudflare_endpoint: z.string().optional(),
  customer_endpoint: z.string().nullable().optional(),
  psk: z.string().optional(),
  allow_null_cipher: z.boolean().optional(),
  replay_protection: z.boolean().optional(),
  custom_remote_identities: z.object({ fqdn_id: z.string().optional() }).nullable().optional(),
});
type IpsecBody = z.infer<typeof IpsecBody>;

const WriteQuery = z.object({ validate_only: qBool().optional() });

// --- stored records ------------------------------------------------------------------------------

export type Rate = 'low' | 'mid' | 'high';

export interface StoredHealthCheck {
  enabled: boolean;
  /** The saved target; '' means the default (the customer endpoint). */
  target: string;
  rate: Rate;
  type: 'reply' | 'request';
  direction: 'unidirectional' | 'bidirectional';
}

interface StoredCommon {
  id: string;
  name: string;
  description: string;
  interface_address: string;
  interface_address6: string | null;
  automatic_return_routing: boolean;
  health_check: StoredHealthCheck;
  bgp: z.infer<typeof BgpBody> | null;
  created_on: string;
  modified_on: string;
}

export interface StoredGre extends StoredCommon {
  cloudflare_gre_endpoint: string;
  customer_gre_endpoint: string;
  mtu: number;
  ttl: number;
}

export interface StoredIpsec extends StoredCommon {
  cloudflare_endpoint: string;
  customer_endpoint: string | null;
  /** Kept for the IKE session; never answered except by psk_generate. */
  psk: string | null;
  psk_generated_on: string | null;
  allow_null_cipher: boolean;
  replay_protection: boolean;
  custom_remote_identities: { fqdn_id?: string } | null;
}

export const greTunnels = defineCollection<StoredGre, 'name'>({
  kind: 'magic_gre_tunnel',
  indexes: { name: (t) => t.name },
});
export const ipsecTunnels = defineCollection<StoredIpsec, 'name'>({
  kind: 'magic_ipsec_tunnel',
  indexes: { name: (t) => t.name },
});

/** Probe interval per rate, ms. The platform documents the rates but not their periods. */
export const RATE_INTERVAL_MS: Record<Rate, number> = { high: 1_000, mid: 10_000, low: 60_000 };

export const GRE_MTU = { min: 576, max: 1476 };

// --- checks --------------------------------------------------------------------------------------

function problem(message: string): ErrorItem {
  return { code: CODES.magic_invalid.code, message };
}

/** Tunnel names: the platform allows at most 15 characters, no spaces or punctuation. */
const TUNNEL_NAME = /^[A-Za-z0-9_-]{1,15}$/;

function checkEndpoint(field: string, value: string | null | undefined, out: ErrorItem[]): void {
  if (value === undefined || value === null) return;
  const n = parseIpv4(value);
  if (n === undefined) {
    out.push(problem(`${field}: ${JSON.stringify(value)} is not an IPv4 address (A.B.C.D)`));
    return;
  }
  const first = n >>> 24;
  if (first === 0 || n === 0xffffffff || (first >= 224 && first <= 255)) {
    out.push(problem(`${field}: ${value} is not a unicast address; use the endpoint's public IPv4 address`));
  }
}

function isPrivate(n: number): boolean {
  const a = n >>> 24;
  const b = (n >>> 16) & 255;
  return a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168);
}

function checkInterface(value: string, out: ErrorItem[]): void {
  const c = parseCidr(value);
  if (typeof c === 'string') {
    out.push(problem(`interface_address: ${c}; send a /31 such as 10.212.0.0/31`));
    return;
  }
  if (c.prefix !== 31 && c.prefix !== 30) {
    out.push(problem(`interface_address: must be a /31 (or /30) with one address per tunnel end, got /${c.prefix}`));
    return;
  }
  if (!isPrivate(c.address)) {
    out.push(
      problem('interface_address: must be in private space (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16)'),
    );
    return;
  }
  // In a /30 the first and last addresses are the network and broadcast addresses.
  const host = c.address & 3;
  if (c.prefix === 30 && (host === 0 || host === 3)) {
    out.push(problem(`interface_address: ${value} is the network or broadcast address of its /30`));
  }
}

function checkInterface6(value: string | null | undefined, out: ErrorItem[]): void {
  if (value === undefined || value === null) return;
  const m = /^([^/]+)\/(\d{1,3})$/.exec(value);
  if (!m || !isIPv6(m[1]) || m[2] !== '127') {
    out.push(problem(`interface_address6: ${JSON.stringify(value)} is not an IPv6 /127 (e.g. 2606:54c1:7:0:a9fe:12d2:1:200/127)`));
  }
}

function checkCommon(t: StoredCommon, out: ErrorItem[]): void {
  if (!t.name) out.push(problem('name: required'));
  else if (!TUNNEL_NAME.test(t.name)) {
    out.push(problem('name: 1 to 15 letters, digits, "_" or "-" (no spaces)'));
  }
  if (!t.interface_address) out.push(problem('interface_address: required (a /31 such as 10.212.0.0/31)'));
  else checkInterface(t.interface_address, out);
  checkInterface6(t.interface_address6, out);
  if (t.health_check.target !== '') checkEndpoint('health_check.target', t.health_check.target, out);
  if (t.bgp) {
    const p = asnProblem(t.bgp.customer_asn);
    if (p) out.push(problem(`bgp.customer_asn: ${p}`));
    for (const prefix of t.bgp.extra_prefixes ?? []) {
      if (typeof parseCidr(prefix) === 'string') out.push(problem(`bgp.extra_prefixes: ${JSON.stringify(prefix)} is not an IPv4 CIDR`));
    }
  }
}

function checkGre(t: StoredGre): ErrorItem[] {
  const out: ErrorItem[] = [];
  if (!t.cloudflare_gre_endpoint) out.push(problem('cloudflare_gre_endpoint: required (an IPv4 address)'));
  else checkEndpoint('cloudflare_gre_endpoint', t.cloudflare_gre_endpoint, out);
  if (!t.customer_gre_endpoint) out.push(problem('customer_gre_endpoint: required (an IPv4 address)'));
  else checkEndpoint('customer_gre_endpoint', t.customer_gre_endpoint, out);
  checkCommon(t, out);
  if (t.mtu < GRE_MTU.min || t.mtu > GRE_MTU.max) {
    out.push(problem(`mtu: must be between ${GRE_MTU.min} and ${GRE_MTU.max} (GRE adds 24 bytes to a 1500-byte path), got ${t.mtu}`));
  }
  if (t.ttl < 1 || t.ttl > 255) out.push(problem(`ttl: must be between 1 and 255, got ${t.ttl}`));
  return out;
}

/** Printable ASCII, as IKE implementations read a PSK from a configuration line. */
const PSK = /^[\x21-\x7e]{8,128}$/;

function checkIpsec(t: StoredIpsec, accountId: string): ErrorItem[] {
  const out: ErrorItem[] = [];
  if (!t.cloudflare_endpoint) out.push(problem('cloudflare_endpoint: required (an IPv4 address)'));
  else checkEndpoint('cloudflare_endpoint', t.cloudflare_endpoint, out);
  checkEndpoint('customer_endpoint', t.customer_endpoint, out);
  checkCommon(t, out);
  if (t.psk !== null && !PSK.test(t.psk)) {
    out.push(problem('psk: 8 to 128 printable ASCII characters without spaces; or leave it out and call psk_generate'));
  }
  const fqdn = t.custom_remote_identities?.fqdn_id;
  if (fqdn !== undefined && fqdn !== '') {
    const suffix = `.${accountId}.custom.ipsec.cloudflare.com`;
    const label = fqdn.endsWith(suffix) ? fqdn.slice(0, -suffix.length) : '';
    if (!/^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(label)) {
      out.push(problem(`custom_remote_identities.fqdn_id: must be <label>${suffix}`));
    }
  }
  return out;
}

// --- merging a body onto a record ----------------------------------------------------------------

const DEFAULT_HEALTH_CHECK: StoredHealthCheck = {
  enabled: true,
  target: '',
  rate: 'mid',
  type: 'reply',
  direction: 'unidirectional',
};

function mergeHealthCheck(
  current: StoredHealthCheck,
  body: z.infer<typeof HealthCheckBody> | undefined,
): StoredHealthCheck {
  if (!body) return current;
  const target =
    body.target === undefined
      ? current.target
      : typeof body.target === 'string'
        ? body.target
        : (body.target.saved ?? '');
  return {
    enabled: body.enabled ?? current.enabled,
    target,
    rate: body.rate === undefined ? current.rate : body.rate === 'medium' ? 'mid' : body.rate,
    type: body.type ?? current.type,
    direction: body.direction ?? current.direction,
  };
}

function mergeCommon<T extends StoredCommon>(current: T, body: z.infer<z.ZodObject<typeof common>>, at: string): T {
  return {
    ...current,
    name: body.name ?? current.name,
    description: body.description ?? current.description,
    interface_address: body.interface_address ?? current.interface_address,
    interface_address6:
      body.interface_address6 === undefined ? current.interface_address6 : body.interface_address6,
    automatic_return_routing: body.automatic_return_routing ?? current.automatic_return_routing,
    health_check: mergeHealthCheck(current.health_check, body.health_check),
    bgp: body.bgp === undefined ? current.bgp : body.bgp,
    modified_on: at,
  };
}

function mergeGre(current: StoredGre, body: GreBody, at: string): StoredGre {
  return {
    ...mergeCommon(current, body, at),
    cloudflare_gre_endpoint: body.cloudflare_gre_endpoint ?? current.cloudflare_gre_endpoint,
    customer_gre_endpoint: body.customer_gre_endpoint ?? current.customer_gre_endpoint,
    mtu: body.mtu ?? current.mtu,
    ttl: body.ttl ?? current.ttl,
  };
}

function mergeIpsec(current: StoredIpsec, body: IpsecBody, at: string): StoredIpsec {
  const psk = body.psk ?? current.psk;
  return {
    ...mergeCommon(current, body, at),
    cloudflare_endpoint: body.cloudflare_endpoint ?? current.cloudflare_endpoint,
    customer_endpoint: body.customer_endpoint === undefined ? current.customer_endpoint : body.customer_endpoint,
    psk,
    psk_generated_on: body.psk !== undefined ? at : current.psk_generated_on,
    allow_null_cipher: body.allow_null_cipher ?? current.allow_null_cipher,
    replay_protection: body.replay_protection ?? current.replay_protection,
    custom_remote_identities:
      body.custom_remote_identities === undefined ? current.custom_remote_identities : body.custom_remote_identities,
  };
}

function blankCommon(at: string): StoredCommon {
  return {
    id: hexId(),
    name: '',
    description: '',
    interface_address: '',
    interface_address6: null,
    automatic_return_routing: false,
    health_check: DEFAULT_HEALTH_CHECK,
    bgp: null,
    created_on: at,
    modified_on: at,
  };
}

const blankGre = (at: string): StoredGre => ({
  ...blankCommon(at),
  cloudflare_gre_endpoint: '',
  customer_gre_endpoint: '',
  mtu: GRE_MTU.max,
  ttl: 64,
});

const blankIpsec = (at: string): StoredIpsec => ({
  ...blankCommon(at),
  cloudflare_endpoint: '',
  customer_endpoint: null,
  psk: null,
  psk_generated_on: null,
  allow_null_cipher: false,
  replay_protection: false,
  custom_remote_identities: null,
});

// --- views ---------------------------------------------------------------------------------------

/** Where the prober sends its echoes: the saved target, else the customer endpoint. */
export function effectiveTarget(t: StoredGre | StoredIpsec): string | null {
  if (t.health_check.target) return t.health_check.target;
  return 'customer_gre_endpoint' in t ? t.customer_gre_endpoint : t.customer_endpoint;
}

function healthCheckView(t: StoredGre | StoredIpsec, objectTarget: boolean) {
  const hc = t.health_check;
  const effective = effectiveTarget(t) ?? '';
  return {
    enabled: hc.enabled,
    target: objectTarget ? { saved: hc.target, effective } : effective,
    rate: hc.rate,
    type: hc.type,
    direction: hc.direction,
  };
}

function healthFields(state: ProbeState | undefined, enabled: boolean) {
  if (!enabled) return { health_status: 'disabled', health_checked_at: null };
  return { health_status: state?.status ?? 'unknown', health_checked_at: state?.checked_at ?? null };
}

// --- routes --------------------------------------------------------------------------------------

type Kind = 'gre' | 'ipsec';

export function mountMagicTunnelRoutes(ctx: AreaContext, prober: TunnelProber, probeIntervalMs?: number): void {
  const { router, database, clock } = ctx;
  const db = database.db;
  const tags = ['magic'];

  const probeSpec = (account: string, kind: Kind, t: StoredGre | StoredIpsec) =>
    specOf(account, kind, t, probeIntervalMs);

  const greView = (_account: string, t: StoredGre, objectTarget: boolean) => {
    return {
      id: t.id,
      name: t.name,
      description: t.description,
      cloudflare_gre_endpoint: t.cloudflare_gre_endpoint,
      customer_gre_endpoint: t.customer_gre_endpoint,
      interface_address: t.interface_address,
      ...(t.interface_address6 ? { interface_address6: t.interface_address6 } : {}),
      mtu: t.mtu,
      ttl: t.ttl,
      automatic_return_routing: t.automatic_return_routing,
      health_check: healthCheckView(t, objectTarget),
      ...(t.bgp ? { bgp: t.bgp } : {}),
      created_on: t.created_on,
      modified_on: t.modified_on,
      ...healthFields(prober.state('gre', t.id), t.health_check.enabled),
    };
  };

  const ipsecView = (_account: string, t: StoredIpsec, objectTarget: boolean) => {
    return {
      id: t.id,
      name: t.name,
      description: t.description,
      cloudflare_endpoint: t.cloudflare_endpoint,
      ...(t.customer_endpoint ? { customer_endpoint: t.customer_endpoint } : {}),
      interface_address: t.interface_address,
      ...(t.interface_address6 ? { interface_address6: t.interface_address6 } : {}),
      allow_null_cipher: t.allow_null_cipher,
      replay_protection: t.replay_protection,
      automatic_return_routing: t.automatic_return_routing,
      ...(t.custom_remote_identities ? { custom_remote_identities: t.custom_remote_identities } : {}),
      health_check: healthCheckView(t, objectTarget),
      ...(t.bgp ? { bgp: t.bgp } : {}),
      ...(t.psk_generated_on ? { psk_metadata: { last_generated_on: t.psk_generated_on } } : {}),
      created_on: t.created_on,
      modified_on: t.modified_on,
      ...healthFields(prober.state('ipsec', t.id), t.health_check.enabled),
    };
  };

  /** `x-magic-new-hc-target: true` asks for the object form of `health_check.target`. */
  const objectForm = (c: { req: { header(name: string): string | undefined } }) =>
    c.req.header('x-magic-new-hc-target')?.toLowerCase() === 'true';

  /**
   * 409 when another tunnel of the account (GRE or IPsec) already has the name; tunnels in `except`
   * (the one being updated, or every tunnel of a bulk update) do not count.
   */
  async function checkNameFree(tx: Executor, accountId: string, name: string, except: Set<string>) {
    const filters = [{ field: 'name' as const, op: 'eq' as const, value: name }];
    const gre = await greTunnels.list(tx, accountId, { filters });
    const ipsec = await ipsecTunnels.list(tx, accountId, { filters });
    if ([...gre.items, ...ipsec.items].some((d) => !except.has(d.id))) throw apiError('magic_tunnel_exists', name);
  }

  interface KindOps<T extends StoredGre | StoredIpsec, B> {
    kind: Kind;
    label: string;
    collection: typeof greTunnels | typeof ipsecTunnels;
    schema: z.ZodType<B>;
    blank: (at: string) => T;
    merge: (current: T, body: B, at: string) => T;
    check: (t: T, accountId: string) => ErrorItem[];
    view: (account: string, t: T, objectTarget: boolean) => Record<string, unknown>;
  }

  const gre: KindOps<StoredGre, GreBody> = {
    kind: 'gre',
    label: 'GRE',
    collection: greTunnels,
    schema: GreBody,
    blank: blankGre,
    merge: mergeGre,
    check: (t) => checkGre(t),
    view: greView,
  };
  const ipsec: KindOps<StoredIpsec, IpsecBody> = {
    kind: 'ipsec',
    label: 'IPsec',
    collection: ipsecTunnels,
    schema: IpsecBody,
    blank: blankIpsec,
    merge: mergeIpsec,
    check: checkIpsec,
    view: ipsecView,
  };

  function mount<T extends StoredGre | StoredIpsec, B>(ops: KindOps<T, B>): void {
    const plural = `${ops.kind}_tunnels`;
    // The platform's operation ids: magic-gre-tunnels-update-gre-tunnel and so on.
    const opId = (what: string) => `magic-${ops.kind}-tunnels-${what.replace(/KIND/g, ops.kind)}`;
    const singular = `${ops.kind}_tunnel`;
    // The platform's parameter names: `{gre_tunnel_id}`, `{ipsec_tunnel_id}`.
    const idParam = `${singular}_id`;
    const prefix = `/accounts/:account_id/magic/${plural}`;
    const coll = ops.collection as unknown as {
      list: typeof greTunnels.list;
      get: (db: Executor, scope: string, id: string) => Promise<Doc<T> | undefined>;
      insert: (db: Executor, scope: string, id: string, body: T, at: Date) => Promise<Doc<T>>;
      update: (db: Executor, doc: Doc<T>, body: T, at: Date) => Promise<Doc<T>>;
      delete: typeof greTunnels.delete;
      all: (db: Executor, scope: string | null) => Promise<Doc<T>[]>;
    };
    const notFound = (id: string) => apiError('magic_tunnel_not_found', ops.label, id);
    const lock = (tx: Parameters<typeof lockScope>[0], accountId: string) =>
      lockScope(tx, database.dialect, `magic:${accountId}`);

    async function checked(tx: Executor, accountId: string, t: T, self: string | null): Promise<void> {
      const problems = ops.check(t, accountId);
      if (problems.length > 0) throw new ApiError(400, problems);
      await checkNameFree(tx, accountId, t.name, new Set(self ? [self] : []));
    }

    /**
     * Points the prober at what is stored now. Read back after the commit, so two updates racing
     * each other leave the prober with the one that committed last.
     */
    async function syncProbe(accountId: string, id: string): Promise<void> {
      const doc = await coll.get(db, accountId, id);
      prober.set(ops.kind, id, doc ? probeSpec(accountId, ops.kind, doc.body) : undefined);
    }

    router.add(
      {
        method: 'GET',
        path: prefix,
        operationId: opId('list-KIND-tunnels'),
        summary: `List ${ops.label} tunnels`,
        auth: { permission: CNI_PERMISSIONS, level: 'read' },
        tags,
      },
      async ({ params, c }) => {
        await requireAccount(db, params.account_id);
        const docs = await coll.all(db, params.account_id);
        docs.sort((a, b) => a.createdOn.localeCompare(b.createdOn) || a.id.localeCompare(b.id));
        return { [plural]: docs.map((d) => ops.view(params.account_id, d.body, objectForm(c))) };
      },
    );

    router.add(
      {
        method: 'POST',
        path: prefix,
        operationId: opId('create-KIND-tunnels'),
        summary: `Create an ${ops.label} tunnel (?validate_only=true: check only)`,
        auth: { permission: CNI_PERMISSIONS, level: 'edit' },
        query: WriteQuery,
        body: ops.schema as z.ZodType,
        tags,
      },
      async ({ params, query, body, c }) => {
        const accountId = params.account_id;
        await requireAccount(db, accountId);
        const at = clock.now();
        const record = ops.merge(ops.blank(at.toISOString()), body as B, at.toISOString());
        if (query.validate_only) {
          await checked(db, accountId, record, null);
          return ops.view(accountId, record, objectForm(c));
        }
        await db.transaction().execute(async (tx) => {
          await lock(tx, accountId);
          await checked(tx, accountId, record, null);
          await coll.insert(tx, accountId, record.id, record, at);
        });
        await syncProbe(accountId, record.id);
        return ops.view(accountId, record, objectForm(c));
      },
    );

    router.add(
      {
        method: 'GET',
        path: `${prefix}/:${idParam}`,
        operationId: opId('list-KIND-tunnel-details'),
        summary: `Get an ${ops.label} tunnel`,
        auth: { permission: CNI_PERMISSIONS, level: 'read' },
        tags,
      },
      async ({ params, c }) => {
        await requireAccount(db, params.account_id);
        const doc = await coll.get(db, params.account_id, params[idParam]);
        if (!doc) throw notFound(params[idParam]);
        return { [singular]: ops.view(params.account_id, doc.body, objectForm(c)) };
      },
    );

    router.add(
      {
        method: 'PUT',
        path: `${prefix}/:${idParam}`,
        operationId: opId('update-KIND-tunnel'),
        summary: `Update an ${ops.label} tunnel (fields left out keep their value)`,
        auth: { permission: CNI_PERMISSIONS, level: 'edit' },
        query: WriteQuery,
        body: ops.schema as z.ZodType,
        tags,
      },
      async ({ params, query, body, c }) => {
        const accountId = params.account_id;
        await requireAccount(db, accountId);
        const updated = await db.transaction().execute(async (tx) => {
          if (!query.validate_only) await lock(tx, accountId);
          const doc = await coll.get(tx, accountId, params[idParam]);
          if (!doc) throw notFound(params[idParam]);
          const at = clock.now();
          const next = ops.merge(doc.body, body as B, at.toISOString());
          await checked(tx, accountId, next, doc.id);
          if (!query.validate_only) await coll.update(tx, doc, next, at);
          return next;
        });
        if (!query.validate_only) await syncProbe(accountId, updated.id);
        return { modified: !query.validate_only, [`modified_${singular}`]: ops.view(accountId, updated, objectForm(c)) };
      },
    );

    router.add(
      {
        method: 'PUT',
        path: prefix,
        operationId: opId('update-multiple-KIND-tunnels'),
        summary: `Update several ${ops.label} tunnels at once (all or nothing)`,
        auth: { permission: CNI_PERMISSIONS, level: 'edit' },
        query: WriteQuery,
        body: z.unknown(),
        tags,
      },
      async ({ params, query, body, c }) => {
        const accountId = params.account_id;
        await requireAccount(db, accountId);
        // The client sends the body as given: an array of tunnels with their ids, or `{<plural>: [...]}`.
        const list = Array.isArray(body)
          ? body
          : body && typeof body === 'object' && Array.isArray((body as Record<string, unknown>)[plural])
            ? ((body as Record<string, unknown>)[plural] as unknown[])
            : undefined;
        if (!list || list.length === 0 || list.length > 1000) {
          throw apiError('magic_invalid', `body: send a non-empty array (at most 1000) of tunnels, each with its id, or {"${plural}": [...]}`);
        }
        const entries = list.map((raw, i) => {
          const id = raw && typeof raw === 'object' ? (raw as { id?: unknown }).id : undefined;
          if (typeof id !== 'string' || id === '') {
            throw apiError('magic_invalid', `${plural}[${i}].id: required (the id of the tunnel to update)`);
          }
          return { id, body: validate(ops.schema, raw, 'body') };
        });
        const ids = new Set(entries.map((e) => e.id));
        if (ids.size !== entries.length) throw apiError('magic_invalid', `${plural}: a tunnel id appears twice`);
        const updated = await db.transaction().execute(async (tx) => {
          if (!query.validate_only) await lock(tx, accountId);
          const at = clock.now();
          const docs: { doc: Doc<T>; next: T }[] = [];
          for (const e of entries) {
            const doc = await coll.get(tx, accountId, e.id);
            if (!doc) throw notFound(e.id);
            const next = ops.merge(doc.body, e.body, at.toISOString());
            const problems = ops.check(next, accountId);
            if (problems.length > 0) throw new ApiError(400, problems);
            docs.push({ doc, next });
          }
          // Names: unique within the updated set (so two tunnels may swap names) and against every
          // tunnel outside it.
          const names = new Set<string>();
          for (const { next } of docs) {
            if (names.has(next.name)) throw apiError('magic_tunnel_exists', next.name);
            names.add(next.name);
            await checkNameFree(tx, accountId, next.name, ids);
          }
          if (!query.validate_only) for (const { doc, next } of docs) await coll.update(tx, doc, next, at);
          return docs.map((d) => d.next);
        });
        if (!query.validate_only) for (const t of updated) await syncProbe(accountId, t.id);
        return {
          modified: !query.validate_only,
          [`modified_${plural}`]: updated.map((t) => ops.view(accountId, t, objectForm(c))),
        };
      },
    );

    router.add(
      {
        method: 'DELETE',
        path: `${prefix}/:${idParam}`,
        operationId: opId('delete-KIND-tunnel'),
        summary: `Delete an ${ops.label} tunnel`,
        auth: { permission: CNI_PERMISSIONS, level: 'edit' },
        query: WriteQuery,
        tags,
      },
      async ({ params, query, c }) => {
        const accountId = params.account_id;
        await requireAccount(db, accountId);
        const doc = await db.transaction().execute(async (tx) => {
          if (!query.validate_only) await lock(tx, accountId);
          const doc = await coll.get(tx, accountId, params[idParam]);
          if (!doc) throw notFound(params[idParam]);
          if (!query.validate_only) await coll.delete(tx, accountId, doc.id);
          return doc;
        });
        const view = ops.view(accountId, doc.body, objectForm(c));
        if (!query.validate_only) await syncProbe(accountId, doc.id);
        return { deleted: !query.validate_only, [`deleted_${singular}`]: view };
      },
    );
  }

  mount(gre);
  mount(ipsec);

  router.add(
    {
      method: 'POST',
      path: '/accounts/:account_id/magic/ipsec_tunnels/:ipsec_tunnel_id/psk_generate',
      operationId: 'magic-ipsec-tunnels-generate-pre-shared-key-psk-for-ipsec-tunnels',
      summary: 'Generate and store a new pre-shared key (shown once)',
      auth: { permission: CNI_PERMISSIONS, level: 'edit' },
      query: WriteQuery,
      tags,
    },
    async ({ params, query }) => {
      const accountId = params.account_id;
      await requireAccount(db, accountId);
      const psk = generatePsk();
      const at = clock.now();
      await db.transaction().execute(async (tx) => {
        if (!query.validate_only) await lockScope(tx, database.dialect, `magic:${accountId}`);
        const doc = await ipsecTunnels.get(tx, accountId, params.ipsec_tunnel_id);
        if (!doc) throw apiError('magic_tunnel_not_found', 'IPsec', params.ipsec_tunnel_id);
        if (!query.validate_only) {
          await ipsecTunnels.update(tx, doc, { ...doc.body, psk, psk_generated_on: at.toISOString(), modified_on: at.toISOString() }, at);
        }
      });
      return { ipsec_tunnel_id: params.ipsec_tunnel_id, psk, psk_metadata: { last_generated_on: at.toISOString() } };
    },
  );
}

const PSK_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** 32 characters from a 62-letter alphabet: about 190 bits, in the platform's PSK form. */
export function generatePsk(): string {
  let out = '';
  for (let i = 0; i < 32; i++) out += PSK_ALPHABET[randomInt(PSK_ALPHABET.length)];
  return out;
}

function specOf(
  account: string,
  kind: Kind,
  t: StoredGre | StoredIpsec,
  probeIntervalMs: number | undefined,
): ProbeSpec | undefined {
  if (!t.health_check.enabled) return undefined;
  return {
    account,
    kind,
    id: t.id,
    name: t.name,
    target: effectiveTarget(t),
    intervalMs: probeIntervalMs ?? RATE_INTERVAL_MS[t.health_check.rate],
  };
}

/** Every tunnel with its health check on, for the prober at start-up. */
export async function loadProbeSpecs(
  db: Executor,
  probeIntervalMs: number | undefined,
): Promise<ProbeSpec[]> {
  const out: ProbeSpec[] = [];
  const add = (account: string, kind: Kind, t: StoredGre | StoredIpsec) => {
    const spec = specOf(account, kind, t, probeIntervalMs);
    if (spec) out.push(spec);
  };
  for (const d of await greTunnels.all(db, null)) add(d.scopeId, 'gre', d.body);
  for (const d of await ipsecTunnels.all(db, null)) add(d.scopeId, 'ipsec', d.body);
  return out;
}

