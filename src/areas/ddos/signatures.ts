/**
 * What each rule of the managed DDoS rulesets detects, and its thresholds. A rule watches one
 * stream (HTTP requests to a host, datagrams or connections to a proxied application), counted
 * per target and per source in rate windows. It fires when
 *   - one source's rate reaches `max(sourceFloor, 10 × baseline) × sensitivity factor`, or
 *   - the target's rate reaches `max(targetFloor, 10 × baseline) × sensitivity factor`,
 * where `baseline` is the target's learned rate (an exponential average of the windows without an
 * attack). Floors are per second and scaled by `--ddos-threshold-percent`.
 * Sensitivity factors: `default` (high) ×1, `medium` ×2, `low` ×4, `eoff` never fires.
 */
import { DDOS_L4_ID, DDOS_L7_ID, managedRuleId } from '../rulesets/index.ts';

export type Sensitivity = 'default' | 'medium' | 'low' | 'eoff';

export const SENSITIVITY_FACTOR: Record<Sensitivity, number> = {
  default: 1,
  medium: 2,
  low: 4,
  eoff: Number.POSITIVE_INFINITY,
};

/** How far above its learned baseline a rate must be to count as an attack. */
export const BASELINE_MULTIPLIER = 10;

export type Stream = 'http' | 'http-no-ua' | 'http-malformed' | 'udp' | 'udp-amplification' | 'tcp-connect';

export interface Signature {
  rulesetId: string;
  ruleId: string;
  layer: 'l7' | 'l4';
  category: string;
  description: string;
  /** The action when no override changes it (`ddos_dynamic`: block). */
  defaultAction: string;
  stream: Stream;
  /** Per-source rate floor (per second); Infinity: this rule does not look at single sources. */
  sourceFloor: number;
  /** Per-target rate floor (per second); Infinity: this rule does not look at the target's total. */
  targetFloor: number;
  /** The attack type named in events and alerts. */
  attackType: string;
  /**
   * The stream itself is the attack's fingerprint (datagrams from reflection source ports): while
   * an attack runs, every source of the stream to the target is mitigated, not only the sources
   * over a threshold or their fair share — reflectors are many and each may send little.
   */
  fingerprint?: true;
}

const inf = Number.POSITIVE_INFINITY;

export const SIGNATURES: readonly Signature[] = [
  {
    rulesetId: DDOS_L7_ID,
    ruleId: managedRuleId('l7', 1),
    layer: 'l7',
    category: 'http-flood',
    description: 'HTTP flood against one host from many sources (host request rate far above its learned baseline)',
    defaultAction: 'ddos_dynamic',
    stream: 'http',
    sourceFloor: inf,
    targetFloor: 1000,
    attackType: 'HTTP flood (many sources)',
  },
  {
    rulesetId: DDOS_L7_ID,
    ruleId: managedRuleId('l7', 2),
    layer: 'l7',
    category: 'http-flood',
    description: 'High request rate from a single client to a single host',
    defaultAction: 'ddos_dynamic',
    stream: 'http',
    sourceFloor: 500,
    targetFloor: inf,
    attackType: 'HTTP flood (single source)',
  },
  {
    rulesetId: DDOS_L7_ID,
    ruleId: managedRuleId('l7', 3),
    layer: 'l7',
    category: 'http-anomaly',
    description: 'Flood of HTTP requests without a User-Agent header',
    defaultAction: 'block',
    stream: 'http-no-ua',
    sourceFloor: 200,
    targetFloor: 500,
    attackType: 'HTTP anomaly (no User-Agent)',
  },
  {
    rulesetId: DDOS_L7_ID,
    ruleId: managedRuleId('l7', 4),
    layer: 'l7',
    category: 'http-anomaly',
    description:
      'Flood of HTTP requests with malformed or contradictory protocol fields (Content-Length with Transfer-Encoding, a body on GET or HEAD)',
    defaultAction: 'block',
    stream: 'http-malformed',
    sourceFloor: 50,
    targetFloor: 200,
    attackType: 'HTTP anomaly (malformed requests)',
  },
  {
    rulesetId: DDOS_L4_ID,
    ruleId: managedRuleId('l4', 1),
    layer: 'l4',
    category: 'udp-flood',
    description: 'Generic high-volume UDP traffic flows',
    defaultAction: 'ddos_dynamic',
    stream: 'udp',
    sourceFloor: 2000,
    targetFloor: 10_000,
    attackType: 'UDP flood',
  },
  {
    rulesetId: DDOS_L4_ID,
    ruleId: managedRuleId('l4', 2),
    layer: 'l4',
    category: 'udp-flood',
    description: 'UDP reflection from well-known amplification ports (DNS, NTP, SSDP, Memcached)',
    defaultAction: 'block',
    stream: 'udp-amplification',
    sourceFloor: 200,
    targetFloor: 2000,
    attackType: 'UDP reflection',
    fingerprint: true,
  },
  {
    rulesetId: DDOS_L4_ID,
    ruleId: managedRuleId('l4', 3),
    layer: 'l4',
    category: 'syn-flood',
    description: 'Generic high-volume SYN traffic flows (TCP connection rate per application and source)',
    defaultAction: 'ddos_dynamic',
    stream: 'tcp-connect',
    sourceFloor: 200,
    targetFloor: 1000,
    attackType: 'SYN flood',
  },
];

/** Source ports of the usual reflection vectors: DNS, NTP, SSDP, Memcached, CLDAP, chargen. */
export const AMPLIFICATION_PORTS = new Set([53, 123, 1900, 11211, 389, 19]);

export function signaturesOf(layer: 'l7' | 'l4'): Signature[] {
  return SIGNATURES.filter((s) => s.layer === layer);
}
