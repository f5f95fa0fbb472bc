/**
 * CNI objects: the BGP peering configuration of one VLAN on an interconnect. Both body forms map
 * onto one record: the spec's `{cust_ip, edge_ip, bgp_asn, bgp_password, vlan}` and the official
 * client's `{interconnect, magic, bgp: {customer_asn, extra_prefixes, md5_key}, p2p_ip}`.
 *
 * Rules: `cust_ip` and `edge_ip` are the two distinct addresses of one /31, not used by another
 * CNI of the account (both absent: a free /31 is assigned from 100.64.0.0/16); the ASN is a usable
 * public or private one (absent: the account's `default_asn`); the VLAN is 1–4094 and unique on
 * its interconnect (absent: the lowest free from 2); `magic.conduit_name` is unique in the
 * account. PUT keeps the stored value of every field it does not send.
 */
import type { AreaContext } from '../../core/area.ts';
import { ApiError, apiError, CODES, type ErrorItem } from '../../core/errors.ts';
import { uuid } from '../../core/ids.ts';
import type { Doc } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';
import {
  asnProblem,
  formatIpv4,
  pairOf,
  parseCidr,
  parseIpv4,
  unusableReason,
} from './addressing.ts';
import { requireAccount } from '../../core/accounts.ts';
import { bare, CNI_PERMISSIONS, listBody, noBody, windowOf } from './http.ts';
import { CniBody, ListCnisQuery, type StoredCni } from './schemas.ts';
import { cnis, cniView, findInterconnect, PASSWORD_MASK, readSettings } from './store.ts';

const PREFIX = '/accounts/:account_id/cni/cnis';
const tags = ['interconnects'];
const CNI_ID = { cni: 'uuid' } as const;

/** Peering /31s handed out when a create names no addresses. */
const POOL_START = parseIpv4('100.64.0.0')!;
const POOL_PAIRS = 32_768;
const DEFAULT_MTU = 1500;
const FIRST_AUTO_VLAN = 2;

function invalid(message: string): ErrorItem {
  return { code: CODES.cni_invalid.code, message };
}

/** Checks one end of the link; returns its address or pushes the problem. */
function linkEnd(field: string, text: string, problems: ErrorItem[]): number | undefined {
  const cidr = parseCidr(text);
  if (typeof cidr === 'string') {
    problems.push(invalid(`${field}: ${cidr}`));
    return undefined;
  }
  if (cidr.prefix !== 31) {
    problems.push(
      invalid(`${field}: must be a /31 (the two ends of the peering link), got /${cidr.prefix}`),
    );
    return undefined;
  }
  const reason = unusableReason(cidr.address);
  if (reason) {
    problems.push(invalid(`${field}: ${formatIpv4(cidr.address)} ${reason}`));
    return undefined;
  }
  return cidr.address;
}

function prefixProblem(text: string): string | undefined {
  const cidr = parseCidr(text);
  if (typeof cidr === 'string') return cidr;
  const hostBits = cidr.prefix === 32 ? 0 : 2 ** (32 - cidr.prefix) - 1;
  if (cidr.address % (hostBits + 1) !== 0) return `${text} has host bits set`;
  return undefined;
}

/** The record a create or update would store, after every check (400 then 409). */
async function resolve(
  tx: Executor,
  accountId: string,
  body: CniBody,
  existing: StoredCni | undefined,
  now: Date,
): Promise<StoredCni> {
  const problems: ErrorItem[] = [];
  if (body.account !== undefined && body.account !== accountId) {
    problems.push(
      invalid(
        `account: must be the account in the path (${accountId}), got ${JSON.stringify(body.account)}`,
      ),
    );
  }
  if (existing && body.id !== undefined && body.id !== existing.id) {
    problems.push(invalid(`id: ${body.id} does not match the CNI in the path (${existing.id})`));
  }

  const icRef = body.interconnect ?? existing?.interconnect_id;
  const ic = icRef === undefined ? undefined : await findInterconnect(tx, accountId, icRef);
  if (icRef === undefined)
    problems.push(
      invalid('interconnect: required (the name or id of the interconnect the session runs over)'),
    );
  else if (!ic) problems.push(invalid(`interconnect: no interconnect ${icRef} in this account`));

  if (body.edge_ip !== undefined && body.p2p_ip !== undefined && body.edge_ip !== body.p2p_ip) {
    problems.push(
      invalid('edge_ip, p2p_ip: two names of the same address, given different values'),
    );
  }
  const edgeText = body.edge_ip ?? body.p2p_ip ?? existing?.edge_ip;
  const custText = body.cust_ip ?? existing?.cust_ip;
  let pair: { edge: number; cust: number } | undefined;
  if ((edgeText === undefined) !== (custText === undefined)) {
    problems.push(
      invalid(
        'cust_ip, edge_ip: give both addresses of the /31, or neither to have a /31 assigned',
      ),
    );
  } else if (edgeText !== undefined && custText !== undefined) {
    const edge = linkEnd('edge_ip', edgeText, problems);
    const cust = linkEnd('cust_ip', custText, problems);
    if (edge !== undefined && cust !== undefined) {
      if (edge === cust)
        problems.push(
          invalid(
            `cust_ip, edge_ip: the two ends must be different addresses, both are ${formatIpv4(edge)}`,
          ),
        );
      else if (pairOf(edge) !== pairOf(cust)) {
        problems.push(
          invalid(
            `cust_ip, edge_ip: ${formatIpv4(cust)} and ${formatIpv4(edge)} are not in the same /31`,
          ),
        );
      } else pair = { edge, cust };
    }
  }

  if (
    body.bgp_asn !== undefined &&
    body.bgp?.customer_asn !== undefined &&
    body.bgp_asn !== body.bgp.customer_asn
  ) {
    problems.push(
      invalid('bgp_asn, bgp.customer_asn: two names of the same ASN, given different values'),
    );
  }
  const asn =
    body.bgp_asn ??
    body.bgp?.customer_asn ??
    existing?.bgp_asn ??
    (await readSettings(tx, accountId)).default_asn;
  const asnIssue = asnProblem(asn);
  if (asnIssue) problems.push(invalid(`bgp_asn: ${asnIssue}`));

  const pw1 = body.bgp_password;
  const pw2 = body.bgp?.md5_key;
  if (pw1 !== undefined && pw2 !== undefined && pw1 !== pw2) {
    problems.push(
      invalid('bgp_password, bgp.md5_key: two names of the same password, given different values'),
    );
  }
  let password = pw1 !== undefined ? pw1 : pw2;
  // The mask read back from a GET means "unchanged".
  if (password === PASSWORD_MASK) password = existing ? existing.bgp_password : undefined;
  if (password === undefined) password = existing?.bgp_password ?? null;
  if (password === '') password = null;
  if (password !== null && !/^[\x20-\x7e]{1,80}$/.test(password)) {
    problems.push(invalid('bgp_password: 1 to 80 printable ASCII characters (a TCP MD5 key)'));
  }

  const prefixes = body.bgp?.extra_prefixes ?? existing?.extra_prefixes ?? [];
  prefixes.forEach((p, i) => {
    const issue = prefixProblem(p);
    if (issue) problems.push(invalid(`bgp.extra_prefixes.${i}: ${issue}`));
  });

  if (problems.length > 0 || !ic) throw new ApiError(400, problems);

  // Conflicts with the account's other CNI objects.
  const others = (await cnis.all(tx, accountId))
    .map((d) => d.body)
    .filter((c) => c.id !== existing?.id);
  if (pair) {
    const clash = others.find(
      (c) => pairOf(parseIpv4(c.edge_ip.split('/')[0])!) === pairOf(pair!.edge),
    );
    if (clash) {
      throw apiError(
        'cni_conflict',
        `cust_ip, edge_ip: ${formatIpv4(pairOf(pair.edge) * 2)}/31 is already used by CNI ${clash.id}`,
      );
    }
  } else {
    const used = new Set(others.map((c) => pairOf(parseIpv4(c.edge_ip.split('/')[0])!)));
    const base = pairOf(POOL_START);
    let k = 0;
    while (k < POOL_PAIRS && used.has(base + k)) k++;
    if (k === POOL_PAIRS)
      throw apiError(
        'cni_conflict',
        'cust_ip, edge_ip: no free /31 left in 100.64.0.0/16; give the addresses',
      );
    pair = { edge: (base + k) * 2, cust: (base + k) * 2 + 1 };
  }

  const onSameLink = others.filter((c) => c.interconnect_id === ic.id);
  let vlan = body.vlan ?? existing?.vlan;
  if (vlan !== undefined) {
    const clash = onSameLink.find((c) => c.vlan === vlan);
    if (clash)
      throw apiError(
        'cni_conflict',
        `vlan: VLAN ${vlan} is already used on interconnect ${ic.body.name} by CNI ${clash.id}`,
      );
  } else {
    const taken = new Set(onSameLink.map((c) => c.vlan));
    let v = FIRST_AUTO_VLAN;
    while (v <= 4094 && taken.has(v)) v++;
    if (v > 4094)
      throw apiError('cni_conflict', `vlan: no free VLAN left on interconnect ${ic.body.name}`);
    vlan = v;
  }

  const names = new Set(others.map((c) => c.magic.conduit_name));
  let conduit = body.magic?.conduit_name ?? existing?.magic.conduit_name;
  if (conduit !== undefined) {
    if (names.has(conduit))
      throw apiError(
        'cni_conflict',
        `magic.conduit_name: ${conduit} is already used in this account`,
      );
  } else {
    conduit = `${ic.body.name}-v${vlan}`.slice(0, 64);
    for (let n = 2; names.has(conduit); n++) conduit = `${ic.body.name}-v${vlan}-${n}`.slice(-64);
  }

  const ts = now.toISOString();
  return {
    id: existing?.id ?? uuid(),
    account: accountId,
    interconnect: ic.body.name,
    interconnect_id: ic.id,
    slot_id: ic.body.slot_id,
    cust_ip: `${formatIpv4(pair.cust)}/31`,
    edge_ip: `${formatIpv4(pair.edge)}/31`,
    bgp_asn: asn,
    bgp_password: password,
    vlan,
    magic: {
      conduit_name: conduit,
      description: body.magic?.description ?? existing?.magic.description ?? '',
      mtu: body.magic?.mtu ?? existing?.magic.mtu ?? DEFAULT_MTU,
    },
    extra_prefixes: prefixes,
    ...((body.bgp_mode ?? existing?.bgp_mode)
      ? { bgp_mode: body.bgp_mode ?? existing?.bgp_mode }
      : {}),
    created_on: existing?.created_on ?? ts,
    modified_on: ts,
  };
}

async function getCni(db: Executor, accountId: string, id: string): Promise<Doc<StoredCni>> {
  const doc = await cnis.get(db, accountId, id);
  if (!doc) throw apiError('cni_not_found', id);
  return doc;
}

export function mountCniRoutes(ctx: AreaContext): void {
  const { router, database, clock } = ctx;
  const db = database.db;
  const write = <T>(accountId: string, fn: (tx: Executor) => Promise<T>) =>
    db.transaction().execute(async (tx) => {
      await lockScope(tx, database.dialect, `cni:${accountId}`);
      return fn(tx);
    });

  router.add(
    {
      method: 'GET',
      path: PREFIX,
      operationId: 'list_cnis',
      summary: 'List CNI objects',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      query: ListCnisQuery,
      tags,
    },
    async ({ params, query }) => {
      await requireAccount(db, params.account_id);
      let all = (await cnis.all(db, params.account_id)).map((d) => d.body);
      if (query.slot !== undefined) all = all.filter((c) => c.slot_id === query.slot);
      // CNI objects here are never attached to a tunnel, so a tunnel filter matches nothing.
      if (query.tunnel_id !== undefined) all = [];
      return listBody(all.map(cniView), windowOf(query));
    },
  );

  router.add(
    {
      method: 'POST',
      path: PREFIX,
      operationId: 'create_cni',
      summary: 'Create a CNI object',
      auth: { permission: CNI_PERMISSIONS, level: 'edit' },
      body: CniBody,
      tags,
    },
    async ({ params, body }) => {
      const accountId = params.account_id;
      await requireAccount(db, accountId);
      const record = await write(accountId, async (tx) => {
        const rec = await resolve(tx, accountId, body, undefined, clock.now());
        await cnis.insert(tx, accountId, rec.id, rec, clock.now());
        return rec;
      });
      return bare(cniView(record));
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/:cni`,
      operationId: 'get_cni',
      summary: 'Get a CNI object',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      params: CNI_ID,
      tags,
    },
    async ({ params }) => {
      await requireAccount(db, params.account_id);
      return bare(cniView((await getCni(db, params.account_id, params.cni)).body));
    },
  );

  router.add(
    {
      method: 'PUT',
      path: `${PREFIX}/:cni`,
      operationId: 'update_cni',
      summary: 'Update a CNI object',
      auth: { permission: CNI_PERMISSIONS, level: 'edit' },
      params: CNI_ID,
      body: CniBody,
      tags,
    },
    async ({ params, body }) => {
      const accountId = params.account_id;
      await requireAccount(db, accountId);
      const record = await write(accountId, async (tx) => {
        const doc = await getCni(tx, accountId, params.cni);
        const rec = await resolve(tx, accountId, body, doc.body, clock.now());
        return (await cnis.update(tx, doc, rec, clock.now())).body;
      });
      return bare(cniView(record));
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${PREFIX}/:cni`,
      operationId: 'delete_cni',
      summary: 'Delete a CNI object',
      auth: { permission: CNI_PERMISSIONS, level: 'edit' },
      params: CNI_ID,
      tags,
    },
    async ({ params }) => {
      const accountId = params.account_id;
      await requireAccount(db, accountId);
      await write(accountId, async (tx) => {
        if (!(await cnis.delete(tx, accountId, params.cni)))
          throw apiError('cni_not_found', params.cni);
      });
      return noBody();
    },
  );
}
