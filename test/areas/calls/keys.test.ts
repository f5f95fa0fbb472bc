/**
 * The relay's in-memory key index against a real database: what the TURN server is told for a
 * username, and that a revoke, key deletion or key creation made while a periodic refresh is reading the
 * database is not undone when that refresh lands.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { credentialFor, RelayIndex, turnKeys } from '../../../src/areas/calls/keys.ts';
import { startTestServer, type TestServer } from '../../support/server.ts';

let t: TestServer;
let key: { uid: string; key: string };

beforeAll(async () => {
  t = await startTestServer();
  const res = await t.call('POST', `/accounts/${t.accountId}/calls/turn_keys`, { name: 'index' });
  key = res.body.result;
});
afterAll(() => t?.stop());

const db = () => t.server.database.db;
const username = (label = `${'x'}.${Math.random().toString(16).slice(2, 10)}`) =>
  `${Math.floor(Date.now() / 1000) + 600}:${key.uid}.${label}`;

describe('RelayIndex', () => {
  it('gives the key secret for its usernames, every secret for foreign labels, none for junk', async () => {
    const index = new RelayIndex();
    await index.refresh(db());
    const u = username();
    expect(index.secretsFor(u)).toEqual([key.key]);
    expect(credentialFor(key.key, u)).toHaveLength(28);
    expect(index.secretsFor(`${Math.floor(Date.now() / 1000) + 600}:alice`)).toContain(key.key);
    expect(
      index.secretsFor(`${Math.floor(Date.now() / 1000) + 600}:${'0'.repeat(32)}.abc`),
    ).toEqual([]);
    expect(index.secretsFor('no-expiry')).toEqual([]);
  });

  it('a revoke made while a refresh is reading is not undone by that refresh', async () => {
    const index = new RelayIndex();
    await index.refresh(db());
    const u = username();
    // The refresh reads the database before the revocation is stored (here: never stored).
    const refreshing = index.refresh(db());
    index.revoke(u);
    await refreshing;
    expect(index.secretsFor(u)).toEqual([]);
  });

  it('a key deletion made while a refresh is reading is not undone by that refresh', async () => {
    const res = await t.call('POST', `/accounts/${t.accountId}/calls/turn_keys`, {
      name: 'doomed',
    });
    const doomed = res.body.result as { uid: string; key: string };
    const index = new RelayIndex();
    await index.refresh(db());
    const u = `${Math.floor(Date.now() / 1000) + 600}:${doomed.uid}.abc`;
    expect(index.secretsFor(u)).toEqual([doomed.key]);
    // The refresh reads the key before its row is deleted.
    const refreshing = index.refresh(db());
    index.forgetKey(doomed.uid);
    await refreshing;
    expect(index.secretsFor(u)).toEqual([]);
    expect(index.secretOf(doomed.uid)).toBeUndefined();
  });
  it('a key created while an older refresh is reading survives that refresh landing late', async () => {
    const index = new RelayIndex();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    // The first read of the key table finishes at once but is handed back only when the gate opens.
    const readKeys = turnKeys.all.bind(turnKeys);
    const spy = vi.spyOn(turnKeys, 'all').mockImplementationOnce(async (...args) => {
      const rows = await readKeys(...args);
      await gate;
      return rows;
    });
    try {
      const stale = index.refresh(db());
      const res = await t.call('POST', `/accounts/${t.accountId}/calls/turn_keys`, { name: 'late' });
      const late = res.body.result as { uid: string; key: string };
      await index.refresh(db());
      release();
      await stale;
      const u = `${Math.floor(Date.now() / 1000) + 600}:${late.uid}.abc`;
      expect(index.secretsFor(u)).toEqual([late.key]);
    } finally {
      spy.mockRestore();
    }
  });
});

describe('revocation rows', () => {
  const revoke = (username: string) =>
    fetch(`${t.url}/v1/turn/keys/${key.uid}/credentials/revoke`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ username }),
    });

  it('concurrent revokes of one username all answer 204', async () => {
    const u = username();
    const answers = await Promise.all(Array.from({ length: 8 }, () => revoke(u)));
    expect(answers.map((r) => r.status)).toEqual(Array(8).fill(204));
  });

  it('pruneExpired drops only rows of usernames past their expiry', async () => {
    const nowSec = Math.floor(Date.now() / 1000);
    const live = username();
    const dead = `${nowSec - 10}:${key.uid}.dead`;
    expect((await revoke(live)).status).toBe(204);
    expect((await revoke(dead)).status).toBe(204);
    const index = new RelayIndex();
    expect(await index.pruneExpired(db(), nowSec)).toBeGreaterThanOrEqual(1);
    await index.refresh(db());
    expect(index.secretsFor(live)).toEqual([]);
    expect(await index.pruneExpired(db(), nowSec)).toBe(0);
  });
});
