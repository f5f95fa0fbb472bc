/**
 * First-start seeding: the first account, the root API token and the legacy global key.
 * `OUTPOST_ACCOUNT_ID` / `OUTPOST_API_TOKEN` / `OUTPOST_API_KEY` pin them (CI, scripts); otherwise
 * they are generated once and reported to the caller to print once.
 */
import { accounts, GLOBAL_SCOPE } from './accounts.ts';
import { tokens, USER_SCOPE } from './auth.ts';
import { getSetting, putSetting, type Db } from './storage/db.ts';
import { hexId, secret, sha256, stableId } from './ids.ts';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';

export interface Seeded {
  accountId: string;
  /** Present only when this start created the value (print it once). */
  newToken?: string;
  newAccount?: boolean;
  newApiKey?: string;
  /** SHA-256 of the legacy key, to compare against. */
  apiKeyHash: string;
}

export async function bootstrap(db: Db, config: Config, clock: Clock): Promise<Seeded> {
  return db.transaction().execute(async (tx) => {
    const now = clock.now();
    const out: Partial<Seeded> = {};

    let accountId = config.accountId ?? (await getSetting(tx, 'first_account_id'));
    if (!accountId) accountId = hexId();
    if (!(await accounts.get(tx, GLOBAL_SCOPE, accountId))) {
      await accounts.insert(tx, GLOBAL_SCOPE, accountId, {
        id: accountId,
        name: 'Outpost account',
        type: 'standard',
        created_on: now.toISOString(),
        settings: { enforce_twofactor: false, abuse_contact_email: null },
      }, now);
      out.newAccount = true;
    }
    await putSetting(tx, 'first_account_id', accountId);
    out.accountId = accountId;

    const tokenSecret = config.apiToken;
    if (tokenSecret !== undefined || !(await getSetting(tx, 'root_token_id'))) {
      const value = tokenSecret ?? secret(40);
      const hash = sha256(value);
      const existing = await tokens.findBy(tx, 'secret_hash', hash);
      if (existing.length === 0) {
        const id = stableId(`root-token:${hash}`);
        const ts = now.toISOString();
        await tokens.insert(tx, USER_SCOPE, id, {
          id,
          name: 'Root token',
          status: 'active',
          issued_on: ts,
          modified_on: ts,
          policies: [],
          secret_hash: hash,
          root: true,
        }, now);
        await putSetting(tx, 'root_token_id', id);
        if (tokenSecret === undefined) out.newToken = value;
      }
    }

    if (config.apiKey !== undefined) {
      out.apiKeyHash = sha256(config.apiKey);
    } else {
      const stored = await getSetting(tx, 'legacy_api_key_hash');
      if (stored) out.apiKeyHash = stored;
      else {
        const key = secret(37);
        out.apiKeyHash = sha256(key);
        await putSetting(tx, 'legacy_api_key_hash', out.apiKeyHash);
        out.newApiKey = key;
      }
    }
    return out as Seeded;
  });
}
