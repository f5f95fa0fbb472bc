/** Bodies checked against the official OpenAPI document's response schemas. */
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createZone, startTestServer, type TestServer } from '../../support/server.ts';

const CONTRACT = '/work/shared/contract/openapi-subset.json';
const doc = JSON.parse(readFileSync(CONTRACT, 'utf8'));

/** Local `#/components/…` refs point into the document registered as `contract`. */
function prefixRefs(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(prefixRefs);
  if (!node || typeof node !== 'object') return node;
  return Object.fromEntries(
    Object.entries(node).map(([k, v]) => [
      k,
      k === '$ref' && typeof v === 'string' && v.startsWith('#/') ? `contract${v}` : prefixRefs(v),
    ]),
  );
}

function schemaFor(operationId: string) {
  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addFormat('date-time', (s: string) => !Number.isNaN(Date.parse(s)) && /T/.test(s));
  ajv.addFormat('uuid', /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  ajv.addFormat('A.B.C.D/N', /^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/);
  ajv.addSchema(doc, 'contract');
  for (const methods of Object.values<Record<string, any>>(doc.paths)) {
    for (const op of Object.values<any>(methods)) {
      if (op?.operationId === operationId) {
        return ajv.compile(
          prefixRefs(op.responses['200'].content['application/json'].schema) as object,
        );
      }
    }
  }
  throw new Error(`${operationId} is not in the contract`);
}

function expectValid(operationId: string, body: unknown): void {
  const validate = schemaFor(operationId);
  validate(body);
  expect(validate.errors ?? [], `${operationId}: ${JSON.stringify(validate.errors)}`).toEqual([]);
}

let t: TestServer;
let base: string;
beforeAll(async () => {
  t = await startTestServer({ cniProvisioningSeconds: 0 });
  base = `/accounts/${t.accountId}/cni`;
});
afterAll(() => t.stop());

describe('official response schemas', () => {
  it('the validator really checks', () => {
    const validate = schemaFor('get_settings');
    expect(validate({ default_asn: 'x' })).toBe(false);
  });

  it('slots, status, LOA default name, settings and CNI objects validate', async () => {
    const slots = await t.call('GET', `${base}/slots?limit=3`);
    expectValid('list_slots', slots.body);
    const slot = slots.body.items[0];
    expectValid('get_slot', (await t.call('GET', `${base}/slots/${slot.id}`)).body);

    const ic = (
      await t.call('POST', `${base}/interconnects`, {
        account: t.accountId,
        type: 'direct',
        slot_id: slot.id,
        name: 'contract',
      })
    ).body;
    expectValid(
      'get_interconnect_status',
      (await t.call('GET', `${base}/interconnects/contract/status`)).body,
    );
    await t.call('PUT', `/_outpost${base}/interconnects/contract/link`, {
      state: 'down',
      reason: 'test',
    });
    expectValid(
      'get_interconnect_status',
      (await t.call('GET', `${base}/interconnects/contract/status`)).body,
    );
    expectValid(
      'get_interconnect_loa_default_name',
      (await t.call('GET', `${base}/interconnects/contract/loa/default`)).body,
    );

    expectValid('get_settings', (await t.call('GET', `${base}/settings`)).body);
    expectValid(
      'update_settings',
      (await t.call('PUT', `${base}/settings`, { default_asn: 64512 })).body,
    );

    const cni = await t.call('POST', `${base}/cnis`, {
      account: t.accountId,
      interconnect: ic.name,
      magic: { conduit_name: 'k', description: '', mtu: 1500 },
    });
    expectValid('create_cni', cni.body);
    expectValid('get_cni', (await t.call('GET', `${base}/cnis/${cni.body.id}`)).body);
    expectValid(
      'update_cni',
      (await t.call('PUT', `${base}/cnis/${cni.body.id}`, { vlan: 7 })).body,
    );
    expectValid('list_cnis', (await t.call('GET', `${base}/cnis`)).body);
  });

  it('smart routing GET and PATCH validate', async () => {
    const zone = await createZone(t, 'contract-smart-routing.test');
    expectValid(
      'argo-smart-routing-get-argo-smart-routing-setting',
      (await t.call('GET', `/zones/${zone.id}/argo/smart_routing`)).body,
    );
    expectValid(
      'argo-smart-routing-patch-argo-smart-routing-setting',
      (await t.call('PATCH', `/zones/${zone.id}/acceleration/smart_routing`, { value: 'on' })).body,
    );
  });
});
