/**
 * The official client's `snippets.*` against a real server: upload (bracket multipart form),
 * get, list across pages, content (multipart back), rules update/list/delete, delete, and a typed
 * 404. Snippets start in real workerd.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { sdk, Cloudflare } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let zoneId: string;

const code = (tag: string) =>
  `export default { async fetch(request) { return new Response('${tag}'); } };`;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  zoneId = (await createZone(t, 'sdk-snippets.test')).id;
});
afterAll(async () => {
  await t?.stop();
});

describe('official client snippets.*', () => {
  it('uploads with the bracket form, gets, lists across pages and reads the content back', async () => {
    const created = await cf.snippets.update('alpha', {
      zone_id: zoneId,
      metadata: { main_module: 'main.js' },
      files: [
        await Cloudflare.toFile(Buffer.from(code('alpha')), 'main.js', {
          type: 'application/javascript+module',
        }),
      ],
    } as never);
    expect(created.snippet_name).toBe('alpha');
    expect(created.created_on).toMatch(/^\d{4}-\d\d-\d\dT/);
    for (const name of ['beta', 'gamma']) {
      await cf.snippets.update(name, {
        zone_id: zoneId,
        metadata: { main_module: 'main.js' },
        files: [
          await Cloudflare.toFile(Buffer.from(code(name)), 'main.js', {
            type: 'application/javascript+module',
          }),
        ],
      } as never);
    }
    const got = await cf.snippets.get('beta', { zone_id: zoneId });
    expect(got.snippet_name).toBe('beta');
    const names: string[] = [];
    for await (const s of cf.snippets.list({ zone_id: zoneId, per_page: 2 }))
      names.push(s.snippet_name);
    expect(names).toEqual(['alpha', 'beta', 'gamma']);

    const content = await cf.snippets.content.get('alpha', { zone_id: zoneId });
    expect(content.headers.get('content-type')).toMatch(/^multipart\/form-data; boundary=/);
    const form = await content.formData();
    const file = form.get('main.js') as File;
    expect(await file.text()).toBe(code('alpha'));
  });

  it('replaces a snippet and keeps created_on', async () => {
    const before = await cf.snippets.get('alpha', { zone_id: zoneId });
    const after = await cf.snippets.update('alpha', {
      zone_id: zoneId,
      metadata: { main_module: 'main.js' },
      files: [
        await Cloudflare.toFile(Buffer.from(code('alpha2')), 'main.js', {
          type: 'application/javascript+module',
        }),
      ],
    } as never);
    expect(after.created_on).toBe(before.created_on);
    expect(after.modified_on! >= before.modified_on!).toBe(true);
  });

  it('updates, lists and deletes rules', async () => {
    const updated: { snippet_name: string; id: string }[] = [];
    for await (const r of cf.snippets.rules.update({
      zone_id: zoneId,
      rules: [
        {
          snippet_name: 'alpha',
          expression: 'http.request.uri.path eq "/a"',
          enabled: true,
          description: 'a',
        },
        { snippet_name: 'beta', expression: 'http.request.uri.path eq "/b"' },
      ],
    })) {
      updated.push(r as { snippet_name: string; id: string });
    }
    expect(updated.map((r) => r.snippet_name)).toEqual(['alpha', 'beta']);
    const listed = [];
    for await (const r of cf.snippets.rules.list({ zone_id: zoneId })) listed.push(r);
    expect(listed).toHaveLength(2);
    expect(listed[1]).toMatchObject({ snippet_name: 'beta', enabled: false, description: '' });
    const deleted = [];
    for await (const r of cf.snippets.rules.delete({ zone_id: zoneId })) deleted.push(r);
    expect(deleted).toEqual([]);
  });

  it('deletes a snippet, then reports a typed 404', async () => {
    const res = await cf.snippets.delete('gamma', { zone_id: zoneId });
    expect(res).toBeNull();
    const err = await cf.snippets.get('gamma', { zone_id: zoneId }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Cloudflare.NotFoundError);
    expect((err as InstanceType<typeof Cloudflare.NotFoundError>).errors[0].code).toBe(1100);
  });

  it('reports a syntax error at upload as a 400 with the location', async () => {
    const err = await cf.snippets
      .update('broken', {
        zone_id: zoneId,
        metadata: { main_module: 'main.js' },
        files: [
          await Cloudflare.toFile(Buffer.from('export default { fetch( { } };'), 'main.js', {
            type: 'application/javascript+module',
          }),
        ],
      } as never)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Cloudflare.BadRequestError);
    expect((err as InstanceType<typeof Cloudflare.BadRequestError>).errors[0].message).toMatch(
      /SyntaxError.*main\.js:1:\d+/,
    );
  });
});
