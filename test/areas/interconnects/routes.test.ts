import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { manualClock } from '../../../src/core/clock.ts';
import { createToken, startTestServer, type TestServer } from '../../support/server.ts';

const clock = manualClock(new Date('2026-03-02T09:00:00.000Z'));
const PROVISIONING_S = 120;
let t: TestServer;
let base: string;
let acct: string;

beforeAll(async () => {
  t = await startTestServer({ cniProvisioningSeconds: PROVISIONING_S }, { clock });
  acct = `com.cloudflare.api.account.${t.accountId}`;
  base = `/accounts/${t.accountId}/cni`;
});
afterAll(() => t.stop());

async function freeSlot(query = ''): Promise<any> {
  const res = await t.call('GET', `${base}/slots?occupied=false${query}`);
  expect(res.status).toBe(200);
  return res.body.items[0];
}

async function createInterconnect(body: Record<string, unknown> = {}): Promise<any> {
  const slot = body.slot_id ? { id: body.slot_id } : await freeSlot('&speed=10G');
  const res = await t.call('POST', `${base}/interconnects`, {
    account: t.accountId,
    type: 'direct',
    slot_id: slot.id,
    ...body,
  });
  expect(res.status, res.text).toBe(200);
  return res.body;
}

describe('slots', () => {
  it('lists the default catalog as bare {items, next} with the official slot fields', async () => {
    const res = await t.call('GET', `${base}/slots`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('application/json');
    expect(res.body.success).toBeUndefined();
    expect(res.body.next).toBeNull();
    expect(res.body.items.length).toBeGreaterThanOrEqual(40);
    const s = res.body.items[0];
    expect(s).toMatchObject({
      occupied: false,
      site: expect.any(String),
      speed: expect.stringMatching(/^\d+G$/),
    });
    expect(s.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(s.facility).toMatchObject({ name: expect.any(String), code: expect.any(String) });
    expect(s.facility.address.length).toBeGreaterThan(0);
  });

  it('filters by facility (code or name), speed, site, address_contains and occupied', async () => {
    const byCode = await t.call('GET', `${base}/slots?facility=EQ-LD8`);
    expect(byCode.body.items.length).toBeGreaterThan(0);
    expect(byCode.body.items.every((s: any) => s.facility.name === 'Equinix LD8')).toBe(true);
    const byName = await t.call(
      'GET',
      `${base}/slots?facility=${encodeURIComponent('equinix ld8')}`,
    );
    expect(byName.body.items.map((s: any) => s.id)).toEqual(
      byCode.body.items.map((s: any) => s.id),
    );
    const fast = await t.call('GET', `${base}/slots?speed=100G`);
    expect(fast.body.items.length).toBeGreaterThan(0);
    expect(fast.body.items.every((s: any) => s.speed === '100G')).toBe(true);
    const site = await t.call('GET', `${base}/slots?site=fra01`);
    expect(site.body.items.every((s: any) => s.site === 'fra01')).toBe(true);
    const addr = await t.call('GET', `${base}/slots?address_contains=frankfurt`);
    expect(addr.body.items.map((s: any) => s.id)).toEqual(site.body.items.map((s: any) => s.id));
    const none = await t.call('GET', `${base}/slots?facility=NOWHERE`);
    expect(none.body).toEqual({ items: [], next: null });
  });

  it('pages with cursor/limit and with page/per_page', async () => {
    const all = (await t.call('GET', `${base}/slots`)).body.items;
    const first = await t.call('GET', `${base}/slots?limit=5`);
    expect(first.body.items).toEqual(all.slice(0, 5));
    expect(first.body.next).toBe(5);
    const second = await t.call('GET', `${base}/slots?cursor=5&limit=5`);
    expect(second.body.items).toEqual(all.slice(5, 10));
    const page = await t.call('GET', `${base}/slots?page=2&per_page=5`);
    expect(page.body.items).toEqual(all.slice(5, 10));
    const past = await t.call('GET', `${base}/slots?cursor=10000&limit=5`);
    expect(past.body).toEqual({ items: [], next: null });
  });

  it('gets one slot; unknown is 404, malformed id is 400', async () => {
    const slot = await freeSlot();
    const res = await t.call('GET', `${base}/slots/${slot.id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual(slot);
    const missing = await t.call('GET', `${base}/slots/00000000-0000-4000-8000-000000000000`);
    expect(missing.status).toBe(404);
    expect(missing.body.errors[0].code).toBe(1603);
    expect((await t.call('GET', `${base}/slots/not-a-uuid`)).status).toBe(400);
  });

  it('rejects bad filter values', async () => {
    expect((await t.call('GET', `${base}/slots?occupied=maybe`)).status).toBe(400);
    expect((await t.call('GET', `${base}/slots?limit=-1`)).status).toBe(400);
    expect((await t.call('GET', `${base}/slots?page=0`)).status).toBe(400);
  });

  it('a slot is occupied while an interconnect uses it, and free again after delete', async () => {
    const slot = await freeSlot('&facility=EQ-AM5&speed=100G');
    const ic = await createInterconnect({ slot_id: slot.id, name: 'occupancy-test' });
    const held = await t.call('GET', `${base}/slots/${slot.id}`);
    expect(held.body).toMatchObject({ occupied: true, account: t.accountId });
    const occupied = await t.call('GET', `${base}/slots?occupied=true`);
    expect(occupied.body.items.map((s: any) => s.id)).toContain(slot.id);
    const free = await t.call('GET', `${base}/slots?occupied=false`);
    expect(free.body.items.map((s: any) => s.id)).not.toContain(slot.id);
    const again = await t.call('POST', `${base}/interconnects`, {
      account: t.accountId,
      type: 'direct',
      slot_id: slot.id,
    });
    expect(again.status).toBe(409);
    expect(again.headers.get('x-should-retry')).toBe('false');
    expect(again.body.errors[0].code).toBe(1604);
    const del = await t.call('DELETE', `${base}/interconnects/${ic.name}`);
    expect(del.status).toBe(200);
    expect(del.text).toBe('');
    const freed = await t.call('GET', `${base}/slots/${slot.id}`);
    expect(freed.body.occupied).toBe(false);
    expect(freed.body.account).toBeUndefined();
  });

  it('concurrent creates on one slot: exactly one wins', async () => {
    const slot = await freeSlot('&facility=EQ-CH1&speed=100G');
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        t.call('POST', `${base}/interconnects`, {
          type: 'direct',
          slot_id: slot.id,
          name: `race-${i}`,
        }),
      ),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409, 409, 409, 409]);
    const winner = results.find((r) => r.status === 200)!.body;
    const holders = (await t.call('GET', `${base}/interconnects`)).body.items.filter(
      (i: any) => i.slot_id === slot.id,
    );
    expect(holders.map((i: any) => i.id)).toEqual([winner.id]);
    expect((await t.call('DELETE', `${base}/interconnects/${winner.name}`)).status).toBe(200);
  });
});

describe('interconnects', () => {
  it('creates with the spec body and answers the record bare', async () => {
    const slot = await freeSlot('&facility=EQ-SV1&speed=10G');
    const res = await t.call('POST', `${base}/interconnects`, {
      account: t.accountId,
      slot_id: slot.id,
      type: 'direct',
      facility: 'EQ-SV1',
      speed: '10G',
      name: 'sv1-primary',
      description: 'primary link',
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      account: t.accountId,
      name: 'sv1-primary',
      type: 'direct',
      slot_id: slot.id,
      facility: 'EQ-SV1',
      speed: '10G',
      description: 'primary link',
      status: 'pending',
      site: 'sjc01',
      ccr_device_name: slot.ccr_device_name,
    });
    expect(res.body.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.body.virtual_port_reservation_id).toMatch(/^[0-9a-f-]{36}$/);
    const byName = await t.call('GET', `${base}/interconnects/sv1-primary`);
    expect(byName.body).toEqual(res.body);
    const byId = await t.call('GET', `${base}/interconnects/${res.body.id}`);
    expect(byId.body).toEqual(res.body);
  });

  it('creates with the official body (no name: one is assigned)', async () => {
    const slot = await freeSlot('&speed=10G');
    const res = await t.call('POST', `${base}/interconnects`, {
      account: t.accountId,
      type: 'direct',
      slot_id: slot.id,
      speed: null,
    });
    expect(res.status).toBe(200);
    expect(res.body.name).toMatch(/^cni-[a-z0-9]+-[0-9a-f]{6}$/);
    expect(res.body.speed).toBe(slot.speed);
  });

  it('validate_only=true runs every check and writes nothing', async () => {
    const slot = await freeSlot('&facility=EQ-NY5&speed=100G');
    const before = (await t.call('GET', `${base}/interconnects`)).body.items.length;
    const res = await t.call('POST', `${base}/interconnects?validate_only=true`, {
      account: t.accountId,
      type: 'direct',
      slot_id: slot.id,
      speed: '100G',
      name: 'dry-run',
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      name: 'dry-run',
      slot_id: slot.id,
      status: 'pending',
      facility: 'EQ-NY5',
    });
    expect((await t.call('GET', `${base}/interconnects`)).body.items.length).toBe(before);
    expect((await t.call('GET', `${base}/interconnects/dry-run`)).status).toBe(404);
    expect((await t.call('GET', `${base}/slots/${slot.id}`)).body.occupied).toBe(false);
    // The same checks as a real create.
    const bad = await t.call('POST', `${base}/interconnects?validate_only=true`, {
      account: t.accountId,
      type: 'direct',
      slot_id: slot.id,
      speed: '10G',
    });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].message).toMatch(/speed/);
    const taken = await createInterconnect({ name: 'taken-name' });
    const dup = await t.call('POST', `${base}/interconnects?validate_only=true`, {
      account: t.accountId,
      type: 'direct',
      slot_id: slot.id,
      name: taken.name,
    });
    expect(dup.status).toBe(409);
    const busy = await t.call('POST', `${base}/interconnects?validate_only=true`, {
      account: t.accountId,
      type: 'direct',
      slot_id: taken.slot_id,
    });
    expect(busy.status).toBe(409);
  });

  it('lists with page/per_page (result + result_info) and cursor/limit (items + next) in one body', async () => {
    for (let i = 0; i < 3; i++) await createInterconnect({ name: `paged-${i}` });
    const all = (await t.call('GET', `${base}/interconnects`)).body;
    expect(all.items.length).toBeGreaterThanOrEqual(4);
    expect(all.result).toEqual(all.items);
    const page2 = await t.call('GET', `${base}/interconnects?page=2&per_page=2`);
    expect(page2.status).toBe(200);
    expect(page2.body.result).toEqual(all.items.slice(2, 4));
    expect(page2.body.result_info).toMatchObject({
      page: 2,
      per_page: 2,
      count: 2,
      total_count: all.items.length,
    });
    const cur = await t.call('GET', `${base}/interconnects?cursor=2&limit=2`);
    expect(cur.body.items).toEqual(all.items.slice(2, 4));
    expect(cur.body.next).toBe(all.items.length > 4 ? 4 : null);
    const past = await t.call('GET', `${base}/interconnects?page=99&per_page=2`);
    expect(past.body.result).toEqual([]);
    expect(past.body.next).toBeNull();
    const site = await t.call('GET', `${base}/interconnects?site=sjc01`);
    expect(site.body.items.every((i: any) => i.site === 'sjc01')).toBe(true);
    const type = await t.call('GET', `${base}/interconnects?type=partner`);
    expect(type.body.items).toEqual([]);
  });

  const bad: [string, Record<string, unknown>, RegExp][] = [
    ['a missing slot_id', { type: 'direct', slot_id: undefined }, /slot_id/],
    ['a slot_id that is not a UUID', { type: 'direct', slot_id: 'slot-1' }, /slot_id/],
    [
      'an unknown slot',
      { type: 'direct', slot_id: '00000000-0000-4000-8000-000000000000' },
      /slot_id/,
    ],
    ['a type other than direct', { type: 'partner' }, /type/],
    ['a malformed speed', { type: 'direct', speed: '10 gbps' }, /speed/],
    ['a speed the slot does not have', { type: 'direct', speed: '100G' }, /speed/],
    ['a facility the slot is not in', { type: 'direct', facility: 'EQ-SG1' }, /facility/],
    ['another account', { type: 'direct', account: 'f'.repeat(32) }, /account/],
    ['an invalid name', { type: 'direct', name: 'has spaces' }, /name/],
    [
      'a name shaped like an id',
      { type: 'direct', name: '00000000-0000-4000-8000-000000000000' },
      /name/,
    ],
    [
      'the cloud-partner variant',
      { type: 'direct', bandwidth: '1G', pairing_key: 'k' },
      /pairing_key/,
    ],
    ['a wrongly typed description', { type: 'direct', description: 5 }, /description/],
  ];
  for (const [what, body, message] of bad) {
    it(`rejects ${what} with 400`, async () => {
      const slot = await freeSlot('&facility=EQ-FR5&speed=10G');
      const res = await t.call('POST', `${base}/interconnects`, { slot_id: slot.id, ...body });
      expect(res.status).toBe(400);
      expect(res.body.success).toBe(false);
      expect(res.body.errors.map((e: any) => e.message).join(' ')).toMatch(message);
    });
  }

  it('rejects malformed JSON and reports several problems at once', async () => {
    const res = await t.call('POST', `${base}/interconnects`, '{"type": ');
    expect(res.status).toBe(400);
    const many = await t.call('POST', `${base}/interconnects`, {
      type: 'partner',
      slot_id: 'x',
      speed: 'fast',
    });
    expect(many.status).toBe(400);
    expect(many.body.errors.length).toBeGreaterThanOrEqual(3);
  });

  it('refuses a duplicate name with 409; unknown interconnects are 404', async () => {
    await createInterconnect({ name: 'unique-one' });
    const slot = await freeSlot();
    const dup = await t.call('POST', `${base}/interconnects`, {
      type: 'direct',
      slot_id: slot.id,
      name: 'unique-one',
    });
    expect(dup.status).toBe(409);
    expect(dup.body.errors[0].code).toBe(1605);
    for (const path of ['', '/status', '/loa', '/loa/default']) {
      const res = await t.call('GET', `${base}/interconnects/no-such-link${path}`);
      expect(res.status).toBe(404);
      expect(res.body.errors[0].code).toBe(1602);
    }
    expect((await t.call('DELETE', `${base}/interconnects/no-such-link`)).status).toBe(404);
  });

  it('answers 404 for an unknown account', async () => {
    const res = await t.call('GET', `/accounts/${'a'.repeat(32)}/cni/interconnects`);
    expect(res.status).toBe(404);
  });
});

describe('status lifecycle', () => {
  it('is pending, then active/healthy once the provisioning delay has passed', async () => {
    const ic = await createInterconnect({ name: 'lifecycle' });
    expect(ic.status).toBe('pending');
    expect((await t.call('GET', `${base}/interconnects/lifecycle/status`)).body).toEqual({
      status: 'pending',
      state: 'Pending',
    });
    clock.advance((PROVISIONING_S - 1) * 1000);
    expect((await t.call('GET', `${base}/interconnects/lifecycle`)).body.status).toBe('pending');
    clock.advance(1000);
    expect((await t.call('GET', `${base}/interconnects/lifecycle`)).body.status).toBe('active');
    expect((await t.call('GET', `${base}/interconnects/lifecycle/status`)).body).toEqual({
      status: 'healthy',
      state: 'Healthy',
    });
  });

  it('the operator endpoint sets the link down, unhealthy and up again', async () => {
    await createInterconnect({ name: 'flappy' });
    const link = `/_outpost${base}/interconnects/flappy/link`;
    const down = await t.call('PUT', link, { state: 'down', reason: 'fiber cut at MMR1' });
    expect(down.status).toBe(200);
    expect(down.body.result).toMatchObject({
      status: 'down',
      state: 'Down',
      reason: 'fiber cut at MMR1',
    });
    expect((await t.call('GET', `${base}/interconnects/flappy/status`)).body).toEqual({
      status: 'down',
      state: 'Down',
      reason: 'fiber cut at MMR1',
    });
    expect((await t.call('GET', `${base}/interconnects/flappy`)).body.status).toBe('down');
    await t.call('PUT', link, { state: 'unhealthy', reason: 'high error rate' });
    expect((await t.call('GET', `${base}/interconnects/flappy/status`)).body).toEqual({
      status: 'unhealthy',
      state: 'Unhealthy',
      reason: 'high error rate',
    });
    // Up also completes provisioning at once.
    const up = await t.call('PUT', link, { state: 'up' });
    expect(up.body.result).toMatchObject({ status: 'healthy', state: 'Healthy' });
    expect((await t.call('GET', `${base}/interconnects/flappy`)).body.status).toBe('active');
    const read = await t.call('GET', link);
    expect(read.body.result.link).toMatchObject({ state: 'up', reason: null });
  });

  it('the operator endpoint validates, needs a root credential and knows no unknown link', async () => {
    await createInterconnect({ name: 'guarded' });
    const link = `/_outpost${base}/interconnects/guarded/link`;
    expect((await t.call('PUT', link, { state: 'sideways' })).status).toBe(400);
    expect((await t.call('PUT', link, {})).status).toBe(400);
    expect(
      (await t.call('PUT', `/_outpost${base}/interconnects/nope/link`, { state: 'down' })).status,
    ).toBe(404);
    expect((await t.call('PUT', link, { state: 'down' }, { authorization: '' })).status).toBe(401);
    const writer = await createToken(t, ['Magic WAN Write'], { [acct]: '*' });
    const res = await t.call('PUT', link, { state: 'down' }, { authorization: `Bearer ${writer}` });
    expect(res.status).toBe(403);
    expect(res.body.errors[0].code).toBe(1609);
    expect(
      (await t.call('GET', link, undefined, { authorization: `Bearer ${writer}` })).status,
    ).toBe(403);
  });
});

describe('letter of authorization', () => {
  // The LOA is read back with the real pdftotext (scripts/test.sh installs poppler-utils).
  const requirePdftotext = () => {
    if (!existsSync('/usr/bin/pdftotext')) {
      throw new Error('/usr/bin/pdftotext is missing: install Debian poppler-utils (scripts/test.sh does it)');
    }
  };

  async function loaText(
    path: string,
  ): Promise<{ status: number; type: string | null; text: string; head: string }> {
    requirePdftotext();
    const res = await fetch(`${t.api}${path}`, { headers: { authorization: `Bearer ${t.token}` } });
    const buf = Buffer.from(await res.arrayBuffer());
    const dir = mkdtempSync(join(tmpdir(), 'loa-'));
    try {
      writeFileSync(join(dir, 'loa.pdf'), buf);
      const text =
        res.status === 200
          ? execFileSync('pdftotext', ['-layout', join(dir, 'loa.pdf'), '-']).toString('utf8')
          : '';
      return {
        status: res.status,
        type: res.headers.get('content-type'),
        text,
        head: buf.subarray(0, 5).toString('latin1'),
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it(
    'is a PDF naming account, facility, address, slot, port, speed, id, dates and signatory',
    async () => {
      const slot = await freeSlot('&facility=EQ-LD8&speed=10G');
      const ic = await createInterconnect({ slot_id: slot.id, name: 'ld8-loa' });
      const loa = await loaText(`${base}/interconnects/ld8-loa/loa`);
      expect(loa.status).toBe(200);
      expect(loa.type).toBe('application/pdf');
      expect(loa.head).toBe('%PDF-');
      const text = loa.text.replace(/\s+/g, ' ');
      expect(text).toContain('LETTER OF AUTHORIZATION');
      expect(text).toContain('Outpost account');
      expect(text).toContain('Equinix LD8 (EQ-LD8)');
      expect(text).toContain('6/7 Harbour Exchange Square');
      expect(text).toContain('London E14 9GE');
      expect(text).toContain(`Slot ${slot.id}`);
      expect(text).toContain(`Device ${slot.ccr_device_name}`);
      expect(text).toContain(`Port ${slot.port}`);
      expect(text).toContain('Speed 10G');
      expect(text).toContain(`Interconnect ID ${ic.id}`);
      const today = clock.now().toISOString().slice(0, 10);
      const until = new Date(clock.now().getTime() + 90 * 86_400_000).toISOString().slice(0, 10);
      expect(text).toContain(`Date of issue: ${today}`);
      expect(text).toContain(`Valid until: ${until}`);
      expect(text).toContain('Authorized signatory');
      expect(text).toContain('Signature:');
    },
  );

  it('uses the name query instead of the account name', async () => {
    await createInterconnect({ name: 'named-loa' });
    const loa = await loaText(
      `${base}/interconnects/named-loa/loa?name=${encodeURIComponent('Example Networks GmbH')}`,
    );
    expect(loa.text).toContain('Example Networks GmbH');
    expect(loa.text).not.toContain('Outpost account');
  });

  it('rejects a name over 200 characters; /loa/default answers the account name', async () => {
    await createInterconnect({ name: 'default-loa' });
    const long = await t.call(
      'GET',
      `${base}/interconnects/default-loa/loa?name=${'x'.repeat(201)}`,
    );
    expect(long.status).toBe(400);
    const def = await t.call('GET', `${base}/interconnects/default-loa/loa/default`);
    expect(def.status).toBe(200);
    expect(def.body).toEqual({ name: 'Outpost account' });
  });
});

describe('settings', () => {
  it('answers the default ASN, stores a new one and validates it', async () => {
    const got = await t.call('GET', `${base}/settings`);
    expect(got.status).toBe(200);
    expect(got.body).toEqual({ default_asn: 65000 });
    const put = await t.call('PUT', `${base}/settings`, { default_asn: 4200000001 });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ default_asn: 4200000001 });
    expect((await t.call('GET', `${base}/settings`)).body).toEqual({ default_asn: 4200000001 });
    for (const bad of [0, 23456, 64500, 65535, 4294967295, 4294967296, -1, 1.5, 'x', null, true, [65001]]) {
      const res = await t.call('PUT', `${base}/settings`, { default_asn: bad });
      expect(res.status, String(bad)).toBe(400);
      expect(res.body.errors[0].message, String(bad)).toMatch(/^default_asn: /);
    }
    // A body without the field, or with fields the settings do not have, changes nothing: 400.
    for (const [body, field] of [
      [{}, 'default_asn'],
      [{ asn: 65001 }, 'asn'],
      [{ default_asn: 65001, colour: 'red' }, 'colour'],
      [[], 'body'],
      ['"65001"', 'body'],
    ] as const) {
      const res = await t.call('PUT', `${base}/settings`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.errors.map((e: { message: string }) => e.message).join(' '), JSON.stringify(body)).toContain(field);
    }
    expect((await t.call('PUT', `${base}/settings`, '')).status).toBe(400);
    expect((await t.call('GET', `${base}/settings`)).body).toEqual({ default_asn: 4200000001 });
    await t.call('PUT', `${base}/settings`, { default_asn: 65000 });
  });
});

describe('auth', () => {
  const endpoints: [string, string, unknown?][] = [
    ['GET', '/slots'],
    ['GET', '/slots/00000000-0000-4000-8000-000000000000'],
    ['GET', '/interconnects'],
    ['POST', '/interconnects', { type: 'direct' }],
    ['GET', '/interconnects/x'],
    ['DELETE', '/interconnects/x'],
    ['GET', '/interconnects/x/status'],
    ['GET', '/interconnects/x/loa'],
    ['GET', '/interconnects/x/loa/default'],
    ['GET', '/cnis'],
    ['POST', '/cnis', {}],
    ['GET', '/cnis/00000000-0000-4000-8000-000000000000'],
    ['PUT', '/cnis/00000000-0000-4000-8000-000000000000', {}],
    ['DELETE', '/cnis/00000000-0000-4000-8000-000000000000'],
    ['GET', '/settings'],
    ['PUT', '/settings', {}],
  ];

  it('answers 401 without credentials on every endpoint', async () => {
    for (const [method, path, body] of endpoints) {
      const res = await t.call(method, `${base}${path}`, body, { authorization: '' });
      expect(res.status, `${method} ${path}`).toBe(401);
    }
  });

  it('answers 403 to a token without Magic WAN / Magic Transit on every endpoint', async () => {
    const dns = await createToken(t, ['DNS Write'], { [acct]: '*' });
    for (const [method, path, body] of endpoints) {
      const res = await t.call(method, `${base}${path}`, body, { authorization: `Bearer ${dns}` });
      expect(res.status, `${method} ${path}`).toBe(403);
    }
  });

  it('read groups read, write groups write; either product group works', async () => {
    const reader = await createToken(t, ['Magic WAN Read'], { [acct]: '*' });
    const transit = await createToken(t, ['Magic Transit Write'], { [acct]: '*' });
    const as = (tok: string) => ({ authorization: `Bearer ${tok}` });
    expect((await t.call('GET', `${base}/interconnects`, undefined, as(reader))).status).toBe(200);
    expect((await t.call('GET', `${base}/settings`, undefined, as(reader))).status).toBe(200);
    expect(
      (await t.call('PUT', `${base}/settings`, { default_asn: 65001 }, as(reader))).status,
    ).toBe(403);
    const slot = await freeSlot();
    expect(
      (
        await t.call(
          'POST',
          `${base}/interconnects`,
          { type: 'direct', slot_id: slot.id },
          as(reader),
        )
      ).status,
    ).toBe(403);
    const created = await t.call(
      'POST',
      `${base}/interconnects`,
      { type: 'direct', slot_id: slot.id, name: 'by-transit' },
      as(transit),
    );
    expect(created.status).toBe(200);
    expect(
      (await t.call('DELETE', `${base}/interconnects/by-transit`, undefined, as(reader))).status,
    ).toBe(403);
    expect(
      (await t.call('DELETE', `${base}/interconnects/by-transit`, undefined, as(transit))).status,
    ).toBe(200);
  });

  it('a token for another account gets 403', async () => {
    const other = await createToken(t, ['Magic WAN Write'], {
      [`com.cloudflare.api.account.${'b'.repeat(32)}`]: '*',
    });
    const res = await t.call('GET', `${base}/interconnects`, undefined, {
      authorization: `Bearer ${other}`,
    });
    expect(res.status).toBe(403);
  });

  it('lists both permission groups', async () => {
    const groups = (await t.call('GET', '/user/tokens/permission_groups')).body.result.map(
      (g: any) => g.name,
    );
    expect(groups).toEqual(
      expect.arrayContaining([
        'Magic WAN Read',
        'Magic WAN Write',
        'Magic Transit Read',
        'Magic Transit Write',
      ]),
    );
  });
});

describe('capabilities the area does not expose', () => {
  it('has no BGP state, bandwidth, statistics, uptime, light level or maintenance endpoints', async () => {
    await createInterconnect({ name: 'no-extras' });
    for (const extra of [
      'bgp',
      'bgp_status',
      'bandwidth',
      'stats',
      'traffic',
      'uptime',
      'light_levels',
      'optics',
      'maintenance',
    ]) {
      const res = await t.call('GET', `${base}/interconnects/no-extras/${extra}`);
      expect(res.status, extra).toBe(404);
    }
    expect(
      (await t.call('POST', `${base}/interconnects/no-extras/maintenance`, { start: 'now' }))
        .status,
    ).toBe(404);
  });
});
