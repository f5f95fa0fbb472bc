/**
 * Numbered schema migrations. Both dialects run the same list; a migration may branch on the
 * dialect where SQL differs. Applied migrations are recorded by Kysely's migrator.
 */
import { Migrator, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

// The dialect is passed so that a later migration can branch where SQL differs.
function migrations(_dialect: Dialect): Record<string, Migration> {
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
