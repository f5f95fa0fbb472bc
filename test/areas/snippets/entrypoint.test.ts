/** The rules as the `http_request_snippets` entry point ruleset (the spec's GET view). */
import { describe, expect, it } from 'vitest';
import { entrypointView, SNIPPETS_PHASE } from '../../../src/areas/snippets/index.ts';

describe('snippet rules as an entry point ruleset', () => {
  it('maps each rule to an execute rule naming its snippet', () => {
    const view = entrypointView('0123456789abcdef0123456789abcdef', [
      {
        id: 'a'.repeat(32),
        description: 'first',
        enabled: true,
        expression: 'true',
        snippet_name: 'one',
        last_updated: '2026-01-01T00:00:00.000Z',
      },
      {
        id: 'b'.repeat(32),
        description: '',
        enabled: false,
        expression: 'http.host eq "x"',
        snippet_name: 'two',
        last_updated: '2026-02-01T00:00:00.000Z',
      },
    ]);
    expect(view).toMatchObject({
      kind: 'zone',
      phase: SNIPPETS_PHASE,
      last_updated: '2026-02-01T00:00:00.000Z',
    });
    expect(view.id).toMatch(/^[0-9a-f]{32}$/);
    expect(view.rules).toEqual([
      expect.objectContaining({
        id: 'a'.repeat(32),
        action: 'execute',
        action_parameters: { id: 'one' },
        expression: 'true',
        enabled: true,
        description: 'first',
      }),
      expect.objectContaining({
        id: 'b'.repeat(32),
        action: 'execute',
        action_parameters: { id: 'two' },
        enabled: false,
      }),
    ]);
  });
});
