/**
 * Dispatch namespaces and the customer scripts inside them. A namespace is a document per account
 * keyed by its name (the path uses the name; the record carries a 32-hex `namespace_id`). Scripts
 * are stored like account scripts (record + modules, kept apart so lists never read module
 * bodies) in the scope `<account>:<namespace_id>`, so a namespace deleted and created again under
 * the same name starts empty. Upload sessions of static assets are documents too; asset bytes are
 * blobs under `dispatch-assets/<namespace_id>/<hash>`.
 */
import { defineCollection } from '../../../core/storage/collection.ts';
import type { StoredContent, StoredScript } from '../store.ts';

export interface NamespaceRecord {
  namespace_id: string;
  namespace_name: string;
  created_on: string;
  modified_on: string;
}

/** How the static assets of a script are served (`assets.config` of the upload metadata). */
export interface AssetsConfig {
  html_handling: 'auto-trailing-slash' | 'force-trailing-slash' | 'drop-trailing-slash' | 'none';
  not_found_handling: 'none' | '404-page' | 'single-page-application';
  /** `true`, `false`, or path patterns (`/api/*`, `!/api/docs`) that run the script first. */
  run_worker_first: boolean | string[];
  /** The `_redirects` file as uploaded (rules in rules.ts). */
  _redirects?: string;
  /** The `_headers` file as uploaded (rules in rules.ts). */
  _headers?: string;
}

export interface AssetEntry {
  hash: string;
  size: number;
}

export interface ScriptAssets {
  /** Path (leading `/`) → content hash. */
  manifest: Record<string, AssetEntry>;
  config: AssetsConfig;
  /** The env name of the `assets` binding, when the script has one. */
  binding?: string;
}

export interface DispatchScript extends StoredScript {
  assets?: ScriptAssets;
}

export interface UploadSession {
  account_id: string;
  namespace_id: string;
  script_name: string;
  manifest: Record<string, AssetEntry>;
  /** Hashes that were missing when the session was created. */
  missing: string[];
  expires_at: number;
}

export const namespaces = defineCollection<NamespaceRecord>({ kind: 'dispatch_namespace' });
export const dispatchScripts = defineCollection<DispatchScript>({ kind: 'dispatch_script' });
export const dispatchContents = defineCollection<StoredContent>({
  kind: 'dispatch_script_content',
});
export const uploadSessions = defineCollection<UploadSession>({ kind: 'dispatch_asset_session' });

export const scopeOf = (accountId: string, namespaceId: string): string =>
  `${accountId}:${namespaceId}`;
