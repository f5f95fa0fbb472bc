import { describe, expect, it } from 'vitest';
import type { ClientHttp2Session } from 'node:http2';
import type { Socket } from 'node:net';
import { ConnectionRegistry, type LiveConnection } from '../../../src/areas/tunnels/registry.ts';

function fakeConn(id: string, clientId: string, connIndex: number): LiveConnection {
  const state = { closed: false, destroyed: false };
  const session = Object.assign(state, {
    destroy: () => void (state.destroyed = true),
  }) as unknown as ClientHttp2Session;
  const socket = { destroy() {} } as unknown as Socket;
  return {
    id,
    tunnelId: 'tun',
    accountId: 'acc',
    clientId,
    clientVersion: '1',
    arch: 'linux_x64',
    features: [],
    connIndex,
    haConnections: 2,
    originIp: '127.0.0.1',
    openedAt: new Date(1000 + connIndex).toISOString(),
    coloName: 'outpost',
    session,
    socket,
    ready: false,
    configVersion: 0,
    gone: false,
  };
}

describe('tunnel status follows the connections', () => {
  it('inactive → healthy → degraded → healthy → down, with transitions and pending reconnects', () => {
    let now = 0;
    const transitions: string[] = [];
    const r = new ConnectionRegistry({
      pendingMs: 60_000,
      now: () => now,
      transition: (_t, _a, to) => transitions.push(to),
    });
    expect(r.status('tun', false)).toBe('inactive');

    const a = fakeConn('a', 'c1', 0);
    const b = fakeConn('b', 'c1', 1);
    r.add(a);
    expect(r.status('tun', false)).toBe('inactive');
    r.markReady(a);
    r.add(b);
    r.markReady(b);
    expect(r.status('tun', false)).toBe('healthy');
    expect(transitions).toEqual(['active']);

    // One connection lost: still serving, but degraded until the slot comes back.
    r.remove(a, true);
    expect(r.status('tun', false)).toBe('degraded');
    expect(r.connections('tun').map((c) => [c.id, c.is_pending_reconnect])).toEqual([
      ['a', true],
      ['b', false],
    ]);
    const a2 = fakeConn('a2', 'c1', 0);
    r.add(a2);
    r.markReady(a2);
    expect(r.status('tun', false)).toBe('healthy');
    expect(r.connections('tun').some((c) => c.is_pending_reconnect)).toBe(false);

    // Lost entries expire.
    r.remove(a2, true);
    now += 61_000;
    expect(r.status('tun', false)).toBe('healthy');

    r.remove(b, false);
    expect(r.status('tun', false)).toBe('down');
    expect(transitions).toEqual(['active', 'inactive']);
    expect(r.pick('tun', 'acc')).toBeUndefined();
  });

  it('picks ready connections of the right account in turn; disconnect closes them', () => {
    const r = new ConnectionRegistry({ pendingMs: 1000, now: () => 0, transition: () => {} });
    const conns = ['x', 'y', 'z'].map((id, i) => fakeConn(id, 'c', i));
    for (const c of conns) {
      r.add(c);
      r.markReady(c);
    }
    const seen = new Set(Array.from({ length: 6 }, () => r.pick('tun', 'acc')!.id));
    expect(seen).toEqual(new Set(['x', 'y', 'z']));
    expect(r.pick('tun', 'other-account')).toBeUndefined();
    expect(r.clients('tun')).toMatchObject([
      { id: 'c', conns: [{ id: 'x' }, { id: 'y' }, { id: 'z' }] },
    ]);
    expect(r.disconnect('tun')).toBe(3);
    expect(conns.every((c) => c.session.destroyed)).toBe(true);
    expect(r.status('tun', true)).toBe('down');
  });
});
