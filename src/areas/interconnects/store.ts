/**
 * State of the interconnect area: interconnects and CNI objects scoped by account, settings per
 * account, and one claim document per occupied slot. Slots are physical ports shared by every
 * account, so their claims live in one global scope keyed by slot id: the primary key makes a slot
 * impossible to occupy twice, even when two accounts race for it.
 *
 * Status is computed from timestamps and the operator's link state, never from timers: an
 * interconnect is `pending` until `active_on`, then `active`, unless its link was set down or
 * unhealthy.
 */
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import { apiError } from '../../core/errors.ts';
import { UUID } from '../../core/ids.ts';
import type {
  CniSettings,
  HealthStatus,
  InterconnectStatus,
  StoredCni,
  StoredInterconnect,
} from './schemas.ts';

export const interconnects = defineCollection<
  StoredInterconnect,
  'name' | 'slot_id' | 'site' | 'type'
>({
  kind: 'cni_interconnect',
  indexes: {
    name: (i) => i.name,
    slot_id: (i) => i.slot_id,
    site: (i) => i.site,
    type: (i) => i.type,
  },
});

export interface SlotClaim {
  slot_id: string;
  account: string;
  interconnect_id: string;
}

/** Slot claims share one scope: slots are not per account. */
export const SLOT_SCOPE = '';
export const slotClaims = defineCollection<SlotClaim>({ kind: 'cni_slot_claim' });

export const cnis = defineCollection<StoredCni, 'interconnect_id' | 'slot_id' | 'conduit_name'>({
  kind: 'cni_object',
  indexes: {
    interconnect_id: (c) => c.interconnect_id,
    slot_id: (c) => c.slot_id,
    conduit_name: (c) => c.magic.conduit_name,
  },
});

export const cniSettings = defineCollection<CniSettings>({ kind: 'cni_settings' });
export const SETTINGS_ID = 'settings';
/** A private ASN, used until the account sets its own default. */
export const DEFAULT_ASN = 65000;

export async function readSettings(db: Executor, accountId: string): Promise<CniSettings> {
  const doc = await cniSettings.get(db, accountId, SETTINGS_ID);
  return doc?.body ?? { default_asn: DEFAULT_ASN };
}

/** Finds an interconnect by name (the platform's `{icon}`) or by id. */
export async function findInterconnect(
  db: Executor,
  accountId: string,
  icon: string,
): Promise<Doc<StoredInterconnect> | undefined> {
  const { items } = await interconnects.list(db, accountId, {
    filters: [{ field: 'name', op: 'eq', value: icon }],
  });
  if (items[0]) return items[0];
  if (UUID.test(icon)) return interconnects.get(db, accountId, icon);
  return undefined;
}

export async function getInterconnect(
  db: Executor,
  accountId: string,
  icon: string,
): Promise<Doc<StoredInterconnect>> {
  const doc = await findInterconnect(db, accountId, icon);
  if (!doc) throw apiError('cni_interconnect_not_found', icon);
  return doc;
}

/** Occupied slot ids, with the account occupying each. */
export async function occupiedSlots(db: Executor): Promise<Map<string, string>> {
  const claims = await slotClaims.all(db, SLOT_SCOPE);
  return new Map(claims.map((d) => [d.id, d.body.account]));
}

export function lifecycleStatus(ic: StoredInterconnect, now: Date): InterconnectStatus {
  if (ic.link.state === 'down') return 'down';
  if (ic.link.state === 'unhealthy') return 'unhealthy';
  if (now.getTime() < Date.parse(ic.active_on)) return 'pending';
  return 'active';
}

export function healthStatus(ic: StoredInterconnect, now: Date): HealthStatus {
  const s = lifecycleStatus(ic, now);
  return s === 'active' ? 'healthy' : s;
}

/** The interconnect as answered: the spec's fields, then the official client's extra keys. */
export function interconnectView(ic: StoredInterconnect, now: Date) {
  return {
    id: ic.id,
    account: ic.account,
    name: ic.name,
    type: ic.type,
    slot_id: ic.slot_id,
    facility: ic.facility,
    speed: ic.speed,
    description: ic.description,
    status: lifecycleStatus(ic, now),
    site: ic.site,
    ccr_device_name: ic.ccr_device_name,
    virtual_port_reservation_id: ic.virtual_port_reservation_id,
    created_on: ic.created_on,
  };
}

/** The status answer: spec value in `status`, the official form in `state` (+ `reason`). */
export function statusView(ic: StoredInterconnect, now: Date) {
  const status = healthStatus(ic, now);
  const state = (status[0].toUpperCase() + status.slice(1)) as
    'Pending' | 'Healthy' | 'Down' | 'Unhealthy';
  if (status === 'down' || status === 'unhealthy') return { status, state, reason: ic.link.reason };
  return { status, state };
}

/** Shown instead of a stored BGP password. */
export const PASSWORD_MASK = '********';

export function cniView(c: StoredCni) {
  const password = c.bgp_password === null ? null : PASSWORD_MASK;
  return {
    id: c.id,
    account: c.account,
    interconnect: c.interconnect,
    cust_ip: c.cust_ip,
    edge_ip: c.edge_ip,
    p2p_ip: c.edge_ip,
    bgp_asn: c.bgp_asn,
    bgp_password: password,
    vlan: c.vlan,
    magic: c.magic,
    bgp: { customer_asn: c.bgp_asn, extra_prefixes: c.extra_prefixes, md5_key: password },
    ...(c.bgp_mode ? { bgp_mode: c.bgp_mode } : {}),
    created_on: c.created_on,
    modified_on: c.modified_on,
  };
}
