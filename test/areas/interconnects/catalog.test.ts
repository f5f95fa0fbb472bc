import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asnProblem, parseCidr, parseIpv4 } from '../../../src/areas/interconnects/addressing.ts';
import { loadCatalog, stableUuid } from '../../../src/areas/interconnects/facilities.ts';
import { startTestServer } from '../../support/server.ts';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'cni-catalog-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const FILE = {
  facilities: [
    {
      code: 'LAB-1',
      name: 'Lab Facility One',
      address: ['1 Test Street', 'Testville 12345'],
      site: 'lab01',
      slots: [
        { device: 'r1.lab01', port: 'xe-0/0/0', speed: '10G', panel: 'PP:1 port 1' },
        {
          id: '11111111-2222-4333-8444-555555555555',
          device: 'r1.lab01',
          port: 'et-0/0/1',
          speed: '400G',
        },
      ],
    },
  ],
};

describe('facilities catalog', () => {
  it('the built-in catalog lists real facilities with stable slot ids', () => {
    const a = loadCatalog(undefined);
    const b = loadCatalog(undefined);
    expect(a.facilities.length).toBeGreaterThanOrEqual(8);
    expect(a.slots.map((s) => s.id)).toEqual(b.slots.map((s) => s.id));
    expect(new Set(a.slots.map((s) => s.id)).size).toBe(a.slots.length);
    for (const s of a.slots) expect(s.speed).toMatch(/^\d+G$/);
  });

  it('a config file replaces the catalog', async () => {
    const path = join(dir, 'facilities.json');
    writeFileSync(path, JSON.stringify(FILE));
    const t = await startTestServer({ cniFacilities: path, cniProvisioningSeconds: 0 });
    try {
      const res = await t.call('GET', `/accounts/${t.accountId}/cni/slots`);
      expect(res.status).toBe(200);
      expect(res.body.items).toHaveLength(2);
      expect(res.body.items[0]).toMatchObject({
        id: stableUuid('cni-slot:LAB-1:r1.lab01:xe-0/0/0'),
        facility: {
          name: 'Lab Facility One',
          address: ['1 Test Street', 'Testville 12345'],
          code: 'LAB-1',
        },
        site: 'lab01',
        speed: '10G',
        occupied: false,
      });
      expect(res.body.items[1].id).toBe('11111111-2222-4333-8444-555555555555');
      const ic = await t.call('POST', `/accounts/${t.accountId}/cni/interconnects`, {
        type: 'direct',
        slot_id: res.body.items[1].id,
        speed: '400G',
        facility: 'LAB-1',
      });
      expect(ic.status).toBe(200);
      expect(ic.body).toMatchObject({
        facility: 'LAB-1',
        speed: '400G',
        status: 'active',
        site: 'lab01',
      });
    } finally {
      await t.stop();
    }
  });

  it('a bare array of facilities is accepted too', () => {
    const path = join(dir, 'array.json');
    writeFileSync(path, JSON.stringify(FILE.facilities));
    expect(loadCatalog(path).slots).toHaveLength(2);
  });

  it('refuses a broken file with its name and the problem', () => {
    const bad = join(dir, 'bad.json');
    writeFileSync(
      bad,
      JSON.stringify({
        facilities: [{ ...FILE.facilities[0], slots: [{ device: 'r', port: 'p', speed: 'fast' }] }],
      }),
    );
    expect(() => loadCatalog(bad)).toThrow(/bad\.json.*speed/);
    const dup = join(dir, 'dup.json');
    writeFileSync(dup, JSON.stringify({ facilities: [FILE.facilities[0], FILE.facilities[0]] }));
    expect(() => loadCatalog(dup)).toThrow(/listed twice/);
    const notJson = join(dir, 'not.json');
    writeFileSync(notJson, '{');
    expect(() => loadCatalog(notJson)).toThrow(/not\.json/);
    expect(() => loadCatalog(join(dir, 'missing.json'))).toThrow(/missing\.json/);
  });
});

describe('addressing helpers', () => {
  it('parses IPv4 strictly', () => {
    expect(parseIpv4('192.0.2.1')).toBe(0xc0000201);
    expect(parseIpv4('255.255.255.255')).toBe(0xffffffff);
    for (const bad of ['192.0.2', '192.0.2.256', '192.0.2.01', 'a.b.c.d', '1.2.3.4.5', ''])
      expect(parseIpv4(bad)).toBeUndefined();
    expect(parseCidr('192.0.2.0/31')).toEqual({ address: 0xc0000200, prefix: 31 });
    expect(typeof parseCidr('192.0.2.0/33')).toBe('string');
    expect(typeof parseCidr('192.0.2.0')).toBe('string');
  });

  it('knows usable and reserved ASNs', () => {
    for (const ok of [1, 174, 64512, 65534, 131072, 4200000000, 4294967294])
      expect(asnProblem(ok), String(ok)).toBeUndefined();
    for (const bad of [
      0,
      23456,
      64496,
      64511,
      65535,
      65536,
      65551,
      100000,
      4294967295,
      13335,
      -5,
      2 ** 32,
    ]) {
      expect(asnProblem(bad), String(bad)).toBeDefined();
    }
  });
});
