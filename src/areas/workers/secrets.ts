/**
 * Several secrets in one call (`PATCH …/secrets-bulk`), shared by account scripts and customer
 * scripts of dispatch namespaces: each entry of `secrets` sets (`{name, text, type:
 * 'secret_text'}`) or deletes (`null`) one secret; names left out are untouched. The whole map is
 * checked before anything changes, so a bad entry refuses the call and no secret moves.
 */
import { z } from 'zod';
import { apiError } from '../../core/errors.ts';
import type { StoredBinding } from './store.ts';

const NAME = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const MAX_SECRET_BYTES = 5 * 1024;

export const BulkSecretsBody = z.object({
  secrets: z.record(z.string(), z.unknown(), { error: 'secrets must be an object' }).optional(),
  version_tags: z
    .record(z.string(), z.unknown(), { error: 'version_tags must be an object' })
    .optional(),
});
export type BulkSecrets = z.infer<typeof BulkSecretsBody>;

const bad = (message: string) => apiError('worker_invalid', message);

/**
 * The bindings after a bulk change, and the answer: every secret the script has afterwards
 * (name and type, never the value). Deleting a secret the script does not have is not an error,
 * so a retried call answers as the first did.
 */
export function applyBulkSecrets(
  bindings: StoredBinding[],
  body: BulkSecrets,
): { bindings: StoredBinding[]; result: Record<string, { name: string; type: 'secret_text' }> } {
  const set = new Map<string, string>();
  const drop = new Set<string>();
  for (const [key, value] of Object.entries(body.secrets ?? {})) {
    const at = `secrets.${key}`;
    if (!NAME.test(key)) throw bad(`${at}: a secret name must be a JavaScript identifier`);
    if (key.startsWith('__OUTPOST')) throw bad(`${at}: names starting with __OUTPOST are reserved`);
    const clash = bindings.find((b) => b.name === key && b.type !== 'secret_text');
    if (clash)
      throw bad(
        `${at}: ${key} is already bound as ${clash.type}; choose another name for the secret`,
      );
    if (value === null) {
      drop.add(key);
      continue;
    }
    if (typeof value !== 'object' || Array.isArray(value))
      throw bad(`${at}: expected {"name", "text", "type": "secret_text"} or null to delete`);
    const v = value as Record<string, unknown>;
    if (v.type === 'secret_key')
      throw bad(
        `${at}.type: secret_key bindings are not supported by this server; use secret_text`,
      );
    if (v.type !== undefined && v.type !== 'secret_text')
      throw bad(`${at}.type: must be secret_text`);
    if (v.name !== undefined && v.name !== key)
      throw bad(
        `${at}.name: ${JSON.stringify(v.name)} differs from the key ${key}; they must match`,
      );
    if (typeof v.text !== 'string') throw bad(`${at}.text: required, a string`);
    if (Buffer.byteLength(v.text) > MAX_SECRET_BYTES)
      throw bad(`${at}.text: secrets are at most 5 KiB`);
    set.set(key, v.text);
  }
  const next = bindings.filter(
    (b) => !(b.type === 'secret_text' && (set.has(b.name) || drop.has(b.name))),
  );
  for (const [name, text] of set) next.push({ type: 'secret_text', name, text });
  const result: Record<string, { name: string; type: 'secret_text' }> = {};
  for (const b of next)
    if (b.type === 'secret_text') result[b.name] = { name: b.name, type: 'secret_text' };
  return { bindings: next, result };
}

/** `version_tags` as version annotations (string values only, as annotations are). */
export function versionTags(body: BulkSecrets): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(body.version_tags ?? {}))
    if (typeof v === 'string') out[k] = v;
  return out;
}
