/**
 * Scripts as two document kinds per account: the record (metadata, bindings, schedules) and its
 * modules (kept apart so lists never read module bodies). Module contents are stored base64.
 */
import { apiError } from '../../core/errors.ts';
import { defineCollection, type Doc } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import type { ScriptModule } from './host.ts';

/** A binding as uploaded, in the platform's wire form. */
export interface StoredBinding {
  type: string;
  name: string;
  [key: string]: unknown;
}

export interface StoredSchedule {
  cron: string;
  created_on: string;
  modified_on: string;
}

export interface StoredScript {
  id: string;
  etag: string;
  main_module: string;
  compatibility_date: string | null;
  compatibility_flags: string[];
  bindings: StoredBinding[];
  handlers: string[];
  tags: string[];
  schedules: StoredSchedule[];
  /** Settings that do not change the code: logpush, observability, tail_consumers. */
  settings?: Record<string, unknown>;
  /** The version serving traffic (absent for scripts stored before versions were kept). */
  version_id?: string;
  /** The deployment that made it live: the latest one, which cannot be deleted. */
  deployment_id?: string;
  last_deployed_from?: string;
  created_on: string;
  modified_on: string;
}

export interface StoredModule {
  name: string;
  type: ScriptModule['type'];
  /** base64 of the bytes */
  content: string;
}

export interface StoredContent {
  modules: StoredModule[];
}

export const scripts = defineCollection<StoredScript>({ kind: 'worker_script' });

/** A script's record; 404 (`worker_not_found`) when the account has none by that name. */
export async function requireScript(db: Executor, accountId: string, name: string): Promise<Doc<StoredScript>> {
  const doc = await scripts.get(db, accountId, name);
  if (!doc) throw apiError('worker_not_found', name);
  return doc;
}
export const scriptContents = defineCollection<StoredContent>({ kind: 'worker_script_content' });

export function toHostModules(content: StoredContent): ScriptModule[] {
  return content.modules.map((m) => {
    const bytes = Buffer.from(m.content, 'base64');
    const text = m.type === 'esm' || m.type === 'commonjs' || m.type === 'text';
    return {
      name: m.name,
      type: m.type,
      content: text ? bytes.toString('utf8') : new Uint8Array(bytes),
    };
  });
}
