import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ConfigError,
  DEFAULTS,
  helpText,
  loadConfig,
  OPTIONS,
  parseFlags,
} from '../../src/core/config.ts';

const dir = mkdtempSync(join(tmpdir(), 'outpost-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function configFile(content: unknown): string {
  const path = join(dir, `c-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

describe('parseFlags', () => {
  it('reads --name value, --name=value and bare switches, and keeps positionals', () => {
    expect(parseFlags(['serve', '--api-port', '0', '--data-dir=/tmp/x', '--help'])).toEqual({
      flags: { 'api-port': '0', 'data-dir': '/tmp/x', help: 'true' },
      rest: ['serve'],
    });
  });

  it('does not swallow the next flag as a value', () => {
    expect(parseFlags(['--help', '--api-port', '1']).flags).toEqual({
      help: 'true',
      'api-port': '1',
    });
  });
});

describe('loadConfig precedence: flags > env > config file > defaults', () => {
  it('uses the defaults when nothing is set', () => {
    const c = loadConfig({}, {});
    expect(c.apiPort).toBe(DEFAULTS.apiPort);
    expect(c.edgePort).toBe(DEFAULTS.edgePort);
    expect(c.host).toBe('127.0.0.1');
    expect(c.zoneActivation).toBe('immediate');
    expect(c.rateLimit).toBeUndefined();
    expect(c.dataDir).toBe(resolve(DEFAULTS.dataDir));
    expect(c.database).toBe(join(resolve(DEFAULTS.dataDir), 'outpost.db'));
  });

  it('takes a config file over the defaults', () => {
    const file = configFile({ apiPort: 9001, edgePort: 9002, logLevel: 'debug' });
    const c = loadConfig({ config: file }, {});
    expect(c.apiPort).toBe(9001);
    expect(c.edgePort).toBe(9002);
    expect(c.logLevel).toBe('debug');
  });

  it('finds the config file through OUTPOST_CONFIG too', () => {
    const file = configFile({ apiPort: 9101 });
    expect(loadConfig({}, { OUTPOST_CONFIG: file }).apiPort).toBe(9101);
  });

  it('takes the environment over the config file', () => {
    const file = configFile({ apiPort: 9001, edgePort: 9002 });
    const c = loadConfig({ config: file }, { OUTPOST_API_PORT: '9201' });
    expect(c.apiPort).toBe(9201);
    expect(c.edgePort).toBe(9002);
  });

  it('takes flags over the environment and the file', () => {
    const file = configFile({ apiPort: 9001, dataDir: '/from/file' });
    const c = loadConfig(
      { config: file, 'api-port': '9301' },
      { OUTPOST_API_PORT: '9201', OUTPOST_DATA_DIR: '/from/env' },
    );
    expect(c.apiPort).toBe(9301);
    expect(c.dataDir).toBe('/from/env');
    expect(c.database).toBe('/from/env/outpost.db');
  });

  it('ignores empty environment values', () => {
    expect(loadConfig({}, { OUTPOST_API_PORT: '' }).apiPort).toBe(DEFAULTS.apiPort);
  });

  it('applies programmatic overrides last', () => {
    expect(loadConfig({ 'api-port': '1' }, {}, { apiPort: 2 }).apiPort).toBe(2);
  });

  it('keeps an explicit database, PostgreSQL URL included', () => {
    expect(loadConfig({ database: 'postgres://u@h:5432/db' }, {}).database).toBe(
      'postgres://u@h:5432/db',
    );
    expect(loadConfig({}, { OUTPOST_DATABASE: '/var/x.db' }).database).toBe('/var/x.db');
  });

  it('parses lists, integers and the rate limit', () => {
    const c = loadConfig(
      { 'name-servers': 'a.example, b.example', 'body-limit': '1024', 'rate-limit': '10/5' },
      {},
    );
    expect(c.nameServers).toEqual(['a.example', 'b.example']);
    expect(c.bodyLimit).toBe(1024);
    expect(c.rateLimit).toEqual({ requests: 10, windowSeconds: 5 });
    expect(
      loadConfig({ config: configFile({ rateLimit: { requests: 3, windowSeconds: 1 } }) }, {})
        .rateLimit,
    ).toEqual({ requests: 3, windowSeconds: 1 });
  });

  it('does not share the default name-server list between configs', () => {
    const a = loadConfig({}, {});
    a.nameServers.push('mutated.example');
    expect(loadConfig({}, {}).nameServers).toEqual(DEFAULTS.nameServers);
  });
});

describe('loadConfig validation', () => {
  it('accepts port 0 and 65535', () => {
    expect(loadConfig({ 'api-port': '0' }, {}).apiPort).toBe(0);
    expect(loadConfig({ 'edge-port': '65535' }, {}).edgePort).toBe(65535);
  });

  it.each(['65536', '-1', 'abc', '80.5', ''])('rejects api port %j naming the flag', (value) => {
    expect(() => loadConfig({ 'api-port': value }, {})).toThrow(ConfigError);
    expect(() => loadConfig({ 'api-port': value }, {})).toThrow(/--api-port/);
  });

  it('names the environment variable or the file when they carry a bad port', () => {
    expect(() => loadConfig({}, { OUTPOST_EDGE_PORT: '70000' })).toThrow(/OUTPOST_EDGE_PORT/);
    const file = configFile({ apiPort: 'nope' });
    expect(() => loadConfig({ config: file }, {})).toThrow(/config file/);
    expect(() => loadConfig({ config: configFile({ apiPort: null }) }, {})).toThrow(ConfigError);
    expect(() => loadConfig({ config: configFile({ bodyLimit: '' }) }, {})).toThrow(ConfigError);
  });

  it('rejects an unknown flag', () => {
    expect(() => loadConfig({ 'api-prot': '1' }, {})).toThrow(ConfigError);
    expect(() => loadConfig({ 'api-prot': '1' }, {})).toThrow(/unknown flag --api-prot/);
  });

  it('rejects a malformed rate limit', () => {
    expect(() => loadConfig({ 'rate-limit': 'fast' }, {})).toThrow(/<requests>\/<seconds>/);
  });

  it('rejects a bad zone activation mode and a malformed account id', () => {
    expect(() => loadConfig({ 'zone-activation': 'later' }, {})).toThrow(ConfigError);
    expect(loadConfig({ 'zone-activation': 'manual' }, {}).zoneActivation).toBe('manual');
    expect(() => loadConfig({}, { OUTPOST_ACCOUNT_ID: 'not-hex' })).toThrow(/32 lowercase hex/);
    expect(
      loadConfig({}, { OUTPOST_ACCOUNT_ID: '023e105f4ecef8ad9ca31a8372d0c353' }).accountId,
    ).toBe('023e105f4ecef8ad9ca31a8372d0c353');
  });

  it('reports a missing or invalid config file', () => {
    expect(() => loadConfig({ config: join(dir, 'missing.json') }, {})).toThrow(/does not exist/);
    expect(() => loadConfig({ config: configFile('{oops') }, {})).toThrow(/not valid JSON/);
  });
});

describe('helpText', () => {
  it('lists every option with its flag and environment variable', () => {
    const text = helpText();
    for (const o of OPTIONS) {
      expect(text).toContain(`--${o.flag}`);
      expect(text).toContain(o.env);
    }
    expect(text).toContain('outpost serve');
  });
});
