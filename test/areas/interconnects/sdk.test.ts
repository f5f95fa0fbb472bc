import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let account_id: string;

beforeAll(async () => {
  t = await startTestServer({ cniProvisioningSeconds: 0 });
  cf = sdk(t);
  account_id = t.accountId;
});
afterAll(() => t.stop());

describe('official client: networkInterconnects', () => {
  it('slots.list / slots.get with the client filters', async () => {
    const page = await cf.networkInterconnects.slots.list({
      account_id,
      site: 'sin01',
      speed: '100G',
      occupied: false,
      limit: 1,
    });
    expect(page.items).toHaveLength(1);
    expect(page.items[0]).toMatchObject({ site: 'sin01', speed: '100G', occupied: false });
    expect(page.next).toBe(1);
    const byAddress = await cf.networkInterconnects.slots.list({
      account_id,
      address_contains: 'Ayer Rajah',
    });
    expect(byAddress.items.length).toBeGreaterThan(0);
    const slot = await cf.networkInterconnects.slots.get(page.items[0].id, { account_id });
    expect(slot.facility).toMatchObject({ name: 'Equinix SG1' });
  });

  it('interconnects: create (and validate_only) → get → status → loa → list → delete', async () => {
    const [slot] = (
      await cf.networkInterconnects.slots.list({
        account_id,
        site: 'ams01',
        speed: '10G',
        occupied: false,
      })
    ).items;
    const dry = await cf.networkInterconnects.interconnects.create(
      { account_id, account: account_id, type: 'direct', slot_id: slot.id },
      { query: { validate_only: true } },
    );
    expect(dry).toMatchObject({ slot_id: slot.id, type: 'direct' });
    expect((await cf.networkInterconnects.slots.get(slot.id, { account_id })).occupied).toBe(false);

    const created = await cf.networkInterconnects.interconnects.create({
      account_id,
      account: account_id,
      type: 'direct',
      slot_id: slot.id,
      speed: '10G',
    });
    expect(created).toMatchObject({
      account: account_id,
      slot_id: slot.id,
      speed: '10G',
      site: 'ams01',
    });
    const got = await cf.networkInterconnects.interconnects.get(created.name, { account_id });
    expect(got).toEqual(created);
    const status = await cf.networkInterconnects.interconnects.status(created.name, { account_id });
    expect(status.state).toBe('Healthy');

    const loa = await cf.networkInterconnects.interconnects
      .loa(created.name, { account_id, name: 'Example Ltd' })
      .asResponse();
    expect(loa.status).toBe(200);
    expect(loa.headers.get('content-type')).toBe('application/pdf');
    expect(
      Buffer.from(await loa.arrayBuffer())
        .subarray(0, 5)
        .toString('latin1'),
    ).toBe('%PDF-');

    const list = await cf.networkInterconnects.interconnects.list({ account_id, site: 'ams01' });
    expect(list.items.map((i) => i.name)).toContain(created.name);

    await cf.networkInterconnects.interconnects.delete(created.name, { account_id });
    await expect(
      cf.networkInterconnects.interconnects.get(created.name, { account_id }),
    ).rejects.toBeInstanceOf(Cloudflare.NotFoundError);
    expect((await cf.networkInterconnects.slots.get(slot.id, { account_id })).occupied).toBe(false);
  });

  it('cnis: create → get → update → list → delete in the client form', async () => {
    const [slot] = (
      await cf.networkInterconnects.slots.list({ account_id, site: 'ord01', occupied: false })
    ).items;
    const ic = await cf.networkInterconnects.interconnects.create({
      account_id,
      account: account_id,
      type: 'direct',
      slot_id: slot.id,
    });
    const cni = await cf.networkInterconnects.cnis.create({
      account_id,
      account: account_id,
      interconnect: ic.name,
      magic: { conduit_name: 'ord-cni', description: 'to ORD', mtu: 1500 },
      bgp: { customer_asn: 64600, extra_prefixes: ['203.0.113.0/24'], md5_key: 'sdk-secret' },
    });
    expect(cni).toMatchObject({
      interconnect: ic.name,
      magic: { conduit_name: 'ord-cni' },
      bgp: { customer_asn: 64600, md5_key: '********' },
    });
    expect(cni.p2p_ip).toMatch(/\/31$/);
    const got = await cf.networkInterconnects.cnis.get(cni.id, { account_id });
    expect(got).toEqual(cni);
    const updated = await cf.networkInterconnects.cnis.update(cni.id, {
      account_id,
      ...got,
      magic: { ...got.magic, description: 'updated' },
    });
    expect(updated.magic.description).toBe('updated');
    expect(updated.bgp?.md5_key).toBe('********');
    const list = await cf.networkInterconnects.cnis.list({ account_id, slot: slot.id });
    expect(list.items.map((c) => c.id)).toEqual([cni.id]);
    const refused = await cf.networkInterconnects.interconnects
      .delete(ic.name, { account_id })
      .catch((e) => e);
    expect(refused).toBeInstanceOf(Cloudflare.ConflictError);
    await cf.networkInterconnects.cnis.delete(cni.id, { account_id });
    await expect(cf.networkInterconnects.cnis.get(cni.id, { account_id })).rejects.toBeInstanceOf(
      Cloudflare.NotFoundError,
    );
    await cf.networkInterconnects.interconnects.delete(ic.name, { account_id });
  });

  it('settings.get / settings.update', async () => {
    expect(await cf.networkInterconnects.settings.get({ account_id })).toEqual({
      default_asn: 65000,
    });
    expect(
      await cf.networkInterconnects.settings.update({ account_id, default_asn: 64700 }),
    ).toEqual({ default_asn: 64700 });
    const bad = await cf.networkInterconnects.settings
      .update({ account_id, default_asn: 23456 })
      .catch((e) => e);
    expect(bad).toBeInstanceOf(Cloudflare.BadRequestError);
  });

  it('typed errors: occupied slot is a ConflictError, a bad token an AuthenticationError', async () => {
    const [slot] = (
      await cf.networkInterconnects.slots.list({ account_id, site: 'ewr01', occupied: false })
    ).items;
    await cf.networkInterconnects.interconnects.create({
      account_id,
      account: account_id,
      type: 'direct',
      slot_id: slot.id,
    });
    const again = await cf.networkInterconnects.interconnects
      .create({ account_id, account: account_id, type: 'direct', slot_id: slot.id })
      .catch((e) => e);
    expect(again).toBeInstanceOf(Cloudflare.ConflictError);
    expect(again.errors[0].code).toBe(1604);
    const bad = new Cloudflare({ baseURL: t.api, apiToken: 'not-a-token', maxRetries: 0 });
    await expect(bad.networkInterconnects.slots.list({ account_id })).rejects.toBeInstanceOf(
      Cloudflare.AuthenticationError,
    );
  });
});
