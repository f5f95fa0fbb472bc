/**
 * Versions and deployments of a script. Every upload is a version (its record and modules kept);
 * a deployment names the version that serves traffic, and deploying loads it into the runtime
 * first, so a version that does not start is refused and the live one stays. An upload through
 * `PUT …/scripts/{name}` is a version and its deployment at once; `POST …/versions` only stores
 * one, and `POST …/deployments` (one version at 100%) makes it live.
 */
import { randomUUID } from 'node:crypto';
import type { AreaContext } from '../../core/area.ts';
import { defineCollection } from '../../core/storage/collection.ts';
import type { Executor } from '../../core/storage/db.ts';
import type { ScriptRegistry } from './registry.ts';
import { scriptContents, scripts, type StoredContent, type StoredScript } from './store.ts';

export interface StoredVersion {
  id: string;
  number: number;
  source: string;
  annotations: Record<string, string>;
  created_on: string;
  script: StoredScript;
}

export interface StoredDeployment {
  id: string;
  source: string;
  strategy: 'percentage';
  author_email: string;
  annotations: Record<string, string>;
  created_on: string;
  versions: { version_id: string; percentage: number }[];
}

/** Scope of a script's versions and deployments. */
export const versionScope = (accountId: string, name: string) => `${accountId}/${name}`;

export const scriptVersions = defineCollection<StoredVersion>({ kind: 'worker_version' });
export const versionContents = defineCollection<StoredContent>({ kind: 'worker_version_content' });
export const scriptDeployments = defineCollection<StoredDeployment>({ kind: 'worker_deployment' });

export const AUTHOR_EMAIL = 'admin@outpost.local';

export interface DeployOptions {
  source: string;
  annotations?: Record<string, string>;
  /** Deploy this stored version instead of recording a new one. */
  version?: StoredVersion;
}

export class Deployer {
  constructor(
    private readonly ctx: AreaContext,
    private readonly registry: ScriptRegistry,
  ) {}

  private get db() {
    return this.ctx.database.db;
  }

  private async nextNumber(tx: Executor, scope: string): Promise<number> {
    const all = await scriptVersions.all(tx, scope);
    return all.reduce((n, d) => Math.max(n, d.body.number), 0) + 1;
  }

  /** Stores a version without deploying it. */
  async storeVersion(
    accountId: string,
    script: StoredScript,
    content: StoredContent,
    source: string,
    annotations: Record<string, string> = {},
  ): Promise<StoredVersion> {
    const scope = versionScope(accountId, script.id);
    const now = this.ctx.clock.now();
    return this.db.transaction().execute(async (tx) => {
      const version: StoredVersion = {
        id: randomUUID(),
        number: await this.nextNumber(tx, scope),
        source,
        annotations,
        created_on: now.toISOString(),
        script: { ...script, last_deployed_from: source },
      };
      version.script.version_id = version.id;
      await scriptVersions.insert(tx, scope, version.id, version, now);
      await versionContents.insert(tx, scope, version.id, content, now);
      return version;
    });
  }

  /** Makes a script (a new upload, or a stored version) the live one. */
  async deploy(
    accountId: string,
    script: StoredScript,
    content: StoredContent,
    opts: DeployOptions,
  ): Promise<{ script: StoredScript; versionId: string; deploymentId: string }> {
    const name = script.id;
    const scope = versionScope(accountId, name);
    const versionId = opts.version?.id ?? randomUUID();
    const now = this.ctx.clock.now();
    const ts = now.toISOString();
    const deploymentId = randomUUID();
    const prev = await scripts.get(this.db, accountId, name);
    const live: StoredScript = {
      ...script,
      // Cron triggers and settings belong to the script, not to a version.
      schedules: prev?.body.schedules ?? script.schedules,
      created_on: prev?.body.created_on ?? script.created_on,
      modified_on: ts,
      version_id: versionId,
      deployment_id: deploymentId,
      last_deployed_from: opts.version?.source ?? opts.source,
    };
    // Loading first validates the code (syntax errors, missing imports) before anything is stored.
    if (this.registry.host()) await this.registry.load(accountId, live, content);
    else
      this.ctx.log.warn(
        { script: name },
        'no script runtime on this server: the script is stored but cannot run',
      );
    const deployment: StoredDeployment = {
      id: deploymentId,
      source: opts.source,
      strategy: 'percentage',
      author_email: AUTHOR_EMAIL,
      annotations: opts.annotations ?? {},
      created_on: ts,
      versions: [{ version_id: versionId, percentage: 100 }],
    };
    await this.db.transaction().execute(async (tx) => {
      const current = await scripts.get(tx, accountId, name);
      const oldContent = await scriptContents.get(tx, accountId, name);
      if (current) await scripts.update(tx, current, live, now);
      else await scripts.insert(tx, accountId, name, live, now);
      if (oldContent) await scriptContents.update(tx, oldContent, content, now);
      else await scriptContents.insert(tx, accountId, name, content, now);
      if (!opts.version) {
        const version: StoredVersion = {
          id: versionId,
          number: await this.nextNumber(tx, scope),
          source: opts.source,
          annotations: opts.annotations ?? {},
          created_on: ts,
          script: live,
        };
        await scriptVersions.insert(tx, scope, versionId, version, now);
        await versionContents.insert(tx, scope, versionId, content, now);
      }
      await scriptDeployments.insert(tx, scope, deployment.id, deployment, now);
    });
    for (const hook of this.registry.deployHooks) await hook(accountId, live);
    if (live.schedules.length > 0) this.registry.armSchedules(accountId, live);
    return { script: live, versionId, deploymentId: deployment.id };
  }

  /** Forgets every version and deployment of a deleted script. */
  async forget(tx: Executor, accountId: string, name: string): Promise<void> {
    const scope = versionScope(accountId, name);
    await scriptVersions.deleteScope(tx, scope);
    await versionContents.deleteScope(tx, scope);
    await scriptDeployments.deleteScope(tx, scope);
  }
}
