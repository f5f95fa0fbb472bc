/**
 * The decision the edge (and proxied TCP/UDP applications) asks for every connection: which IP
 * access rule, if any, applies to a client. Precedence: the more specific target wins — a single
 * address, then ranges from the longest prefix down, then the ASN, then the country — and at
 * the same specificity a zone rule beats its account's rule. Each owner's rules are compiled into
 * hash maps (one per prefix length), cached in memory and dropped after every committed write
 * in this process, so a decision costs a few map lookups.
 */
import type { EventBus } from '../../core/events.ts';
import type { Database } from '../../core/storage/db.ts';
import { accessRules, type Mode } from './store.ts';
import { mask, networkOf, parseAddress, type Target } from './targets.ts';

export interface AccessDecision {
  mode: Mode;
  ruleId: string;
  /** Whether the rule is the zone's own or its account's. */
  scope: 'zone' | 'account';
  target: Target;
}

export interface AccessClient {
  ip: string;
  asn?: number;
  /** ISO 3166-1 alpha-2 (any case), `T1` or `XX`. */
  country?: string;
}

export interface AccessRuleService {
  /** The rule that applies to the client in the zone, or undefined when none matches. */
  decide(zoneId: string, accountId: string, client: AccessClient): Promise<AccessDecision | undefined>;
}

export interface AccessRuleServiceInternal extends AccessRuleService {
  invalidate(ownerId: string): void;
}

interface Hit {
  id: string;
  mode: Mode;
  target: Target;
}

interface CompiledRules {
  /** Per family, prefix length → network → rule; exact addresses are the full-width prefix. */
  nets: { 4: Map<number, Map<bigint, Hit>>; 6: Map<number, Map<bigint, Hit>> };
  asn: Map<number, Hit>;
  country: Map<string, Hit>;
}

const EMPTY: CompiledRules = { nets: { 4: new Map(), 6: new Map() }, asn: new Map(), country: new Map() };

export function createAccessRuleService(database: Database, events: EventBus): AccessRuleServiceInternal {
  const cache = new Map<string, Promise<CompiledRules>>();

  async function compile(ownerId: string): Promise<CompiledRules> {
    const docs = await accessRules.all(database.db, ownerId);
    if (docs.length === 0) return EMPTY;
    const out: CompiledRules = { nets: { 4: new Map(), 6: new Map() }, asn: new Map(), country: new Map() };
    for (const { body } of docs) {
      if (body.paused) continue;
      const hit: Hit = { id: body.id, mode: body.mode, target: body.configuration.target };
      const { target, value } = body.configuration;
      if (target === 'asn') out.asn.set(Number(value.slice(2)), hit);
      else if (target === 'country') out.country.set(value, hit);
      else {
        const net = networkOf(target, value);
        if (!net) continue;
        let byPrefix = out.nets[net.family].get(net.prefix);
        if (!byPrefix) out.nets[net.family].set(net.prefix, (byPrefix = new Map()));
        byPrefix.set(net.bits, hit);
      }
    }
    return out;
  }

  function rulesOf(ownerId: string): Promise<CompiledRules> {
    const hit = cache.get(ownerId);
    if (hit) return hit;
    const load = compile(ownerId);
    cache.set(ownerId, load);
    load.catch(() => {
      if (cache.get(ownerId) === load) cache.delete(ownerId);
    });
    return load;
  }

  const invalidate = (ownerId: string) => {
    cache.delete(ownerId);
  };
  events.subscribe('zone.deleted', (payload) => {
    const id = (payload as { id?: string } | undefined)?.id;
    if (id) invalidate(id);
  });

  return {
    async decide(zoneId, accountId, client) {
      const [zone, account] = await Promise.all([rulesOf(zoneId), rulesOf(accountId)]);
      const decision = (hit: Hit | undefined, scope: 'zone' | 'account'): AccessDecision | undefined =>
        hit ? { mode: hit.mode, ruleId: hit.id, scope, target: hit.target } : undefined;
      const addr = parseAddress(client.ip);
      if (addr) {
        const zoneNets = zone.nets[addr.family];
        const accountNets = account.nets[addr.family];
        const prefixes = [...new Set([...zoneNets.keys(), ...accountNets.keys()])].sort((a, b) => b - a);
        for (const prefix of prefixes) {
          const net = mask(addr.bits, addr.family, prefix);
          const found = decision(zoneNets.get(prefix)?.get(net), 'zone') ?? decision(accountNets.get(prefix)?.get(net), 'account');
          if (found) return found;
        }
      }
      if (client.asn !== undefined) {
        const found = decision(zone.asn.get(client.asn), 'zone') ?? decision(account.asn.get(client.asn), 'account');
        if (found) return found;
      }
      if (client.country) {
        const code = client.country.toUpperCase();
        return decision(zone.country.get(code), 'zone') ?? decision(account.country.get(code), 'account');
      }
      return undefined;
    },
    invalidate,
  };
}
