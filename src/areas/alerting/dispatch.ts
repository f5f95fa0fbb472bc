/**
 * From DDoS attack events to alerts: at an attack's start and end, every enabled policy of the
 * account whose `alert_type` covers the attack's layer and whose filters all match gets one
 * delivery per mechanism target, with the platform's webhook body
 * (`{name, text, data, ts, account_id, policy_id, policy_name, alert_type, alert_correlation_id,
 * alert_event}`, `data` as the platform's DDoS alert fields).
 * Filters: `zones`, `target_hostname`, `target_zone_name`, `protocol`, `target_ip` (addresses and
 * CIDRs) must contain the attack's value; `requests_per_second` / `packets_per_second` /
 * `megabits_per_second` are minimum peak rates (the smallest listed value counts).
 * A policy with a silence in force (silences.ts) still gets its deliveries written, with status
 * `silenced` and the silence's id: they show in the history and are never sent.
 */
import { BlockList, isIP } from 'node:net';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import type { Clock } from '../../core/clock.ts';
import { hexId } from '../../core/ids.ts';
import type { Database } from '../../core/storage/db.ts';
import type { AttackEvent, AttackRecord } from '../ddos/index.ts';
import { DDOS_ALERT_TYPES, type Filters, type Policy } from './schemas.ts';
import { silenceInForce } from './silences.ts';
import { deliveries, policies, silences, type Delivery } from './store.ts';

function matchesIp(list: string[], ip: string | undefined): boolean {
  if (!ip || !isIP(ip)) return false;
  const fam = isIP(ip) === 4 ? 'ipv4' : 'ipv6';
  const bl = new BlockList();
  for (const entry of list) {
    const [addr, bits] = entry.split('/');
    const f = isIP(addr) === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) bl.addAddress(addr, f);
    else bl.addSubnet(addr, Number(bits), f);
  }
  return bl.check(ip, fam);
}

export function filtersMatch(f: Filters, a: AttackRecord): boolean {
  const has = (k: string) => f[k] !== undefined && f[k].length > 0;
  const min = (k: string) => Math.min(...f[k].map(Number));
  if (has('zones') && !f.zones.includes(a.zone_id)) return false;
  if (has('target_hostname') && !f.target_hostname.map((h) => h.toLowerCase()).includes(a.target_hostname)) return false;
  if (has('target_zone_name') && !f.target_zone_name.includes(a.zone_name)) return false;
  if (has('protocol') && !f.protocol.map((p) => p.toUpperCase()).includes((a.protocol ?? 'HTTP').toUpperCase())) return false;
  if (has('target_ip') && !matchesIp(f.target_ip, a.target_ip)) return false;
  if (has('requests_per_second') && (a.layer !== 'l7' || a.peak_rate < min('requests_per_second'))) return false;
  if (has('packets_per_second') && (a.layer !== 'l4' || a.peak_rate < min('packets_per_second'))) return false;
  if (has('megabits_per_second') && (a.peak_mbps ?? 0) < min('megabits_per_second')) return false;
  return true;
}

function alertData(a: AttackRecord, accountId: string, accountName: string): Record<string, string> {
  const data: Record<string, string> = {
    account_name: accountName,
    account_tag: accountId,
    action: a.action,
    attack_id: a.id,
    attack_type: a.attack_type,
    dashboard_link: `/accounts/${accountId}/ddos/attacks/${a.id}`,
    max_rate: String(a.peak_rate),
    mitigation: a.action === 'log' ? 'Not mitigated (log)' : `Mitigated (${a.action})`,
    rule_description: a.rule_description,
    rule_id: a.rule_id,
    rule_link: `/accounts/${accountId}/rulesets/${a.ruleset_id}`,
    ruleset_id: a.ruleset_id,
    ruleset_override_id: a.ruleset_override_id ?? '',
    start_time: a.start_time,
    target_hostname: a.target_hostname,
    zone_name: a.zone_name,
    zone_tag: a.zone_id,
  };
  if (a.layer === 'l7') data.requests_per_second = String(a.peak_rate);
  else {
    Object.assign(data, {
      attack_vector: a.attack_type,
      megabits_per_second: String(a.peak_mbps ?? 0),
      packets_per_second: String(a.peak_rate),
      protocol: a.protocol ?? '',
      rule_name: a.rule_description,
      target_ip: a.target_ip ?? '',
      target_port: String(a.target_port ?? ''),
    });
  }
  if (a.end_time) data.end_time = a.end_time;
  return data;
}

function alertText(a: AttackRecord, state: 'start' | 'end'): string {
  const what = a.layer === 'l7' ? `HTTP DDoS attack on ${a.target_hostname}` : `L3/4 DDoS attack (${a.attack_type}) on ${a.target_hostname} ${a.protocol}/${a.target_port}`;
  const rate = `${a.peak_rate} ${a.layer === 'l7' ? 'requests' : a.protocol === 'TCP' ? 'connections' : 'packets'} per second`;
  return state === 'start'
    ? `${what} detected: ${rate}, rule "${a.rule_description}", action ${a.action}.`
    : `${what} ended: peak ${rate}, ${a.mitigated} mitigated, ${a.logged} logged.`;
}

/** Writes the deliveries of one attack event; answers how many are to be sent (silenced ones not counted). */
export async function dispatchAttack(database: Database, clock: Clock, e: AttackEvent): Promise<number> {
  const a = e.attack;
  const types = DDOS_ALERT_TYPES[a.layer];
  const { items } = await policies.list(database.db, e.accountId, { filters: [{ field: 'alert_type', op: 'in', value: types }] });
  const matching: Policy[] = items.map((d) => d.body).filter((p) => p.enabled && filtersMatch(p.filters, a));
  if (matching.length === 0) return 0;
  const account = await accounts.get(database.db, GLOBAL_SCOPE, e.accountId);
  const accountName = (account?.body as { name?: string } | undefined)?.name ?? '';
  const now = clock.now();
  const data = alertData(a, e.accountId, accountName);
  const text = alertText(a, e.state);
  return writeDeliveries(database, e.accountId, matching, now, (p) => ({
    name: p.name,
    text,
    data,
    ts: Math.floor(now.getTime() / 1000),
    account_id: e.accountId,
    policy_id: p.id,
    policy_name: p.name,
    alert_type: p.alert_type,
    alert_correlation_id: a.id,
    alert_event: e.state === 'start' ? 'ALERT_STATE_EVENT_START' : 'ALERT_STATE_EVENT_END',
  }));
}

/**
 * Writes one delivery per mechanism target of each policy, with the body `bodyOf` gives for it;
 * answers how many are to be sent (silenced ones are written but not counted).
 */
export async function writeDeliveries(
  database: Database,
  accountId: string,
  matching: Policy[],
  now: Date,
  bodyOf: (p: Policy) => Record<string, unknown>,
): Promise<number> {
  const silenceList = (await silences.list(database.db, accountId, { filters: [{ field: 'policy_id', op: 'in', value: matching.map((p) => p.id) }] })).items.map((d) => d.body);
  let n = 0;
  for (const p of matching) {
    const silence = silenceInForce(silenceList, p.id, now);
    const body = bodyOf(p);
    const targets: [Delivery['mechanism_type'], string][] = [
      ...(p.mechanisms.webhooks ?? []).map((m): [Delivery['mechanism_type'], string] => ['webhook', m.id]),
      ...(p.mechanisms.email ?? []).map((m): [Delivery['mechanism_type'], string] => ['email', m.id]),
      ...(p.mechanisms.pagerduty ?? []).map((m): [Delivery['mechanism_type'], string] => ['pagerduty', m.id]),
    ];
    for (const [type, target] of targets) {
      const id = hexId();
      const d: Delivery = {
        id,
        name: p.name,
        description: p.description,
        policy_id: p.id,
        alert_type: p.alert_type,
        alert_body: JSON.stringify(body),
        mechanism: target,
        mechanism_type: type,
        sent: now.toISOString(),
        status: silence ? 'silenced' : 'pending',
        attempts: 0,
        next_attempt_at: now.toISOString(),
      };
      if (silence) d.silence_id = silence.id;
      await deliveries.insert(database.db, accountId, id, d, now);
      if (!silence) n++;
    }
  }
  return n;
}
