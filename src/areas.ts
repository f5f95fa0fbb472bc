/** The area registry: one line per product area, mounted in this order. */
import type { Area } from './core/area.ts';
import accounts from './areas/accounts/index.ts';
import zones from './areas/zones/index.ts';
import dns from './areas/dns/index.ts';
import rulesets from './areas/rulesets/index.ts';
import accessRules from './areas/access-rules/index.ts';
import calls from './areas/calls/index.ts';
import edge from './edge/index.ts';
import runtime from './runtime/area.ts';
import snippets from './areas/snippets/index.ts';
import spectrum from './areas/spectrum/index.ts';
import tunnels from './areas/tunnels/index.ts';
import interconnects from './areas/interconnects/index.ts';
import smartRouting from './areas/smart-routing/index.ts';
import kv from './areas/kv/index.ts';
import workers from './areas/workers/index.ts';
import workflows from './areas/workflows/index.ts';
import analytics from './areas/analytics/index.ts';
import images from './areas/images/index.ts';
import browserRendering from './areas/browser-rendering/index.ts';
import apiGateway from './areas/api-gateway/index.ts';
import pipelines from './areas/pipelines/index.ts';
import realtimeKit from './areas/realtime-kit/index.ts';
import ddos from './areas/ddos/index.ts';
import alerting from './areas/alerting/index.ts';

export const AREAS: Area[] = [
  accounts,
  zones,
  dns,
  rulesets,
  accessRules,
  edge,
  runtime,
  snippets,
  spectrum,
  tunnels,
  calls,
  interconnects,
  smartRouting,
  kv,
  workers,
  workflows,
  analytics,
  images,
  browserRendering,
  apiGateway,
  pipelines,
  realtimeKit,
  ddos,
  alerting,
];
