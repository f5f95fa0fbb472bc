/** Thin handlers for `/zones/{zone_id}/snippets…` and `/zones/{zone_id}/snippets/snippet_rules`. */
import { z } from 'zod';
import { randomBytes } from 'node:crypto';
import type { AreaContext } from '../../core/area.ts';
import { apiError, ApiError, CODES } from '../../core/errors.ts';
import { pageOf, pageQuery } from '../../core/pagination.ts';
import { raw, type Req } from '../../core/router.ts';
import { ScriptError } from '../../runtime/index.ts';
import type { Zone } from '../zones/index.ts';
import type { SnippetEngine } from './engine.ts';
import { view, type SnippetStore } from './store.ts';
import { checkName, checkRules, filesOf, RulesBody } from './validate.ts';

const ListQuery = z.object({ ...pageQuery({ perPage: 25, min: 1, max: 1000 }) });
const NAME_PARAM = { snippet_name: 'any' } as const;

export interface RouteDeps {
  store: SnippetStore;
  engine: SnippetEngine;
  maxPerZone: number;
  /** Called after every committed change of a zone's snippets or rules. */
  changed(zoneId: string): void;
}

const zoneOf = (req: Req<unknown, unknown>) => req.resolved.zone_id as Zone;

export function mountSnippetRoutes(ctx: AreaContext, deps: RouteDeps): void {
  const { router } = ctx;
  const { store, engine } = deps;
  const read = { permission: 'zone_snippets', level: 'read' } as const;
  const edit = { permission: 'zone_snippets', level: 'edit' } as const;
  const tags = ['snippets'];

  // The rules routes come first: `snippet_rules` would otherwise match `:snippet_name`.
  router.add(
    {
      method: 'GET',
      path: '/zones/:zone_id/snippets/snippet_rules',
      operationId: 'listZoneSnippetRules',
      summary: 'List snippet rules',
      auth: read,
      tags,
    },
    async (req) => store.rules(zoneOf(req).id),
  );
  router.add(
    {
      method: 'PUT',
      path: '/zones/:zone_id/snippets/snippet_rules',
      operationId: 'updateZoneSnippetRules',
      summary: 'Replace the snippet rules',
      auth: edit,
      body: RulesBody,
      tags,
    },
    async (req) => {
      checkRules(req.body.rules);
      const zone = zoneOf(req);
      const rules = await store.putRules(zone.id, req.body.rules);
      deps.changed(zone.id);
      return rules;
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: '/zones/:zone_id/snippets/snippet_rules',
      operationId: 'deleteZoneSnippetRules',
      summary: 'Delete every snippet rule',
      auth: edit,
      tags,
    },
    async (req) => {
      const zone = zoneOf(req);
      await store.deleteRules(zone.id);
      deps.changed(zone.id);
      return [];
    },
  );

  router.add(
    {
      method: 'GET',
      path: '/zones/:zone_id/snippets',
      operationId: 'listZoneSnippets',
      summary: 'List snippets',
      auth: read,
      query: ListQuery,
      tags,
    },
    async (req) => pageOf((await store.list(zoneOf(req).id)).map(view), req.query),
  );
  router.add(
    {
      method: 'GET',
      path: '/zones/:zone_id/snippets/:snippet_name',
      operationId: 'getZoneSnippet',
      summary: 'Get a snippet',
      auth: read,
      params: NAME_PARAM,
      tags,
    },
    async (req) => {
      const s = await store.get(zoneOf(req).id, req.params.snippet_name);
      if (!s) throw apiError('snippet_not_found', req.params.snippet_name);
      return view(s);
    },
  );
  router.add(
    {
      method: 'GET',
      path: '/zones/:zone_id/snippets/:snippet_name/content',
      operationId: 'getZoneSnippetContent',
      summary: 'Get the files of a snippet (multipart/form-data)',
      auth: read,
      params: NAME_PARAM,
      tags,
    },
    async (req) => {
      const s = await store.get(zoneOf(req).id, req.params.snippet_name);
      if (!s) throw apiError('snippet_not_found', req.params.snippet_name);
      const boundary = `outpost-${randomBytes(12).toString('hex')}`;
      const parts: Buffer[] = [];
      for (const f of s.files) {
        parts.push(
          Buffer.from(
            `--${boundary}\r\nContent-Disposition: form-data; name="${f.name}"; filename="${f.name}"\r\nContent-Type: ${f.type}\r\n\r\n`,
          ),
          Buffer.from(f.content, 'base64'),
          Buffer.from('\r\n'),
        );
      }
      parts.push(Buffer.from(`--${boundary}--\r\n`));
      return raw(
        new Response(Buffer.concat(parts), {
          status: 200,
          headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
        }),
      );
    },
  );
  router.add(
    {
      method: 'PUT',
      path: '/zones/:zone_id/snippets/:snippet_name',
      operationId: 'updateZoneSnippet',
      summary: 'Upload or replace a snippet (multipart: files + metadata {main_module})',
      auth: edit,
      bodyType: 'multipart',
      params: NAME_PARAM,
      tags,
    },
    async (req) => {
      const zone = zoneOf(req);
      const name = req.params.snippet_name;
      checkName(name);
      const data = filesOf(req.form!);
      const previous = await store.get(zone.id, name);
      if (!previous && (await store.count(zone.id)) >= deps.maxPerZone)
        throw apiError('snippet_limit', deps.maxPerZone);
      try {
        await engine.deploy(zone.id, { snippet_name: name, ...data });
      } catch (err) {
        if (err instanceof ScriptError) {
          const where = err.location ? ` at ${err.location}` : '';
          throw new ApiError(CODES.snippet_script_error.status, [
            {
              code: CODES.snippet_script_error.code,
              message: `The snippet does not start: ${err.message}${where}`,
            },
          ]);
        }
        throw apiError('runtime_unavailable', (err as Error).message);
      }
      try {
        const stored = await store.put(zone.id, name, data, deps.maxPerZone);
        deps.changed(zone.id);
        return view(stored);
      } catch (err) {
        // Not stored: the runtime goes back to what storage holds.
        await (previous ? engine.deploy(zone.id, previous) : engine.undeploy(zone.id, name)).catch(
          () => {},
        );
        throw err;
      }
    },
  );
  router.add(
    {
      method: 'DELETE',
      path: '/zones/:zone_id/snippets/:snippet_name',
      operationId: 'deleteZoneSnippet',
      summary: 'Delete a snippet',
      auth: edit,
      params: NAME_PARAM,
      tags,
    },
    async (req) => {
      const zone = zoneOf(req);
      await store.delete(zone.id, req.params.snippet_name);
      await engine.undeploy(zone.id, req.params.snippet_name);
      deps.changed(zone.id);
      return null;
    },
  );
}
