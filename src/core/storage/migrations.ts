/**
 * Numbered schema migrations. Both dialects run the same list; a migration may branch on the
 * dialect where SQL differs. Applied migrations are recorded by Kysely's migrator.
 */
import { Migrator, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

// The dialect is passed so that a later migration can branch where SQL differs.
function migrations(dialect: Dialect): Record<string, Migration> {
  return {
    '0001_documents': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('documents')
          .addColumn('kind', 'text', (c) => c.notNull())
          .addColumn('scope_id', 'text', (c) => c.notNull())
          .addColumn('id', 'text', (c) => c.notNull())
          .addColumn('body', 'text', (c) => c.notNull())
          .addColumn('created_on', 'text', (c) => c.notNull())
          .addColumn('modified_on', 'text', (c) => c.notNull())
          .addColumn('version', 'integer', (c) => c.notNull())
          .addColumn('k1', 'text')
          .addColumn('k2', 'text')
          .addColumn('k3', 'text')
          .addColumn('k4', 'text')
          .addPrimaryKeyConstraint('documents_pk', ['kind', 'scope_id', 'id'])
          .execute();
        // Lookups by id alone (a zone by its id, a token by its id) and by indexed filter columns.
        await db.schema.createIndex('documents_kind_id').on('documents').columns(['kind', 'id']).execute();
        for (const k of ['k1', 'k2', 'k3']) {
          await db.schema
            .createIndex(`documents_kind_scope_${k}`)
            .on('documents')
            .columns(['kind', 'scope_id', k])
            .execute();
        }
        await db.schema.createIndex('documents_kind_k1').on('documents').columns(['kind', 'k1']).execute();
        await db.schema
          .createTable('settings')
          .addColumn('key', 'text', (c) => c.primaryKey())
          .addColumn('value', 'text', (c) => c.notNull())
          .execute();
      },
    },
    '0002_documents_created_order': {
      // Lists page in creation order by default: without this index every page sorts the scope.
      async up(db: Kysely<unknown>) {
        await db.schema
          .createIndex('documents_kind_scope_created')
          .on('documents')
          .columns(['kind', 'scope_id', 'created_on', 'id'])
          .execute();
      },
    },
    '0003_workflows': {
      // Workflow instances, step results, timers and events are hot and relational: each step of
      // every running instance writes a row, and the scheduler scans due timers by time. They get
      // their own tables; `iid` is an internal key, new for every (re)created instance id, so rows
      // of a deleted instance can never mix with a later one of the same id.
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('wf_instances')
          .addColumn('iid', 'text', (c) => c.primaryKey())
          .addColumn('account_id', 'text', (c) => c.notNull())
          .addColumn('workflow', 'text', (c) => c.notNull())
          .addColumn('id', 'text', (c) => c.notNull())
          .addColumn('workflow_id', 'text', (c) => c.notNull())
          .addColumn('version_id', 'text', (c) => c.notNull())
          .addColumn('status', 'text', (c) => c.notNull())
          .addColumn('generation', 'integer', (c) => c.notNull())
          .addColumn('params', 'text', (c) => c.notNull())
          .addColumn('output', 'text')
          .addColumn('error', 'text')
          .addColumn('trigger_source', 'text', (c) => c.notNull())
          .addColumn('created_on', 'text', (c) => c.notNull())
          .addColumn('modified_on', 'text', (c) => c.notNull())
          .addColumn('started_on', 'text')
          .addColumn('ended_on', 'text')
          .addColumn('queued_at', 'bigint', (c) => c.notNull())
          .addColumn('priority', 'integer', (c) => c.notNull())
          .addColumn('paused_at', 'bigint')
          .addColumn('success_retention', 'bigint')
          .addColumn('error_retention', 'bigint')
          .addColumn('expires_at', 'bigint')
          .addColumn('schedule', 'text')
          .execute();
        await db.schema.createIndex('wf_instances_name').unique().on('wf_instances').columns(['account_id', 'workflow', 'id']).execute();
        await db.schema.createIndex('wf_instances_list').on('wf_instances').columns(['account_id', 'workflow', 'created_on']).execute();
        await db.schema.createIndex('wf_instances_queue').on('wf_instances').columns(['status', 'account_id', 'workflow', 'priority', 'queued_at']).execute();
        await db.schema.createIndex('wf_instances_expiry').on('wf_instances').columns(['expires_at']).execute();
        await db.schema
          .createTable('wf_steps')
          .addColumn('iid', 'text', (c) => c.notNull())
          .addColumn('generation', 'integer', (c) => c.notNull())
          .addColumn('key', 'text', (c) => c.notNull())
          .addColumn('seq', 'bigint', (c) => c.notNull())
          .addColumn('type', 'text', (c) => c.notNull())
          .addColumn('name', 'text', (c) => c.notNull())
          .addColumn('count', 'integer', (c) => c.notNull())
          .addColumn('state', 'text', (c) => c.notNull())
          .addColumn('output', 'text')
          .addColumn('error', 'text')
          .addColumn('config', 'text')
          .addColumn('attempts', 'text')
          .addColumn('event_type', 'text')
          .addColumn('start_at', 'text', (c) => c.notNull())
          .addColumn('end_at', 'text')
          .addPrimaryKeyConstraint('wf_steps_pk', ['iid', 'generation', 'key'])
          .execute();
        await db.schema
          .createTable('wf_timers')
          .addColumn('iid', 'text', (c) => c.notNull())
          .addColumn('key', 'text', (c) => c.notNull())
          .addColumn('generation', 'integer', (c) => c.notNull())
          .addColumn('kind', 'text', (c) => c.notNull())
          .addColumn('due_at', 'bigint', (c) => c.notNull())
          .addPrimaryKeyConstraint('wf_timers_pk', ['iid', 'key'])
          .execute();
        await db.schema.createIndex('wf_timers_due').on('wf_timers').columns(['due_at']).execute();
        await db.schema
          .createTable('wf_events')
          .addColumn('eid', 'text', (c) => c.primaryKey())
          .addColumn('iid', 'text', (c) => c.notNull())
          .addColumn('type', 'text', (c) => c.notNull())
          .addColumn('payload', 'text', (c) => c.notNull())
          .addColumn('seq', 'bigint', (c) => c.notNull())
          .addColumn('consumed', 'integer', (c) => c.notNull())
          .addColumn('created_on', 'text', (c) => c.notNull())
          .execute();
        await db.schema.createIndex('wf_events_pending').on('wf_events').columns(['iid', 'consumed', 'type', 'seq']).execute();
      },
    },
    '0004_kv_values': {
      // Key-value namespaces' entries: one row per key, the value as bytes, metadata as JSON text,
      // expiration in seconds since the epoch. Keys list in byte order within a namespace.
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('kv_values')
          .addColumn('namespace_id', 'text', (c) => c.notNull())
          .addColumn('key', 'text', (c) => c.notNull())
          .addColumn('value', dialect === 'postgres' ? 'bytea' : 'blob', (c) => c.notNull())
          .addColumn('metadata', 'text')
          .addColumn('expiration', 'bigint')
          .addPrimaryKeyConstraint('kv_values_pk', ['namespace_id', 'key'])
          .execute();
        await db.schema.createIndex('kv_values_expiration').on('kv_values').columns(['expiration']).execute();
      },
    },
  };
}

/**
 * `schema` (PostgreSQL) names where the migration bookkeeping tables live: without it Kysely finds
 * them in any schema of the database and then fails when another schema holds them.
 */
export async function migrate(db: Kysely<any>, dialect: Dialect, schema?: string): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations(dialect) },
    ...(schema ? { migrationTableSchema: schema } : {}),
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`database migration ${failed} failed: ${String(error)}`);
  }
}
