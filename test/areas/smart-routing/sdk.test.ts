import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToken, createZone, startTestServer, type TestServer } from '../../support/server.ts';
import { Cloudflare, sdk } from '../../support/sdk.ts';

let t: TestServer;
let cf: Cloudflare;
let zone_id: string;

beforeAll(async () => {
  t = await startTestServer();
  cf = sdk(t);
  zone_id = (await createZone(t, 'sdk-smart-routing.test')).id;
});
afterAll(() => t.stop());

describe('official client: argo.smartRouting', () => {
  it('get → edit on → edit off, unwrapped results', async () => {
    const initial = await cf.argo.smartRouting.get({ zone_id });
    expect(initial).toMatchObject({ id: 'smart_routing', value: 'off', editable: true });
    const on = await cf.argo.smartRouting.edit({ zone_id, value: 'on' });
    expect(on).toMatchObject({ id: 'smart_routing', value: 'on', editable: true });
    expect(Date.parse(on.modified_on!)).not.toBeNaN();
    expect((await cf.argo.smartRouting.get({ zone_id })).value).toBe('on');
    const off = await cf.argo.smartRouting.edit({ zone_id, value: 'off' });
    expect(off.value).toBe('off');
  });

  it('typed errors: bad value 400, read-only token 403, unknown zone 404', async () => {
    const bad = await cf.argo.smartRouting
      .edit({ zone_id, value: 'sideways' as 'on' })
      .catch((e) => e);
    expect(bad).toBeInstanceOf(Cloudflare.BadRequestError);
    const reader = await createToken(t, ['Zone Settings Read'], {
      [`com.cloudflare.api.account.${t.accountId}`]: '*',
    });
    const ro = sdk(t, { apiToken: reader });
    expect((await ro.argo.smartRouting.get({ zone_id })).editable).toBe(false);
    await expect(ro.argo.smartRouting.edit({ zone_id, value: 'on' })).rejects.toBeInstanceOf(
      Cloudflare.PermissionDeniedError,
    );
    await expect(cf.argo.smartRouting.get({ zone_id: 'e'.repeat(32) })).rejects.toBeInstanceOf(
      Cloudflare.NotFoundError,
    );
  });

  it('a zone without billing refuses the edit with a PermissionDeniedError carrying the code', async () => {
    await t.call('PUT', `/_outpost/accounts/${t.accountId}/billing`, { configured: false });
    try {
      const err = await cf.argo.smartRouting.edit({ zone_id, value: 'on' }).catch((e) => e);
      expect(err).toBeInstanceOf(Cloudflare.PermissionDeniedError);
      expect(err.errors[0].code).toBe(1651);
      expect((await cf.argo.smartRouting.get({ zone_id })).editable).toBe(false);
    } finally {
      await t.call('PUT', `/_outpost/accounts/${t.accountId}/billing`, { configured: true });
    }
  });
});
