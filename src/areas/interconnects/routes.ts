/**
 * Thin handlers for `/accounts/{account_id}/cni/interconnects`, `/slots`, `/settings` and the
 * operator's link switch under `/_outpost/…`. Every answer except the operator's is bare JSON.
 */
import type { AreaContext } from '../../core/area.ts';
import { accounts, GLOBAL_SCOPE } from '../../core/accounts.ts';
import { ApiError, apiError, CODES, type ErrorItem } from '../../core/errors.ts';
import { UUID, uuid } from '../../core/ids.ts';
import type { Executor } from '../../core/storage/db.ts';
import { lockScope } from '../../core/storage/locks.ts';
import { randomBytes } from 'node:crypto';
import { asnProblem } from './addressing.ts';
import { SPEED, type Catalog, type Slot } from './facilities.ts';
import { requireAccount } from '../../core/accounts.ts';
import { bare, CNI_PERMISSIONS, listBody, noBody, windowOf } from './http.ts';
import { renderLoa } from './loa.ts';
import {
  CreateInterconnectBody,
  CreateInterconnectQuery,
  INTERCONNECT_NAME,
  LinkBody,
  ListInterconnectsQuery,
  ListSlotsQuery,
  LoaQuery,
  SettingsBody,
  type StoredInterconnect,
} from './schemas.ts';
import {
  cniSettings,
  cnis,
  findInterconnect,
  getInterconnect,
  interconnectView,
  interconnects,
  occupiedSlots,
  readSettings,
  SETTINGS_ID,
  SLOT_SCOPE,
  slotClaims,
  statusView,
} from './store.ts';

const PREFIX = '/accounts/:account_id/cni';
const tags = ['interconnects'];

/** The slot as answered (official form), plus the facility code and port the spec's filters use. */
export function slotView(slot: Slot, occupiedBy: string | undefined, caller: string) {
  return {
    id: slot.id,
    facility: {
      name: slot.facility.name,
      address: slot.facility.address,
      code: slot.facility.code,
    },
    occupied: occupiedBy !== undefined,
    site: slot.facility.site,
    speed: slot.speed,
    ccr_device_name: slot.device,
    port: slot.port,
    // Which account holds a slot is shown to that account only.
    ...(occupiedBy !== undefined && occupiedBy === caller ? { account: caller } : {}),
  };
}

function invalid(message: string): ErrorItem {
  return { code: CODES.cni_invalid.code, message };
}

export function mountInterconnectRoutes(ctx: AreaContext, catalog: Catalog): void {
  const { router, database, clock, config } = ctx;
  const db = database.db;

  /**
   * Every check a create makes, in order: body problems (all of them, 400), then conflicts with
   * what exists (409). Returns the record that would be stored.
   */
  async function plan(
    tx: Executor,
    accountId: string,
    body: CreateInterconnectBody,
  ): Promise<{ record: StoredInterconnect; slot: Slot }> {
    const problems: ErrorItem[] = [];
    if (body.bandwidth !== undefined || body.pairing_key !== undefined) {
      problems.push(
        invalid(
          'bandwidth, pairing_key: cloud-partner interconnects are not available; create a "direct" interconnect on a slot_id',
        ),
      );
    }
    if (body.type !== 'direct')
      problems.push(invalid(`type: only "direct" is supported, got ${JSON.stringify(body.type)}`));
    if (body.account !== undefined && body.account !== accountId) {
      problems.push(
        invalid(
          `account: must be the account in the path (${accountId}), got ${JSON.stringify(body.account)}`,
        ),
      );
    }
    let slot: Slot | undefined;
    if (body.slot_id === undefined)
      problems.push(invalid('slot_id: required (see GET /accounts/{account_id}/cni/slots)'));
    else if (!UUID.test(body.slot_id))
      problems.push(invalid(`slot_id: ${JSON.stringify(body.slot_id)} is not a slot id (a UUID)`));
    else {
      slot = catalog.slotById.get(body.slot_id);
      if (!slot) problems.push(invalid(`slot_id: no slot ${body.slot_id}`));
    }
    if (body.speed !== undefined && body.speed !== null && !SPEED.test(body.speed)) {
      problems.push(
        invalid(
          `speed: must be of the form <number>G (e.g. 10G), got ${JSON.stringify(body.speed)}`,
        ),
      );
    } else if (slot && body.speed && body.speed !== slot.speed) {
      problems.push(invalid(`speed: slot ${slot.id} is a ${slot.speed} port, not ${body.speed}`));
    }
    if (slot && body.facility !== undefined) {
      const f = body.facility.toLowerCase();
      if (f !== slot.facility.code.toLowerCase() && f !== slot.facility.name.toLowerCase()) {
        problems.push(
          invalid(
            `facility: slot ${slot.id} is in ${slot.facility.code} (${slot.facility.name}), not ${body.facility}`,
          ),
        );
      }
    }
    if (body.name !== undefined) {
      if (!INTERCONNECT_NAME.test(body.name)) {
        problems.push(
          invalid(
            'name: 1 to 100 letters, digits, ".", "_" or "-", starting with a letter or digit',
          ),
        );
      } else if (UUID.test(body.name)) {
        problems.push(invalid('name: must not have the form of an id (a UUID)'));
      }
    }
    if (problems.length > 0 || !slot) throw new ApiError(400, problems);

    const name = body.name ?? (await freeName(tx, accountId, slot));
    if (body.name !== undefined && (await findInterconnect(tx, accountId, body.name))) {
      throw apiError('cni_interconnect_exists', body.name);
    }
    if (await slotClaims.get(tx, SLOT_SCOPE, slot.id)) throw apiError('cni_slot_occupied', slot.id);

    const now = clock.now();
    const record: StoredInterconnect = {
      id: uuid(),
      account: accountId,
      name,
      type: 'direct',
      slot_id: slot.id,
      facility: slot.facility.code,
      speed: slot.speed,
      description: body.description ?? '',
      site: slot.facility.site,
      ccr_device_name: slot.device,
      virtual_port_reservation_id: uuid(),
      created_on: now.toISOString(),
      active_on: new Date(now.getTime() + config.cniProvisioningSeconds * 1000).toISOString(),
      link: { state: 'up', reason: null, changed_on: null },
    };
    return { record, slot };
  }

  async function freeName(tx: Executor, accountId: string, slot: Slot): Promise<string> {
    for (;;) {
      const name = `cni-${slot.facility.site}-${randomBytes(3).toString('hex')}`;
      if (!(await findInterconnect(tx, accountId, name))) return name;
    }
  }

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/slots`,
      operationId: 'list_slots',
      summary: 'List connection slots',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      query: ListSlotsQuery,
      tags,
    },
    async ({ params, query }) => {
      await requireAccount(db, params.account_id);
      const occupied = await occupiedSlots(db);
      const lower = (s: string | undefined) => s?.toLowerCase();
      const facility = lower(query.facility);
      const address = lower(query.address_contains);
      const matching = catalog.slots.filter(
        (s) =>
          (facility === undefined ||
            s.facility.code.toLowerCase() === facility ||
            s.facility.name.toLowerCase() === facility) &&
          (query.occupied === undefined || occupied.has(s.id) === query.occupied) &&
          (query.speed === undefined || s.speed.toLowerCase() === lower(query.speed)) &&
          (query.site === undefined || s.facility.site.toLowerCase() === lower(query.site)) &&
          (address === undefined ||
            s.facility.address.some((l) => l.toLowerCase().includes(address)) ||
            s.facility.address.join(', ').toLowerCase().includes(address)),
      );
      return listBody(
        matching.map((s) => slotView(s, occupied.get(s.id), params.account_id)),
        windowOf(query),
      );
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/slots/:slot`,
      operationId: 'get_slot',
      summary: 'Get a connection slot',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      params: { slot: 'uuid' },
      tags,
    },
    async ({ params }) => {
      await requireAccount(db, params.account_id);
      const slot = catalog.slotById.get(params.slot);
      if (!slot) throw apiError('cni_slot_not_found', params.slot);
      const claim = await slotClaims.get(db, SLOT_SCOPE, slot.id);
      return bare(slotView(slot, claim?.body.account, params.account_id));
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/interconnects`,
      operationId: 'list_interconnects',
      summary: 'List interconnects',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      query: ListInterconnectsQuery,
      tags,
    },
    async ({ params, query }) => {
      await requireAccount(db, params.account_id);
      const { items } = await interconnects.list(db, params.account_id);
      const now = clock.now();
      const matching = items
        .map((d) => d.body)
        .filter(
          (i) =>
            (query.site === undefined || i.site === query.site) &&
            (query.type === undefined || i.type === query.type),
        );
      return listBody(
        matching.map((i) => interconnectView(i, now)),
        windowOf(query),
        true,
      );
    },
  );

  router.add(
    {
      method: 'POST',
      path: `${PREFIX}/interconnects`,
      operationId: 'create_interconnect',
      summary: 'Create an interconnect (?validate_only=true: check only)',
      auth: { permission: CNI_PERMISSIONS, level: 'edit' },
      query: CreateInterconnectQuery,
      body: CreateInterconnectBody,
      tags,
    },
    async ({ params, query, body }) => {
      const accountId = params.account_id;
      await requireAccount(db, accountId);
      if (query.validate_only) {
        const { record } = await plan(db, accountId, body);
        return bare(interconnectView(record, clock.now()));
      }
      const record = await db.transaction().execute(async (tx) => {
        await lockScope(tx, database.dialect, `cni:${accountId}`);
        if (body.slot_id) await lockScope(tx, database.dialect, `cni-slot:${body.slot_id}`);
        const { record } = await plan(tx, accountId, body);
        const at = new Date(record.created_on);
        await slotClaims.insert(
          tx,
          SLOT_SCOPE,
          record.slot_id,
          { slot_id: record.slot_id, account: accountId, interconnect_id: record.id },
          at,
        );
        await interconnects.insert(tx, accountId, record.id, record, at);
        return record;
      });
      return bare(interconnectView(record, clock.now()));
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/interconnects/:icon`,
      operationId: 'get_interconnect',
      summary: 'Get an interconnect (by name or id)',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      tags,
    },
    async ({ params }) => {
      await requireAccount(db, params.account_id);
      const doc = await getInterconnect(db, params.account_id, params.icon);
      return bare(interconnectView(doc.body, clock.now()));
    },
  );

  router.add(
    {
      method: 'DELETE',
      path: `${PREFIX}/interconnects/:icon`,
      operationId: 'delete_interconnect',
      summary: 'Delete an interconnect and free its slot',
      auth: { permission: CNI_PERMISSIONS, level: 'edit' },
      tags,
    },
    async ({ params }) => {
      const accountId = params.account_id;
      await requireAccount(db, accountId);
      await db.transaction().execute(async (tx) => {
        await lockScope(tx, database.dialect, `cni:${accountId}`);
        const doc = await getInterconnect(tx, accountId, params.icon);
        const users = await cnis.list(tx, accountId, {
          filters: [{ field: 'interconnect_id', op: 'eq', value: doc.id }],
        });
        if (users.total > 0) throw apiError('cni_interconnect_in_use', doc.body.name, users.total);
        await slotClaims.delete(tx, SLOT_SCOPE, doc.body.slot_id);
        await interconnects.delete(tx, accountId, doc.id);
      });
      return noBody();
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/interconnects/:icon/status`,
      operationId: 'get_interconnect_status',
      summary: 'Interconnect status',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      tags,
    },
    async ({ params }) => {
      await requireAccount(db, params.account_id);
      const doc = await getInterconnect(db, params.account_id, params.icon);
      return bare(statusView(doc.body, clock.now()));
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/interconnects/:icon/loa`,
      operationId: 'get_interconnect_loa',
      summary: 'Letter of authorization (PDF)',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      query: LoaQuery,
      tags,
    },
    async ({ params, query }) => {
      await requireAccount(db, params.account_id);
      const doc = await getInterconnect(db, params.account_id, params.icon);
      const slot = catalog.slotById.get(doc.body.slot_id);
      // A catalog replaced since the interconnect was made may no longer list its slot.
      if (!slot) throw apiError('cni_slot_not_found', doc.body.slot_id);
      const customer = query.name ?? (await accountName(db, params.account_id));
      const pdf = await renderLoa({
        customer,
        interconnect: doc.body,
        slot,
        issuedAt: clock.now(),
      });
      return new Response(new Uint8Array(pdf), {
        headers: {
          'content-type': 'application/pdf',
          'content-disposition': `attachment; filename="loa-${doc.body.name}.pdf"`,
        },
      });
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/interconnects/:icon/loa/default`,
      operationId: 'get_interconnect_loa_default_name',
      summary: 'Name printed on the LOA by default',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      tags,
    },
    async ({ params }) => {
      await requireAccount(db, params.account_id);
      await getInterconnect(db, params.account_id, params.icon);
      return bare({ name: await accountName(db, params.account_id) });
    },
  );

  router.add(
    {
      method: 'GET',
      path: `${PREFIX}/settings`,
      operationId: 'get_settings',
      summary: 'Interconnect settings',
      auth: { permission: CNI_PERMISSIONS, level: 'read' },
      tags,
    },
    async ({ params }) => {
      await requireAccount(db, params.account_id);
      return bare(await readSettings(db, params.account_id));
    },
  );

  router.add(
    {
      method: 'PUT',
      path: `${PREFIX}/settings`,
      operationId: 'update_settings',
      summary: 'Update interconnect settings',
      auth: { permission: CNI_PERMISSIONS, level: 'edit' },
      body: SettingsBody,
      tags,
    },
    async ({ params, body }) => {
      const accountId = params.account_id;
      await requireAccount(db, accountId);
      const problem = asnProblem(body.default_asn);
      if (problem) throw apiError('cni_invalid', `default_asn: ${problem}`);
      return bare(
        await db.transaction().execute(async (tx) => {
          await lockScope(tx, database.dialect, `cni:${accountId}`);
          const doc = await cniSettings.get(tx, accountId, SETTINGS_ID);
          const current = await readSettings(tx, accountId);
          const next = { ...current, default_asn: body.default_asn };
          if (doc) await cniSettings.update(tx, doc, next, clock.now());
          else await cniSettings.insert(tx, accountId, SETTINGS_ID, next, clock.now());
          return next;
        }),
      );
    },
  );

  // --- operator ----------------------------------------------------------------------------------

  const operator = `/_outpost${PREFIX}/interconnects/:icon/link`;
  const requireOperator = async (isRoot: boolean, accountId: string) => {
    if (!isRoot) throw apiError('cni_operator_only');
    if (!(await accounts.get(db, GLOBAL_SCOPE, accountId)))
      throw apiError('account_not_found', accountId);
  };
  const linkView = (ic: StoredInterconnect) => ({
    interconnect: ic.name,
    id: ic.id,
    link: ic.link,
    provisioned_on: ic.active_on,
    ...statusView(ic, clock.now()),
  });

  router.add(
    {
      method: 'GET',
      path: operator,
      operationId: 'outpost_get_interconnect_link',
      summary: 'Operator: read the simulated link state',
      auth: 'authenticated',
      tags: ['operator'],
    },
    async ({ params, principal }) => {
      await requireOperator(principal!.isRoot, params.account_id);
      return linkView((await getInterconnect(db, params.account_id, params.icon)).body);
    },
  );

  router.add(
    {
      method: 'PUT',
      path: operator,
      operationId: 'outpost_set_interconnect_link',
      summary: 'Operator: set the link up, down or unhealthy',
      auth: 'authenticated',
      body: LinkBody,
      tags: ['operator'],
    },
    async ({ params, body, principal }) => {
      await requireOperator(principal!.isRoot, params.account_id);
      const updated = await db.transaction().execute(async (tx) => {
        await lockScope(tx, database.dialect, `cni:${params.account_id}`);
        const doc = await getInterconnect(tx, params.account_id, params.icon);
        const now = clock.now();
        const next: StoredInterconnect = {
          ...doc.body,
          link: {
            state: body.state,
            reason: body.state === 'up' ? null : (body.reason ?? null),
            changed_on: now.toISOString(),
          },
        };
        // Bringing a link up completes provisioning at once.
        if (body.state === 'up' && Date.parse(next.active_on) > now.getTime())
          next.active_on = now.toISOString();
        return (await interconnects.update(tx, doc, next, now)).body;
      });
      return linkView(updated);
    },
  );
}

async function accountName(db: Executor, accountId: string): Promise<string> {
  const doc = await accounts.get(db, GLOBAL_SCOPE, accountId);
  return doc?.body.name ?? accountId;
}
