/**
 * The benchmark's baseline: a bare `node:http` server storing DNS-record-like JSON documents in
 * the same engine as Outpost (better-sqlite3 in WAL with synchronous=NORMAL, or a pg Pool of 10),
 * in a table shaped like Outpost's `documents` (scope + id key, JSON body, a few indexed extracted
 * columns, timestamps), but with no framework, validation, authentication or transactions.
 *
 *   node --import tsx bench/baseline-server.ts --engine sqlite --file <path>
 *   node --import tsx bench/baseline-server.ts --engine postgres --url <postgres://…> --schema <name>
 *
 * Routes (same paths as Outpost, so the load generator does not care which side it talks to):
 *   POST /client/v4/zones/:zone/dns_records          insert, answer the record
 *   GET  /client/v4/zones/:zone/dns_records/:id      one record
 *   GET  /client/v4/zones/:zone/dns_records?page&per_page   LIMIT/OFFSET page + COUNT(*)
 *   POST /_bench/trim {zone_id, keep}                keep the first `keep` records (benchmark setup)
 *
 * Prints `baseline listening http://127.0.0.1:<port>` when ready; exits on SIGTERM/SIGINT or when
 * its stdin closes (the benchmark process went away).
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';

interface Row {
  zone_id: string;
  id: string;
  body: string;
  type: string;
  name: string;
  content: string;
  proxied: string;
  created_on: string;
}

interface Store {
  insert(row: Row): Promise<void>;
  get(zoneId: string, id: string): Promise<string | undefined>;
  list(zoneId: string, limit: number, offset: number): Promise<{ bodies: string[]; total: number }>;
  trim(zoneId: string, keep: number): Promise<string[]>;
  close(): Promise<void>;
}

const TABLE_SQL = [
  `CREATE TABLE records (
     zone_id text NOT NULL,
     id text NOT NULL,
     body text NOT NULL,
     type text,
     name text,
     content text,
     proxied text,
     created_on text NOT NULL,
     modified_on text NOT NULL,
     PRIMARY KEY (zone_id, id)
   )`,
  // As many secondary indexes as Outpost's table: id alone, three scoped filter columns, one global.
  'CREATE INDEX records_id ON records (id)',
  'CREATE INDEX records_zone_type ON records (zone_id, type)',
  'CREATE INDEX records_zone_name ON records (zone_id, name)',
  'CREATE INDEX records_zone_content ON records (zone_id, content)',
  'CREATE INDEX records_type ON records (type)',
];

const INSERT_COLUMNS = '(zone_id, id, body, type, name, content, proxied, created_on, modified_on)';
const ORDER = 'ORDER BY created_on, id';

function openSqlite(file: string): Store {
  const db = new BetterSqlite3(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  for (const stmt of TABLE_SQL) db.exec(stmt);
  const insert = db.prepare(
    `INSERT INTO records ${INSERT_COLUMNS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const get = db.prepare('SELECT body FROM records WHERE zone_id = ? AND id = ?').pluck();
  const page = db
    .prepare(`SELECT body FROM records WHERE zone_id = ? ${ORDER} LIMIT ? OFFSET ?`)
    .pluck();
  const count = db.prepare('SELECT count(*) FROM records WHERE zone_id = ?').pluck();
  const trim = db.prepare(
    `DELETE FROM records WHERE zone_id = ? AND id NOT IN (SELECT id FROM records WHERE zone_id = ? ${ORDER} LIMIT ?)`,
  );
  const ids = db.prepare(`SELECT id FROM records WHERE zone_id = ? ${ORDER}`).pluck();
  return {
    async insert(r) {
      insert.run(
        r.zone_id,
        r.id,
        r.body,
        r.type,
        r.name,
        r.content,
        r.proxied,
        r.created_on,
        r.created_on,
      );
    },
    async get(zoneId, id) {
      return get.get(zoneId, id) as string | undefined;
    },
    async list(zoneId, limit, offset) {
      const bodies = page.all(zoneId, limit, offset) as string[];
      return { bodies, total: count.get(zoneId) as number };
    },
    async trim(zoneId, keep) {
      trim.run(zoneId, zoneId, keep);
      return ids.all(zoneId) as string[];
    },
    async close() {
      db.close();
    },
  };
}

function quoteIdent(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/i.test(name)) throw new Error(`invalid schema name ${name}`);
  return `"${name}"`;
}

async function openPostgres(url: string, schema: string): Promise<Store> {
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  try {
    await setup.query(`CREATE SCHEMA ${quoteIdent(schema)}`);
    await setup.query(`SET search_path = ${quoteIdent(schema)}`);
    for (const stmt of TABLE_SQL) await setup.query(stmt);
  } finally {
    await setup.end();
  }
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    options: `-c search_path=${quoteIdent(schema)}`,
  });
  pool.on('error', (err) =>
    process.stderr.write(`baseline: idle pg client error: ${err.message}\n`),
  );
  return {
    async insert(r) {
      await pool.query(
        `INSERT INTO records ${INSERT_COLUMNS} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
        [r.zone_id, r.id, r.body, r.type, r.name, r.content, r.proxied, r.created_on, r.created_on],
      );
    },
    async get(zoneId, id) {
      const res = await pool.query('SELECT body FROM records WHERE zone_id = $1 AND id = $2', [
        zoneId,
        id,
      ]);
      return res.rows[0]?.body as string | undefined;
    },
    async list(zoneId, limit, offset) {
      // One after the other, as Outpost does (count, then the page).
      const count = await pool.query('SELECT count(*) AS n FROM records WHERE zone_id = $1', [
        zoneId,
      ]);
      const page = await pool.query(
        `SELECT body FROM records WHERE zone_id = $1 ${ORDER} LIMIT $2 OFFSET $3`,
        [zoneId, limit, offset],
      );
      return { bodies: page.rows.map((r) => r.body as string), total: Number(count.rows[0].n) };
    },
    async trim(zoneId, keep) {
      await pool.query(
        `DELETE FROM records WHERE zone_id = $1 AND id NOT IN (SELECT id FROM records WHERE zone_id = $1 ${ORDER} LIMIT $2)`,
        [zoneId, keep],
      );
      const res = await pool.query(`SELECT id FROM records WHERE zone_id = $1 ${ORDER}`, [zoneId]);
      return res.rows.map((r) => r.id as string);
    },
    async close() {
      await pool.end();
    },
  };
}

function args(argv: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--') && i + 1 < argv.length) out[argv[i].slice(2)] = argv[++i];
  }
  return out;
}

const ROUTE =
  /^\/client\/v4\/zones\/([0-9a-f]{32})\/dns_records(?:\/([0-9a-f]{32}))?\/?(?:\?(.*))?$/;
const ZONE_NAME = 'baseline.example.com';

function envelope(result: unknown, extra?: Record<string, unknown>): string {
  return JSON.stringify({ result, success: true, errors: [], messages: [], ...extra });
}

function failure(status: number, message: string): [number, string] {
  return [
    status,
    JSON.stringify({
      result: null,
      success: false,
      errors: [{ code: 1000 + status, message }],
      messages: [],
    }),
  ];
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

async function handle(store: Store, req: http.IncomingMessage): Promise<[number, string]> {
  const url = req.url ?? '/';
  if (req.method === 'POST' && url === '/_bench/trim') {
    const { zone_id, keep } = JSON.parse(await readBody(req)) as { zone_id: string; keep: number };
    return [200, envelope({ ids: await store.trim(zone_id, keep) })];
  }
  const m = ROUTE.exec(url);
  if (!m) return failure(404, 'no route');
  const [, zoneId, id, search] = m;
  if (req.method === 'POST' && !id) {
    const input = JSON.parse(await readBody(req)) as {
      type: string;
      name: string;
      content: string;
      ttl?: number;
      proxied?: boolean;
    };
    const now = new Date().toISOString();
    const record = {
      type: input.type,
      name: `${input.name}.${ZONE_NAME}`,
      content: input.content,
      ttl: input.ttl ?? 1,
      proxied: input.proxied ?? false,
      proxiable: true,
      comment: null,
      tags: [],
      settings: {},
      id: randomBytes(16).toString('hex'),
      zone_id: zoneId,
      zone_name: ZONE_NAME,
      created_on: now,
      modified_on: now,
      meta: { auto_added: false, managed_by_apps: false, managed_by_argo_tunnel: false },
    };
    await store.insert({
      zone_id: zoneId,
      id: record.id,
      body: JSON.stringify(record),
      type: record.type,
      name: record.name,
      content: record.content,
      proxied: String(record.proxied),
      created_on: now,
    });
    return [200, envelope(record)];
  }
  if (req.method === 'GET' && id) {
    const body = await store.get(zoneId, id);
    if (body === undefined) return failure(404, 'record not found');
    return [200, envelope(JSON.parse(body))];
  }
  if (req.method === 'GET') {
    const q = new URLSearchParams(search ?? '');
    const perPage = Math.min(5000, Math.max(1, Number(q.get('per_page') ?? 100) || 100));
    const page = Math.max(1, Number(q.get('page') ?? 1) || 1);
    const { bodies, total } = await store.list(zoneId, perPage, (page - 1) * perPage);
    const items = bodies.map((b) => JSON.parse(b) as unknown);
    return [
      200,
      envelope(items, {
        result_info: {
          page,
          per_page: perPage,
          count: items.length,
          total_count: total,
          total_pages: Math.max(1, Math.ceil(total / perPage)),
        },
      }),
    ];
  }
  return failure(405, 'method not allowed');
}

async function main(): Promise<void> {
  const a = args(process.argv.slice(2));
  let store: Store;
  if (a.engine === 'sqlite' && a.file) store = openSqlite(a.file);
  else if (a.engine === 'postgres' && a.url && a.schema)
    store = await openPostgres(a.url, a.schema);
  else
    throw new Error(
      'usage: baseline-server --engine sqlite --file <path> | --engine postgres --url <url> --schema <name>',
    );

  const server = http.createServer((req, res) => {
    handle(store, req).then(
      ([status, body]) => {
        res.writeHead(status, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        });
        res.end(body);
      },
      (err: Error) => {
        const [status, body] = failure(500, err.message);
        res.writeHead(status, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        });
        res.end(body);
      },
    );
  });
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`baseline listening http://127.0.0.1:${port}\n`);

  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    server.close();
    server.closeAllConnections();
    store.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  // The benchmark keeps our stdin open; when it closes, the benchmark is gone.
  process.stdin.on('end', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
}

main().catch((err: unknown) => {
  process.stderr.write(`baseline: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
