import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';

const DDOS_L7 = '4d21379b4f9f4bb088e0729962c8b3cf';
const DDOS_L4 = '3b64149bfa6e4220bbbc2bd6db589552';
const CUSTOM = 'http_request_firewall_custom';

let t: TestServer;
let zone: { id: string; name: string };
const zr = (path = '') => `/zones/${zone.id}/rulesets${path}`;
const ar = (path = '') => `/accounts/${t.accountId}/rulesets${path}`;

beforeAll(async () => {
  t = await startTestServer();
  zone = await createZone(t, 'rulesets-routes.test');
});
afterAll(() => t.stop());

describe('managed rulesets', () => {
  it('lists ddos_l7 at zone level and both DDoS rulesets at account level, without rules', async () => {
    const z = await t.call('GET', zr());
    expect(z.status).toBe(200);
    const managed = z.body.result.filter((r: { kind: string }) => r.kind === 'managed');
    expect(managed.map((r: { id: string }) => r.id)).toEqual([DDOS_L7]);
    expect(managed[0]).toMatchObject({ phase: 'ddos_l7', name: 'HTTP DDoS Attack Protection', version: '1' });
    expect(managed[0].rules).toBeUndefined();
    const a = await t.call('GET', ar());
    const ids = a.body.result.filter((r: { kind: string }) => r.kind === 'managed').map((r: { id: string; phase: string }) => `${r.phase}:${r.id}`);
    expect(ids.sort()).toEqual([`ddos_l4:${DDOS_L4}`, `ddos_l7:${DDOS_L7}`]);
  });

  it('gets a managed ruleset with its rules and categories', async () => {
    const res = await t.call('GET', ar(`/${DDOS_L4}`));
    expect(res.status).toBe(200);
    expect(res.body.result.kind).toBe('managed');
    const generic = res.body.result.rules.find((r: { id: string }) => r.id === '599dab0942ff4898ac1b7797e954e98b');
    expect(generic).toMatchObject({ description: 'Generic high-volume UDP traffic flows', categories: ['udp-flood'], enabled: true });
    expect((await t.call('GET', zr(`/${DDOS_L4}`))).status).toBe(404);
  });

  it('refuses to change managed rulesets (403)', async () => {
    const put = await t.call('PUT', zr(`/${DDOS_L7}`), { rules: [] });
    expect(put.status).toBe(403);
    expect(put.body.errors[0].code).toBe(20023);
    expect((await t.call('DELETE', ar(`/${DDOS_L7}`))).status).toBe(403);
    expect((await t.call('POST', ar(`/${DDOS_L4}/rules`), { action: 'execute', expression: 'true' })).status).toBe(403);
    const rule = (await t.call('GET', zr(`/${DDOS_L7}`))).body.result.rules[0].id;
    expect((await t.call('PATCH', zr(`/${DDOS_L7}/rules/${rule}`), { enabled: false })).status).toBe(403);
  });

  it('answers one version for a managed ruleset', async () => {
    const versions = await t.call('GET', zr(`/${DDOS_L7}/versions`));
    expect(versions.body.result).toEqual([expect.objectContaining({ id: DDOS_L7, version: '1' })]);
    expect((await t.call('GET', zr(`/${DDOS_L7}/versions/1`))).body.result.rules.length).toBeGreaterThan(0);
  });
});

describe('phase entry points', () => {
  it('404 (code 10003) until the first PUT, which creates kind zone; each PUT makes a version', async () => {
    const before = await t.call('GET', zr(`/phases/${CUSTOM}/entrypoint`));
    expect(before.status).toBe(404);
    expect(before.body.errors[0]).toMatchObject({ code: 10003, message: `could not find entrypoint ruleset in the ${CUSTOM} phase` });
    expect((await t.call('GET', zr(`/phases/${CUSTOM}/entrypoint/versions`))).status).toBe(404);

    const first = await t.call('PUT', zr(`/phases/${CUSTOM}/entrypoint`), {
      rules: [{ action: 'block', expression: 'http.request.uri.path eq "/admin"', description: 'no admin' }],
    });
    expect(first.status).toBe(200);
    const rs = first.body.result;
    expect(rs).toMatchObject({ kind: 'zone', phase: CUSTOM, version: '1', name: 'default' });
    expect(rs.rules[0]).toMatchObject({ action: 'block', enabled: true, version: '1', description: 'no admin' });
    expect(rs.rules[0].ref).toBe(rs.rules[0].id);

    const got = await t.call('GET', zr(`/phases/${CUSTOM}/entrypoint`));
    expect(got.body.result).toEqual(rs);

    // Keep the first rule (by id) unchanged and add one: the kept rule keeps its version.
    const second = await t.call('PUT', zr(`/phases/${CUSTOM}/entrypoint`), {
      rules: [{ id: rs.rules[0].id, action: 'block', expression: 'http.request.uri.path eq "/admin"', description: 'no admin' }, { action: 'log', expression: 'true' }],
    });
    expect(second.body.result.id).toBe(rs.id);
    expect(second.body.result.version).toBe('2');
    expect(second.body.result.rules[0]).toMatchObject({ id: rs.rules[0].id, version: '1' });

    const versions = await t.call('GET', zr(`/phases/${CUSTOM}/entrypoint/versions`));
    expect(versions.body.result.map((v: { version: string }) => v.version)).toEqual(['1', '2']);
    expect(versions.body.result[0].rules).toBeUndefined();
    const v1 = await t.call('GET', zr(`/phases/${CUSTOM}/entrypoint/versions/1`));
    expect(v1.body.result.rules).toHaveLength(1);

    // The entry point is also an ordinary ruleset in the list.
    const list = await t.call('GET', zr());
    expect(list.body.result.find((r: { id: string }) => r.id === rs.id)).toMatchObject({ kind: 'zone', version: '2' });
  });

  it('creates kind root at account level; ddos_l4 exists only at account level', async () => {
    const res = await t.call('PUT', ar('/phases/ddos_l4/entrypoint'), {
      rules: [{ action: 'execute', expression: 'true', action_parameters: { id: DDOS_L4, overrides: { sensitivity_level: 'low' } } }],
    });
    expect(res.status).toBe(200);
    expect(res.body.result).toMatchObject({ kind: 'root', phase: 'ddos_l4' });
    const zoneL4 = await t.call('PUT', zr('/phases/ddos_l4/entrypoint'), { rules: [] });
    expect(zoneL4.status).toBe(400);
    expect(zoneL4.body.errors[0].source.pointer).toBe('/phase');
  });

  it('follows the spec procedure for DDoS overrides (list, pick managed ddos_l7, PUT execute)', async () => {
    const list = await t.call('GET', zr());
    const managed = list.body.result.find((r: { kind: string; phase: string }) => r.kind === 'managed' && r.phase === 'ddos_l7');
    const rules = (await t.call('GET', zr(`/${managed.id}`))).body.result.rules;
    const res = await t.call('PUT', zr('/phases/ddos_l7/entrypoint'), {
      rules: [
        {
          action: 'execute',
          expression: 'true',
          description: 'tune HTTP DDoS',
          action_parameters: {
            id: managed.id,
            overrides: {
              sensitivity_level: 'medium',
              action: 'managed_challenge',
              categories: [{ category: 'http-flood', sensitivity_level: 'low' }],
              rules: [{ id: rules[0].id, action: 'block', sensitivity_level: 'eoff' }],
            },
          },
        },
      ],
    });
    expect(res.status).toBe(200);
    expect(res.body.result.rules[0].action_parameters.overrides.rules[0].id).toBe(rules[0].id);
  });

  it('rejects bad overrides with pointers', async () => {
    const res = await t.call('PUT', zr('/phases/ddos_l7/entrypoint'), {
      rules: [
        {
          action: 'execute',
          expression: 'true',
          action_parameters: { id: DDOS_L7, overrides: { sensitivity_level: 'extreme', categories: [{ category: 'syn-flood' }], rules: [{ id: 'f'.repeat(32) }] } },
        },
      ],
    });
    expect(res.status).toBe(400);
    const pointers = res.body.errors.map((e: { source: { pointer: string } }) => e.source.pointer);
    expect(pointers).toEqual(
      expect.arrayContaining([
        '/rules/0/action_parameters/overrides/sensitivity_level',
        '/rules/0/action_parameters/overrides/categories/0/category',
        '/rules/0/action_parameters/overrides/rules/0/id',
      ]),
    );
    const wrongPhase = await t.call('PUT', zr('/phases/ddos_l7/entrypoint'), { rules: [{ action: 'execute', expression: 'true', action_parameters: { id: DDOS_L4 } }] });
    expect(wrongPhase.body.errors[0]).toMatchObject({ source: { pointer: '/rules/0/action_parameters/id' } });
  });

  it('dry_run checks and answers without storing', async () => {
    const phase = 'http_request_origin';
    const dry = await t.call('PUT', zr(`/phases/${phase}/entrypoint?dry_run=true`), {
      rules: [{ action: 'route', expression: 'http.host eq "a.example"', action_parameters: { host_header: 'b.example', origin: { host: 'b.example', port: 8080 } } }],
    });
    expect(dry.status).toBe(200);
    expect(dry.body.result.rules[0].action).toBe('route');
    expect((await t.call('GET', zr(`/phases/${phase}/entrypoint`))).status).toBe(404);
    const bad = await t.call('PUT', zr(`/phases/${phase}/entrypoint?dry_run=true`), { rules: [{ action: 'route', expression: 'true', action_parameters: { origin: { port: 70000 } } }] });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].source.pointer).toBe('/rules/0/action_parameters/origin/port');
  });
});

describe('create, update, delete, versions', () => {
  it('creates a custom ruleset, replaces it (version 2), lists and deletes versions, deletes it (204)', async () => {
    const created = await t.call('POST', ar(), {
      name: 'shared rules',
      kind: 'custom',
      phase: CUSTOM,
      description: 'for all zones',
      rules: [{ action: 'managed_challenge', expression: 'ip.src.country eq "T1"' }],
    });
    expect(created.status).toBe(200);
    const rs = created.body.result;
    expect(rs).toMatchObject({ name: 'shared rules', kind: 'custom', version: '1', description: 'for all zones' });
    expect(rs.id).toMatch(/^[0-9a-f]{32}$/);

    const updated = await t.call('PUT', ar(`/${rs.id}`), { rules: [{ action: 'js_challenge', expression: 'ip.src.country eq "T1"' }] });
    expect(updated.status).toBe(200);
    expect(updated.body.result).toMatchObject({ id: rs.id, version: '2', name: 'shared rules', kind: 'custom' });

    const changeKind = await t.call('PUT', ar(`/${rs.id}`), { kind: 'root', rules: [] });
    expect(changeKind.status).toBe(400);
    expect(changeKind.body.errors[0].source.pointer).toBe('/kind');

    const versions = await t.call('GET', ar(`/${rs.id}/versions`));
    expect(versions.body.result.map((v: { version: string }) => v.version)).toEqual(['1', '2']);
    expect((await t.call('GET', ar(`/${rs.id}/versions/1`))).body.result.rules[0].action).toBe('managed_challenge');

    const latest = await t.call('DELETE', ar(`/${rs.id}/versions/2`));
    expect(latest.status).toBe(400);
    const old = await t.call('DELETE', ar(`/${rs.id}/versions/1`));
    expect(old.status).toBe(204);
    expect((await t.call('GET', ar(`/${rs.id}/versions/1`))).status).toBe(404);

    const del = await t.call('DELETE', ar(`/${rs.id}`));
    expect(del.status).toBe(204);
    const gone = await t.call('GET', ar(`/${rs.id}`));
    expect(gone.status).toBe(404);
    expect(gone.body.errors[0].code).toBe(10003);
    expect((await t.call('GET', ar(`/${rs.id}/versions`))).status).toBe(404);
  });

  it('allows one entry point per phase and level (400, code 20217)', async () => {
    const z = await createZone(t, 'rulesets-entry-once.test');
    const first = await t.call('POST', `/zones/${z.id}/rulesets`, { name: 'origin rules', kind: 'zone', phase: 'http_request_origin', rules: [] });
    expect(first.status).toBe(200);
    const again = await t.call('POST', `/zones/${z.id}/rulesets`, { name: 'again', kind: 'zone', phase: 'http_request_origin', rules: [] });
    expect(again.status).toBe(400);
    expect(again.body.errors[0].code).toBe(20217);
    // The created ruleset is the phase entry point.
    expect((await t.call('GET', `/zones/${z.id}/rulesets/phases/http_request_origin/entrypoint`)).body.result.id).toBe(first.body.result.id);
  });

  it('a PUT without rules keeps the rules and still makes a version', async () => {
    const rs = (await t.call('POST', ar(), { name: 'keep', kind: 'custom', phase: CUSTOM, rules: [{ action: 'log', expression: 'true' }] })).body.result;
    const res = await t.call('PUT', ar(`/${rs.id}`), { description: 'described' });
    expect(res.body.result).toMatchObject({ description: 'described', version: '2', name: 'keep' });
    expect(res.body.result.rules).toEqual(rs.rules);
  });

  it('concurrent first PUTs of an entry point make one ruleset with one version each', async () => {
    const z = await createZone(t, 'rulesets-concurrent.test');
    const puts = await Promise.all(
      Array.from({ length: 6 }, (_, i) => t.call('PUT', `/zones/${z.id}/rulesets/phases/${CUSTOM}/entrypoint`, { rules: [{ action: 'log', expression: 'true', ref: `r${i}` }] })),
    );
    expect(puts.map((p) => p.status)).toEqual(Array(6).fill(200));
    expect(new Set(puts.map((p) => p.body.result.id)).size).toBe(1);
    expect(puts.map((p) => Number(p.body.result.version)).sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6]);
    const list = (await t.call('GET', `/zones/${z.id}/rulesets`)).body.result.filter((r: { kind: string }) => r.kind === 'zone');
    expect(list).toHaveLength(1);
  });

  it('dry_run create stores nothing', async () => {
    const before = (await t.call('GET', ar())).body.result.length;
    const dry = await t.call('POST', ar('?dry_run=true'), { name: 'dry', kind: 'custom', phase: CUSTOM, rules: [{ action: 'log', expression: 'true' }] });
    expect(dry.status).toBe(200);
    expect(dry.body.result.name).toBe('dry');
    expect((await t.call('GET', ar())).body.result.length).toBe(before);
    expect((await t.call('GET', ar(`/${dry.body.result.id}`))).status).toBe(404);
  });
});

describe('rule-level endpoints', () => {
  it('adds rules at positions, edits, moves and deletes them; each answers the ruleset', async () => {
    const rs = (await t.call('POST', ar(), { name: 'ordering', kind: 'custom', phase: CUSTOM, rules: [{ action: 'log', expression: 'true', ref: 'first' }] })).body.result;
    const first = rs.rules[0].id;
    const end = await t.call('POST', ar(`/${rs.id}/rules`), { action: 'block', expression: 'ip.src eq 192.0.2.1', ref: 'last' });
    expect(end.status).toBe(200);
    expect(end.body.result.rules.map((r: { ref: string }) => r.ref)).toEqual(['first', 'last']);
    expect(end.body.result.version).toBe('2');
    const top = await t.call('POST', ar(`/${rs.id}/rules`), { action: 'challenge', expression: 'true', ref: 'top', position: { before: '' } });
    expect(top.body.result.rules.map((r: { ref: string }) => r.ref)).toEqual(['top', 'first', 'last']);
    const after = await t.call('POST', ar(`/${rs.id}/rules`), { action: 'log', expression: 'true', ref: 'after-first', position: { after: first } });
    expect(after.body.result.rules.map((r: { ref: string }) => r.ref)).toEqual(['top', 'first', 'after-first', 'last']);
    const index = await t.call('POST', ar(`/${rs.id}/rules`), { action: 'log', expression: 'true', ref: 'second', position: { index: 2 } });
    expect(index.body.result.rules.map((r: { ref: string }) => r.ref)).toEqual(['top', 'second', 'first', 'after-first', 'last']);

    const dupRef = await t.call('POST', ar(`/${rs.id}/rules`), { action: 'log', expression: 'true', ref: 'top' });
    expect(dupRef.status).toBe(400);
    expect(dupRef.body.errors[0].source.pointer).toBe('/ref');
    const badPos = await t.call('POST', ar(`/${rs.id}/rules`), { action: 'log', expression: 'true', position: { before: 'a'.repeat(32) } });
    expect(badPos.body.errors[0].source.pointer).toBe('/position/before');

    const edited = await t.call('PATCH', ar(`/${rs.id}/rules/${first}`), { enabled: false, description: 'off for now' });
    expect(edited.status).toBe(200);
    const rule = edited.body.result.rules.find((r: { id: string }) => r.id === first);
    expect(rule).toMatchObject({ enabled: false, description: 'off for now', version: '2', action: 'log', ref: 'first' });

    const moved = await t.call('PATCH', ar(`/${rs.id}/rules/${first}`), { position: { index: 1 } });
    expect(moved.body.result.rules[0].id).toBe(first);

    const changedAction = await t.call('PATCH', ar(`/${rs.id}/rules/${first}`), { action: 'block', action_parameters: { response: { status_code: 429, content: 'slow down', content_type: 'text/plain' } } });
    expect(changedAction.body.result.rules[0]).toMatchObject({ action: 'block', action_parameters: { response: { status_code: 429 } } });

    const dryDelete = await t.call('DELETE', ar(`/${rs.id}/rules/${first}?dry_run=true`));
    expect(dryDelete.body.result.rules.some((r: { id: string }) => r.id === first)).toBe(false);
    expect((await t.call('GET', ar(`/${rs.id}`))).body.result.rules.some((r: { id: string }) => r.id === first)).toBe(true);

    const deleted = await t.call('DELETE', ar(`/${rs.id}/rules/${first}`));
    expect(deleted.status).toBe(200);
    expect(deleted.body.result.rules.map((r: { ref: string }) => r.ref)).toEqual(['top', 'second', 'after-first', 'last']);
    expect((await t.call('DELETE', ar(`/${rs.id}/rules/${first}`))).status).toBe(404);
  });
});

describe('bad input (rulesets failure shape with source.pointer)', () => {
  it('points at a bad expression and gives its position', async () => {
    const expression = 'http.host eq "a" @@ true';
    const res = await t.call('POST', ar(), { name: 'bad', kind: 'custom', phase: CUSTOM, rules: [{ action: 'log', expression: 'true' }, { action: 'block', expression }] });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ success: false, result: null });
    const err = res.body.errors[0];
    expect(err.code).toBe(20021);
    expect(err.source).toEqual({ pointer: '/rules/1/expression' });
    const position = expression.indexOf('@@');
    expect(err.message).toMatch(new RegExp(`^Filter parsing error \\(1:${position + 1}\\)`));
  });

  it('names an unknown field at its position, rule-level too', async () => {
    const rs = (await t.call('POST', ar(), { name: 'fields', kind: 'custom', phase: CUSTOM, rules: [] })).body.result;
    const res = await t.call('POST', ar(`/${rs.id}/rules`), { action: 'block', expression: 'http.host eq "a" and http.hots eq "b"' });
    expect(res.status).toBe(400);
    expect(res.body.errors[0].source.pointer).toBe('/expression');
    expect(res.body.errors[0].message).toMatch(/^Filter parsing error \(1:22\): unknown field/);
    // Network-layer expressions of ddos_l4 are stored as given.
    const l4 = await t.call('PUT', ar('/phases/ddos_l4/entrypoint?dry_run=true'), { rules: [{ action: 'execute', expression: 'ip.dst eq 192.0.2.1 and udp.dstport eq 53', action_parameters: { id: DDOS_L4 } }] });
    expect(l4.status).toBe(200);
  });

  const cases: [string, unknown, string][] = [
    ['a missing name', { kind: 'custom', phase: CUSTOM }, '/name'],
    ['a missing kind', { name: 'x', phase: CUSTOM }, '/kind'],
    ['kind managed', { name: 'x', kind: 'managed', phase: CUSTOM }, '/kind'],
    ['kind zone at account level', { name: 'x', kind: 'zone', phase: CUSTOM }, '/kind'],
    ['an unknown phase', { name: 'x', kind: 'custom', phase: 'http_everything' }, '/phase'],
    ['an action the phase does not allow', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'route', expression: 'true' }] }, '/rules/0/action'],
    ['a rule without expression', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'block' }] }, '/rules/0/expression'],
    ['a wrong type', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'block', expression: 'true', enabled: 'yes' }] }, '/rules/0/enabled'],
    ['a block status outside 400-499', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'block', expression: 'true', action_parameters: { response: { status_code: 302, content: 'x' } } }] }, '/rules/0/action_parameters/response/status_code'],
    ['a bad block content type', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'block', expression: 'true', action_parameters: { response: { status_code: 403, content: 'x', content_type: 'image/png' } } }] }, '/rules/0/action_parameters/response/content_type'],
    ['skip without parameters', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'skip', expression: 'true' }] }, '/rules/0/action_parameters'],
    ['skip ruleset other than current', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'skip', expression: 'true', action_parameters: { ruleset: 'all' } }] }, '/rules/0/action_parameters/ruleset'],
    ['skip of an unknown product', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'skip', expression: 'true', action_parameters: { products: ['magic'] } }] }, '/rules/0/action_parameters/products/0'],
    ['parameters on a challenge', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'challenge', expression: 'true', action_parameters: { response: {} } }] }, '/rules/0/action_parameters'],
    ['an execute of an unknown ruleset', { name: 'x', kind: 'custom', phase: 'ddos_l7', rules: [{ action: 'execute', expression: 'true', action_parameters: { id: 'e'.repeat(32) } }] }, '/rules/0/action_parameters/id'],
    ['a route without parameters', { name: 'x', kind: 'custom', phase: 'http_request_origin', rules: [{ action: 'route', expression: 'true' }] }, '/rules/0/action_parameters'],
    ['duplicate refs', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ action: 'log', expression: 'true', ref: 'r' }, { action: 'log', expression: 'true', ref: 'r' }] }, '/rules/1/ref'],
    ['an unknown rule id', { name: 'x', kind: 'custom', phase: CUSTOM, rules: [{ id: 'a'.repeat(32), action: 'log', expression: 'true' }] }, '/rules/0/id'],
  ];
  for (const [what, body, pointer] of cases) {
    it(`rejects ${what} at ${pointer}`, async () => {
      const res = await t.call('POST', ar(), body);
      expect(res.status).toBe(400);
      expect(res.body.success).toBe(false);
      expect(res.body.errors.map((e: { source?: { pointer: string } }) => e.source?.pointer)).toContain(pointer);
      for (const e of res.body.errors) expect(typeof e.message).toBe('string');
    });
  }

  it('rejects a body that is not an object, a bad cursor, malformed ids and bad versions', async () => {
    const notObject = await t.call('POST', ar(), '[1,2]');
    expect(notObject.status).toBe(400);
    expect(notObject.body.errors[0].source.pointer).toBe('');
    expect((await t.call('GET', ar('?cursor=nonsense'))).status).toBe(400);
    expect((await t.call('GET', ar('?per_page=51'))).status).toBe(400);
    expect((await t.call('GET', ar('/not-an-id'))).status).toBe(400);
    expect((await t.call('GET', ar(`/${DDOS_L7}/versions/7`))).status).toBe(404);
    expect((await t.call('GET', `/accounts/${'0'.repeat(32)}/rulesets`)).status).toBe(404);
  });
});

describe('cursor paging', () => {
  it('walks every ruleset once across pages; the last page has no cursor', async () => {
    for (let i = 0; i < 5; i++) {
      await t.call('POST', ar(), { name: `paged ${i}`, kind: 'custom', phase: CUSTOM, rules: [] });
    }
    const all = (await t.call('GET', ar())).body.result.map((r: { id: string }) => r.id);
    expect(all.length).toBeGreaterThanOrEqual(7);
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const res = await t.call('GET', ar(`?per_page=2${cursor ? `&cursor=${cursor}` : ''}`));
      expect(res.status).toBe(200);
      expect(res.body.result.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.result.map((r: { id: string }) => r.id));
      cursor = res.body.result_info.cursor;
      if (cursor) expect(res.body.result_info.cursors.after).toBe(cursor);
      else expect(res.body.result_info.cursors).toBeUndefined();
      pages++;
    } while (cursor && pages < 50);
    expect(seen).toEqual(all);
    expect(pages).toBe(Math.ceil(all.length / 2));
  });
});

describe('authentication and permissions', () => {
  it('401 without credentials', async () => {
    const res = await t.call('GET', zr(), undefined, { authorization: '' });
    expect(res.status).toBe(401);
  });

  it('a Zone WAF Read token reads but cannot write; a DNS token gets 403; account routes need Account Rulesets', async () => {
    const reader = await createToken(t, ['Zone WAF Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    const auth = { authorization: `Bearer ${reader}` };
    expect((await t.call('GET', zr(), undefined, auth)).status).toBe(200);
    expect((await t.call('PUT', zr('/phases/http_request_firewall_custom/entrypoint'), { rules: [] }, auth)).status).toBe(403);
    expect((await t.call('GET', ar(), undefined, auth)).status).toBe(403);

    const dns = await createToken(t, ['DNS Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    expect((await t.call('GET', zr(), undefined, { authorization: `Bearer ${dns}` })).status).toBe(403);

    const account = await createToken(t, ['Account Rulesets Write'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    const write = await t.call('POST', ar(), { name: 'by token', kind: 'custom', phase: CUSTOM, rules: [] }, { authorization: `Bearer ${account}` });
    expect(write.status).toBe(200);
  });
});
