/**
 * @module snippets — spec 001 "Snippet", "Snippet runtime objects", "Snippets" endpoints and
 * limits.
 *
 * API (`/zones/{zone_id}/snippets`): list (per_page 25), get, `GET …/{name}/content` (the stored
 * files as multipart/form-data), `PUT …/{name}` multipart (the spec's JSON `metadata` part +
 * `files` part, or parts named by file name; the official client's `metadata[main_module]` +
 * `files[]`), delete (`result: null`); rules `GET/PUT/DELETE …/snippets/snippet_rules`
 * (`{rules: [{description, enabled, expression, snippet_name}]}` → rules with `id`,
 * `last_updated`). Uploads are checked for name (`a-z0-9_`, ≤ 50), size (32 KB), shape
 * (default export with `fetch`; `addEventListener` and `import` refused with a message saying so),
 * and by starting the script in the runtime (syntax errors with their location); per-zone count
 * `--snippets-per-zone`. Rules: expressions in the rules language, one rule per snippet, names
 * must exist; deleting a snippet a rule uses is refused (409).
 *
 * Run time: the edge phase `http_request_snippets` runs every enabled matching rule's snippet in
 * rule order, each receiving the request as the previous one passed it on (see `engine.ts`);
 * `request.cf`/`request.edge` per `cf.ts`. Errors as the platform: 1201 (`fetch(request)` twice),
 * 1202 (subrequests beyond `--snippet-subrequests`, every `fetch()` counts), 1203 (CPU), 1204
 * (memory); an uncaught exception answers 1101. Unsupported APIs (cache, bindings, WebSocket,
 * HTML rewriting, `addEventListener`) throw an error naming what is missing.
 *
 * Service `snippets` (`SnippetService`): `entrypoint(zoneId)` — the rules as a ruleset of phase
 * `http_request_snippets` (action `execute`, `action_parameters.id` = snippet name), the view the
 * spec's `GET /zones/{zone_id}/rulesets/phases/http_request_snippets/entrypoint` should answer.
 *
 * Aliases: the spec's JSON-metadata upload and the client's bracket form; `request.edge` =
 * `request.cf`; `botManagement.verified_bot`/`static_resource` beside the camel-case names.
 * Permissions: "Snippets Read" / "Snippets Write" (key `zone_snippets`).
 *
 * LIMITATIONS: the spec's entry point path is routed by the rulesets area, which answers for it
 * (no entry point) until it delegates that phase to this service. Error codes of the management
 * API (1100–1107) are Outpost's. A `fetch()` to the request's own host name is the origin fetch
 * (`fetch(request)`) whatever its path; other proxied host names are reached over the network,
 * not through their zone's edge. The origin fetch reaches address origins (origin rules
 * applied), not origins served by origin handlers (tunnels). CPU time is measured per runtime
 * process with a slack (`--runtime-cpu-slack`), memory as the process's growth with a floor
 * (`--runtime-memory-floor`) — a 2 MB limit cannot be measured that finely. An overrun stops
 * every snippet request of that zone in flight at that moment.
 */
import { defineArea } from '../../core/area.ts';
import {
  EDGE,
  OriginFetcher,
  PHASE_ORDER,
  type EdgeRequest,
  type EdgeService,
} from '../../edge/index.ts';
import { ruleContext } from '../../edge/phases/security.ts';
import { compileRule, type CompiledRule } from '../../edge/rules/index.ts';
import { RUNTIME, type ScriptHost } from '../../runtime/index.ts';
import { buildCf, parseCfDefaults } from './cf.ts';
import { SnippetEngine } from './engine.ts';
import { mountSnippetRoutes } from './routes.ts';
import { SnippetStore } from './store.ts';
import { entrypointView, SNIPPETS_PHASE } from './entrypoint.ts';

export const SNIPPETS = 'snippets';
export { SNIPPETS_PHASE, entrypointView } from './entrypoint.ts';

export interface SnippetService {
  /** The zone's snippet rules as the `http_request_snippets` entry point ruleset (undefined: none). */
  entrypoint(zoneId: string): Promise<Record<string, unknown> | undefined>;
}

interface CompiledSnippetRule {
  id: string;
  name: string;
  match: CompiledRule;
}

export default defineArea({
  name: 'snippets',
  mount(ctx) {
    const { config } = ctx;
    const log = ctx.log.child({ area: 'snippets' });
    ctx.permissions.define({ key: 'zone_snippets', name: 'Snippets', scope: 'zone' });
    const host = ctx.services.require<ScriptHost>(RUNTIME);
    const edge = ctx.services.require<EdgeService>(EDGE);
    const cfDefaults = parseCfDefaults(config.snippetCf);
    const store = new SnippetStore(ctx.database, ctx.clock);
    const origin = new OriginFetcher({
      connectTimeoutMs: config.originConnectTimeoutMs,
      responseTimeoutMs: config.originResponseTimeoutMs,
    });
    const subrequests = Math.max(1, config.snippetSubrequests);
    const engine = new SnippetEngine(
      host,
      origin,
      {
        cpuMs: config.snippetCpuMs,
        subrequests,
        memoryMb: config.snippetMemoryMb,
        // Above the origin's own timeouts, so a slow origin answers 522/524 rather than a script failure.
        wallMs: config.originConnectTimeoutMs + config.originResponseTimeoutMs + 5_000,
      },
      log,
      (zoneId, name) => store.get(zoneId, name),
    );

    // Compiled enabled rules per zone, dropped on every change in this process.
    const cache = new Map<string, Promise<CompiledSnippetRule[]>>();
    const compiled = (zoneId: string): Promise<CompiledSnippetRule[]> => {
      let hit = cache.get(zoneId);
      if (!hit) {
        hit = store.rules(zoneId).then((rules) =>
          rules.flatMap((r) => {
            if (!r.enabled) return [];
            try {
              return [{ id: r.id, name: r.snippet_name, match: compileRule(r.expression) }];
            } catch (err) {
              log.warn(
                { err, zone: zoneId, rule: r.id },
                'stored snippet rule does not compile; skipped',
              );
              return [];
            }
          }),
        );
        cache.set(zoneId, hit);
        hit.catch(() => cache.delete(zoneId));
      }
      return hit;
    };
    const changed = (zoneId: string) => cache.delete(zoneId);
    ctx.events.subscribe('zone.deleted', (payload) => {
      const zoneId = (payload as { id: string }).id;
      cache.delete(zoneId);
      void engine.undeployZone(zoneId).catch(() => {});
    });
    edge.addPhase({
      name: SNIPPETS_PHASE,
      order: PHASE_ORDER[SNIPPETS_PHASE],
      async run(er: EdgeRequest) {
        if (!er.res) return 'continue';
        const rules = await compiled(er.route.zoneId);
        if (rules.length === 0) return 'continue';
        const names: string[] = [];
        const rc = ruleContext(er);
        for (const r of rules) {
          if (!r.match(rc)) continue;
          names.push(r.name);
          er.matchedRules.push(r.id);
        }
        if (names.length === 0) return 'continue';
        await engine.run(er, names, buildCf(er, cfDefaults, config.edgeTestHeaders));
        return 'handled';
      },
    });

    mountSnippetRoutes(ctx, { store, engine, maxPerZone: config.snippetsPerZone, changed });

    ctx.services.provide<SnippetService>(SNIPPETS, {
      async entrypoint(zoneId) {
        const rules = await store.rules(zoneId);
        if (rules.length === 0) return undefined;
        return entrypointView(zoneId, rules);
      },
    });

    return { stop: async () => origin.close() };
  },
});
