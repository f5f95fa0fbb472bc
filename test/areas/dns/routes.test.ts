import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';

let t: TestServer;
let zone: { id: string; name: string };
let other: { id: string; name: string };
const records = (zoneId = zone.id) => `/zones/${zoneId}/dns_records`;

beforeAll(async () => {
  t = await startTestServer();
  zone = await createZone(t, 'dns-routes.test');
  other = await createZone(t, 'other-zone.test');
});
afterAll(() => t.stop());

describe('create, get, update, delete', () => {
  it('completes relative names, lowercases and answers the full record', async () => {
    const res = await t.call('POST', records(), { type: 'A', name: 'WWW', content: '192.0.2.10', proxied: true, ttl: 1, comment: 'web', tags: ['env:prod'] });
    expect(res.status).toBe(200);
    const r = res.body.result;
    expect(r).toMatchObject({ type: 'A', name: 'www.dns-routes.test', content: '192.0.2.10', proxied: true, proxiable: true, ttl: 1, comment: 'web', tags: ['env:prod'], zone_id: zone.id, zone_name: zone.name });
    expect(r.id).toMatch(/^[0-9a-f]{32}$/);
    expect(Date.parse(r.created_on)).not.toBeNaN();
    const got = await t.call('GET', `${records()}/${r.id}`);
    expect(got.body.result).toEqual(r);
  });

  it('PUT replaces, PATCH changes only the given fields, DELETE answers {id}', async () => {
    const created = (await t.call('POST', records(), { type: 'TXT', name: 'note', content: 'v=1', ttl: 300 })).body.result;
    const put = await t.call('PUT', `${records()}/${created.id}`, { type: 'TXT', name: 'note', content: 'v=2', ttl: 600 });
    expect(put.status).toBe(200);
    expect(put.body.result).toMatchObject({ id: created.id, content: 'v=2', ttl: 600, created_on: created.created_on });
    const patch = await t.call('PATCH', `${records()}/${created.id}`, { ttl: 120 });
    expect(patch.body.result).toMatchObject({ content: 'v=2', ttl: 120 });
    const del = await t.call('DELETE', `${records()}/${created.id}`);
    expect(del.status).toBe(200);
    expect(del.body.result).toEqual({ id: created.id });
    const gone = await t.call('GET', `${records()}/${created.id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.errors[0].code).toBe(81044);
  });

  it('accepts MX with priority, SRV and CAA data', async () => {
    const mx = await t.call('POST', records(), { type: 'MX', name: '@', content: 'mail.dns-routes.test', priority: 10 });
    expect(mx.body.result).toMatchObject({ name: zone.name, priority: 10 });
    const srv = await t.call('POST', records(), { type: 'SRV', name: '_sip._tcp', data: { priority: 5, weight: 10, port: 5060, target: 'sip.dns-routes.test' } });
    expect(srv.status).toBe(200);
    expect(srv.body.result.name).toBe('_sip._tcp.dns-routes.test');
    const caa = await t.call('POST', records(), { type: 'CAA', name: '@', data: { flags: 0, tag: 'issue', value: 'ca.example' } });
    expect(caa.status).toBe(200);
    expect(caa.body.result.content).toContain('issue');
  });
});

describe('bad input', () => {
  const cases: [string, unknown, number][] = [
    ['invalid IPv4', { type: 'A', name: 'a', content: '300.1.1.1' }, 400],
    ['invalid IPv6', { type: 'AAAA', name: 'a', content: 'not-v6' }, 400],
    ['ttl out of range', { type: 'A', name: 'a', content: '192.0.2.1', ttl: 30 }, 400],
    ['ttl above max', { type: 'A', name: 'a', content: '192.0.2.1', ttl: 86401 }, 400],
    ['proxied MX', { type: 'MX', name: 'a', content: 'mx.dns-routes.test', priority: 1, proxied: true }, 400],
    ['MX without priority', { type: 'MX', name: 'a', content: 'mx.dns-routes.test' }, 400],
    ['unknown type', { type: 'BOGUS', name: 'a', content: 'x' }, 400],
    ['missing name', { type: 'A', content: '192.0.2.1' }, 400],
    ['wrong type of ttl', { type: 'A', name: 'a', content: '192.0.2.1', ttl: 'soon' }, 400],
    ['name outside the zone', { type: 'A', name: 'www.elsewhere.test.', content: '192.0.2.1' }, 400],
  ];
  for (const [what, body, status] of cases) {
    it(`rejects ${what}`, async () => {
      const res = await t.call('POST', records(), body);
      expect(res.status).toBe(status);
      expect(res.body.success).toBe(false);
      expect(res.body.errors.length).toBeGreaterThan(0);
      expect(typeof res.body.errors[0].message).toBe('string');
    });
  }

  it('names the field in a validation error', async () => {
    const res = await t.call('POST', records(), { type: 'A', name: 'x', content: '192.0.2.1', ttl: 'soon' });
    expect(res.body.errors[0].message).toMatch(/ttl/);
  });

  it('rejects identical records and CNAME clashes', async () => {
    await t.call('POST', records(), { type: 'A', name: 'dup', content: '192.0.2.20' });
    const dup = await t.call('POST', records(), { type: 'A', name: 'dup', content: '192.0.2.20' });
    expect(dup.status).toBe(400);
    expect(dup.body.errors[0].code).toBe(81058);
    // Round-robin A records are allowed.
    expect((await t.call('POST', records(), { type: 'A', name: 'dup', content: '192.0.2.21' })).status).toBe(200);
    const cname = await t.call('POST', records(), { type: 'CNAME', name: 'dup', content: 'target.example.net' });
    expect(cname.status).toBe(400);
    await t.call('POST', records(), { type: 'CNAME', name: 'alias', content: 'target.example.net' });
    const clash = await t.call('POST', records(), { type: 'TXT', name: 'alias', content: 'x' });
    expect(clash.status).toBe(400);
  });

  it('malformed JSON and malformed ids', async () => {
    expect((await t.call('POST', records(), '{"type":')).status).toBe(400);
    const bad = await t.call('GET', `${records()}/not-an-id`);
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].code).toBe(7003);
    expect((await t.call('GET', `${records()}/${'0'.repeat(32)}`)).status).toBe(404);
    expect((await t.call('GET', records('f'.repeat(32)))).status).toBe(404);
  });

  it('a failed update leaves the record unchanged', async () => {
    const r = (await t.call('POST', records(), { type: 'A', name: 'stable', content: '192.0.2.30' })).body.result;
    const bad = await t.call('PATCH', `${records()}/${r.id}`, { content: 'nope' });
    expect(bad.status).toBe(400);
    expect((await t.call('GET', `${records()}/${r.id}`)).body.result.content).toBe('192.0.2.30');
  });
});

describe('list filters and paging', () => {
  let z: { id: string; name: string };
  beforeAll(async () => {
    z = await createZone(t, 'filters.test');
    for (let i = 0; i < 12; i++) {
      await t.call('POST', records(z.id), { type: 'A', name: `host${i}`, content: `198.51.100.${i}`, proxied: i % 2 === 0 });
    }
    await t.call('POST', records(z.id), { type: 'TXT', name: 'host1', content: 'hello world' });
    await t.call('POST', records(z.id), { type: 'AAAA', name: 'v6', content: '2001:DB8::1' });
  });

  it('filters by type, proxied, name forms and content', async () => {
    const list = (q: string) => t.call('GET', `${records(z.id)}?${q}`).then((r) => r.body);
    expect((await list('type=TXT')).result.map((r: any) => r.content)).toEqual(['hello world']);
    expect((await list('type=A&proxied=false')).result_info.total_count).toBe(6);
    expect((await list('type=A&proxied=true')).result_info.total_count).toBe(6);
    expect((await list('name=host1.filters.test')).result_info.total_count).toBe(2);
    expect((await list('name.exact=HOST1.filters.test')).result_info.total_count).toBe(2);
    expect((await list('name.startswith=host1')).result_info.total_count).toBe(4);
    expect((await list('name.endswith=v6.filters.test')).result.map((r: any) => r.content)).toEqual(['2001:db8::1']);
    expect((await list('content.contains=world')).result_info.total_count).toBe(1);
    expect((await list('type=TXT&content=198.51.100.1&match=any')).result_info.total_count).toBe(2);
  });

  it('filters by comment, tag (with tag_match) and search (with match)', async () => {
    const zt = await createZone(t, 'tagged.test');
    const add = (name: string, content: string, comment: string | null, tags: string[]) =>
      t.call('POST', records(zt.id), { type: 'A', name, content, comment, tags });
    expect((await add('web', '192.0.2.1', 'Front door', ['team:web', 'env:prod'])).status).toBe(200);
    expect((await add('api', '192.0.2.2', 'Backend API', ['team:api', 'env:staging'])).status).toBe(200);
    expect((await add('db', '192.0.2.3', null, ['team:data'])).status).toBe(200);
    expect((await add('old', '192.0.2.4', 'legacy box', [])).status).toBe(200);
    const names = async (q: string) => {
      const res = await t.call('GET', `${records(zt.id)}?order=name&${q}`);
      expect(res.status, `${q}: ${res.text}`).toBe(200);
      expect(res.body.result_info.total_count).toBe(res.body.result.length);
      return res.body.result.map((r: { name: string }) => r.name.split('.')[0]);
    };
    expect(await names('comment=Front%20door')).toEqual(['web']);
    expect(await names('comment.exact=front%20door')).toEqual([]);
    expect(await names('comment.contains=API')).toEqual(['api']);
    expect(await names('comment.startswith=leg')).toEqual(['old']);
    expect(await names('comment.endswith=DOOR')).toEqual(['web']);
    expect(await names('comment.absent')).toEqual(['db']);
    expect(await names('comment.present')).toEqual(['api', 'old', 'web']);
    expect(await names('tag=team:web')).toEqual(['web']);
    expect(await names('tag.exact=team:we')).toEqual([]);
    expect(await names('tag.present=env')).toEqual(['api', 'web']);
    expect(await names('tag.absent=env')).toEqual(['db', 'old']);
    expect(await names('tag.contains=env:stag')).toEqual(['api']);
    expect(await names('tag.startswith=team:a')).toEqual(['api']);
    expect(await names('tag.endswith=team:ta')).toEqual(['db']);
    expect(await names('tag=team:web&tag=env:staging')).toEqual([]);
    expect(await names('tag=team:web&tag=env:staging&tag_match=any')).toEqual(['api', 'web']);
    expect(await names('search=backend')).toEqual(['api']);
    expect(await names('search=192.0.2.3')).toEqual(['db']);
    expect(await names('search=prod')).toEqual(['web']);
    expect(await names('search=legacy&tag.present=team')).toEqual([]);
    expect(await names('search=legacy&tag.present=team&match=any')).toEqual(['api', 'db', 'old', 'web']);
    expect(await names('name.startswith=d&comment.present&match=any')).toEqual(['api', 'db', 'old', 'web']);
    expect(await names('name.startswith=w&comment.present')).toEqual(['web']);
    const paged = await t.call('GET', `${records(zt.id)}?tag.present=team&per_page=2&page=2&order=name`);
    expect(paged.body.result_info).toEqual({ page: 2, per_page: 2, count: 1, total_count: 3, total_pages: 2 });
    expect((await t.call('GET', `${records(zt.id)}?tag_match=some`)).status).toBe(400);
  });

  it('orders and pages; a page past the end is empty with result_info', async () => {
    const p1 = (await t.call('GET', `${records(z.id)}?type=A&order=content&direction=desc&per_page=5`)).body;
    expect(p1.result).toHaveLength(5);
    expect(p1.result_info).toEqual({ page: 1, per_page: 5, count: 5, total_count: 12, total_pages: 3 });
    expect(p1.result[0].content).toBe('198.51.100.9');
    const p3 = (await t.call('GET', `${records(z.id)}?type=A&per_page=5&page=3`)).body;
    expect(p3.result).toHaveLength(2);
    const past = await t.call('GET', `${records(z.id)}?type=A&per_page=5&page=9`);
    expect(past.status).toBe(200);
    expect(past.body.result).toEqual([]);
    expect(past.body.result_info.total_count).toBe(12);
    expect((await t.call('GET', `${records(z.id)}?per_page=0`)).status).toBe(400);
    expect((await t.call('GET', `${records(z.id)}?order=weight`)).status).toBe(400);
  });
});

describe('batch', () => {
  it('applies deletes, patches, puts and posts atomically', async () => {
    const z = await createZone(t, 'batch.test');
    const a = (await t.call('POST', records(z.id), { type: 'A', name: 'a', content: '192.0.2.1' })).body.result;
    const b = (await t.call('POST', records(z.id), { type: 'A', name: 'b', content: '192.0.2.2' })).body.result;
    const c = (await t.call('POST', records(z.id), { type: 'A', name: 'c', content: '192.0.2.3' })).body.result;
    const res = await t.call('POST', `${records(z.id)}/batch`, {
      deletes: [{ id: a.id }],
      patches: [{ id: b.id, content: '192.0.2.22' }],
      puts: [{ id: c.id, type: 'A', name: 'c', content: '192.0.2.33', ttl: 300 }],
      posts: [{ type: 'A', name: 'd', content: '192.0.2.4' }],
    });
    expect(res.status).toBe(200);
    expect(res.body.result.deletes[0].id).toBe(a.id);
    expect(res.body.result.patches[0].content).toBe('192.0.2.22');
    expect(res.body.result.puts[0]).toMatchObject({ content: '192.0.2.33', ttl: 300 });
    expect(res.body.result.posts[0].name).toBe('d.batch.test');

    // One bad item rolls back the whole batch.
    const before = (await t.call('GET', records(z.id))).body.result;
    const bad = await t.call('POST', `${records(z.id)}/batch`, {
      deletes: [{ id: b.id }],
      posts: [{ type: 'A', name: 'e', content: '192.0.2.5' }, { type: 'A', name: 'f', content: 'bogus' }],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].message).toMatch(/posts\.1/);
    const after = (await t.call('GET', records(z.id))).body.result;
    expect(after.map((r: any) => r.id).sort()).toEqual(before.map((r: any) => r.id).sort());
  });
});

describe('zone files', () => {
  it('exports BIND and imports it into another zone, skipping identical records', async () => {
    const src = await createZone(t, 'export-src.test');
    await t.call('POST', records(src.id), { type: 'A', name: 'www', content: '192.0.2.7', proxied: true });
    await t.call('POST', records(src.id), { type: 'MX', name: '@', content: 'mx.export-src.test', priority: 5 });
    await t.call('POST', records(src.id), { type: 'TXT', name: '@', content: 'v=spf1 -all' });
    const exp = await fetch(`${t.api}${records(src.id)}/export`, { headers: { authorization: `Bearer ${t.token}` } });
    expect(exp.headers.get('content-type')).toMatch(/text\/plain/);
    const text = await exp.text();
    expect(text).toMatch(/\$ORIGIN export-src\.test\./);
    expect(text).toMatch(/www\.export-src\.test\.\s+1\s+IN\s+A\s+192\.0\.2\.7/);

    const dst = await createZone(t, 'export-src.test'.replace('src', 'dst'));
    const zoneText = text.replaceAll('export-src.test', 'export-dst.test');
    const form = new FormData();
    form.set('file', new Blob([zoneText], { type: 'text/plain' }), 'zone.txt');
    const imp = await fetch(`${t.api}${records(dst.id)}/import`, { method: 'POST', headers: { authorization: `Bearer ${t.token}` }, body: form });
    const body = await imp.json();
    expect(imp.status).toBe(200);
    expect(body.result).toEqual({ recs_added: 3, total_records_parsed: 3 });
    const list = (await t.call('GET', records(dst.id))).body.result;
    expect(list.find((r: any) => r.type === 'A')).toMatchObject({ name: 'www.export-dst.test', proxied: true });
    // Importing again adds nothing.
    const again = await fetch(`${t.api}${records(dst.id)}/import`, { method: 'POST', headers: { authorization: `Bearer ${t.token}` }, body: form });
    expect((await again.json()).result.recs_added).toBe(0);
  });

  it('rejects a broken zone file with the line number and writes nothing', async () => {
    const z = await createZone(t, 'broken-import.test');
    const form = new FormData();
    form.set('file', new Blob(['www 300 IN A 192.0.2.1\nbad 300 IN WHAT ever\n']), 'zone.txt');
    const res = await fetch(`${t.api}${records(z.id)}/import`, { method: 'POST', headers: { authorization: `Bearer ${t.token}` }, body: form });
    expect(res.status).toBe(400);
    expect((await res.json()).errors[0].message).toMatch(/line 2/);
    expect((await t.call('GET', records(z.id))).body.result).toEqual([]);
  });
});

describe('auth', () => {
  it('401 without credentials, 403 without DNS permission or outside the zone', async () => {
    expect((await t.call('GET', records(), undefined, { authorization: '' })).status).toBe(401);
    const zoneOnly = await createToken(t, ['Zone Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    expect((await t.call('GET', records(), undefined, { authorization: `Bearer ${zoneOnly}` })).status).toBe(403);
    const dnsRead = await createToken(t, ['DNS Read'], { [`com.cloudflare.api.account.zone.${zone.id}`]: '*' });
    const auth = { authorization: `Bearer ${dnsRead}` };
    expect((await t.call('GET', records(), undefined, auth)).status).toBe(200);
    expect((await t.call('GET', records(other.id), undefined, auth)).status).toBe(403);
    const write = await t.call('POST', records(), { type: 'A', name: 'ro', content: '192.0.2.1' }, auth);
    expect(write.status).toBe(403);
    const dnsWrite = await createToken(t, ['DNS Write'], { [`com.cloudflare.api.account.${t.accountId}`]: '*' });
    const ok = await t.call('POST', records(other.id), { type: 'A', name: 'rw', content: '192.0.2.1' }, { authorization: `Bearer ${dnsWrite}` });
    expect(ok.status).toBe(200);
  });
});

describe('zone deletion', () => {
  it('removes the records with the zone', async () => {
    const z = await createZone(t, 'cascade.test');
    const r = (await t.call('POST', records(z.id), { type: 'A', name: 'a', content: '192.0.2.1' })).body.result;
    expect((await t.call('DELETE', `/zones/${z.id}`)).body.result).toEqual({ id: z.id });
    expect((await t.call('GET', `${records(z.id)}/${r.id}`)).status).toBe(404);
    const again = await createZone(t, 'cascade.test');
    expect((await t.call('GET', records(again.id))).body.result).toEqual([]);
  });
});
