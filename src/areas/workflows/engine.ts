/**
 * The workflows engine: instances, their step results, timers and events on SQL, and the attempts
 * that run a workflow class in the script runtime.
 *
 * An attempt replays `run(event, step)` from the top with the memoised results of this instance's
 * current generation (a restart starts a new generation). The script reports each new step result
 * over the service binding; the engine commits it before the step returns, so a step whose result
 * was acknowledged never runs again, whatever happens to this process afterwards. Sleeps, retry
 * back-off and event timeouts are rows in `wf_timers`; when one falls due (on the injectable clock)
 * the instance is woken and replayed.
 *
 * One engine per database: in-process state (which attempts are executing, the active count per
 * workflow, per-instance locks) is rebuilt from the tables at start. Every change of one instance
 * (RPCs from its attempt, timers, events, control operations) runs under that instance's lock, so
 * e.g. an event can never slip between a `waitForEvent` looking for it and recording the wait.
 */
import type { AreaContext } from '../../core/area.ts';
import { ApiError, apiError } from '../../core/errors.ts';
import { hexId, uuid } from '../../core/ids.ts';
import { sql } from '../../core/storage/db.ts';
import {
  ATTEMPT_PATH,
  ATTEMPT_YIELD_MS,
  CronError,
  parseCron,
  RuntimeUnavailable,
  type AttemptOutcome,
  type AttemptRequest,
  type AttemptRpc,
  type CacheEntry,
  type Encoded,
  type ErrorView,
  type RetentionInput,
  type ScriptRegistry,
} from '../workers/index.ts';
import { parseDuration, retryDelay, YEAR_MS, type Backoff } from './duration.ts';
import { byteLength } from './encoding.ts';
import { GroupCommit } from './group-commit.ts';
import { FAILURE_HEADER } from '../../runtime/index.ts';
import {
  ACTIVE,
  deleteInstanceRows,
  FINAL,
  getInstance,
  getInstanceByIid,
  stepsOf,
  toInstance,
  toStep,
  toTimer,
  workflowDefs,
  type Status,
  type StoredWorkflow,
  type TimerKind,
  type WfDb,
  type WfExec,
  type WfInstancesTable,
  type WfStepsTable,
} from './store.ts';

export const MAX_BATCH = 100;
export const MAX_PAYLOAD = 1_048_576;
export const DEFAULT_STEP_LIMIT = 1024;
const ID_PATTERN = /^[a-zA-Z0-9_][a-zA-Z0-9-_]*$/;
const RESERVED_ID = /^cf_[0-9a-f]{64}$/;
const MAX_INFRA_FAILURES = 5;

export type TriggerSource = 'api' | 'binding' | 'cron' | 'event' | 'unknown';

export interface CreateItem {
  id?: unknown;
  /** Already in the tagged encoding. */
  params: Encoded;
  retention?: RetentionInput;
}

export interface Created {
  instance: WfInstancesTable;
  created: boolean;
}

interface Attempt {
  id: string;
  iid: string;
  accountId: string;
  workflow: string;
  instanceId: string;
  generation: number;
  /** `pause`: finish the step in flight, then stop; `stop`: terminated, restarted or deleted. */
  control: 'run' | 'pause' | 'stop';
  /** Something woke the instance while this attempt ran: run again when it ends. */
  rerun: boolean;
  /** Nothing recorded yet (first attempt of a new generation): skip loading steps. */
  fresh: boolean;
  steps: Map<string, WfStepsTable>;
  /** What the attempt suspended on. */
  waits: Set<TimerKind | 'wait'>;
}

const wfKey = (accountId: string, workflow: string) => `${accountId}\u0000${workflow}`;

function errorText(e: ErrorView): string {
  return JSON.stringify({ name: e.name, message: e.message });
}

export class WorkflowEngine {
  readonly db: WfDb;
  /** Every write of the engine goes through here (group commit). */
  readonly writes: GroupCommit;
  private readonly log;
  private readonly executing = new Map<string, Attempt>();
  private readonly attempts = new Map<string, Attempt>();
  private readonly active = new Map<string, number>();
  private readonly hasQueued = new Set<string>();
  private readonly locks = new Map<string, Promise<void>>();
  private readonly defs = new Map<string, StoredWorkflow | null>();
  private readonly infraFailures = new Map<string, number>();
  private readonly slotWaiters: (() => void)[] = [];
  private inflight = 0;
  private seq = Date.now() * 1000;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;
  private ticking = false;
  private tickAgain = false;
  private pumping = false;
  private pumpAgain = false;
  private stopped = true;
  private lastCollect = { real: 0, clock: 0 };
  private readonly background = new Set<Promise<unknown>>();

  constructor(
    private readonly ctx: AreaContext,
    private readonly registry: ScriptRegistry,
  ) {
    this.db = ctx.database.db as unknown as WfDb;
    this.writes = new GroupCommit(this.db);
    this.log = ctx.log.child({ area: 'workflows' });
  }

  // ==== time, ids, limits ========================================================================

  private now(): number {
    return this.ctx.clock.now().getTime();
  }

  private nextSeq(): number {
    this.seq = Math.max(this.seq + 1, Date.now() * 1000);
    return this.seq;
  }

  private get plan() {
    return this.ctx.config.workflowsPlan === 'free'
      ? { retentionMs: 3 * 86_400_000, concurrency: 100 }
      : { retentionMs: 30 * 86_400_000, concurrency: 10_000 };
  }

  private concurrencyOf(def: StoredWorkflow): number {
    return def.concurrency.limit ?? this.plan.concurrency;
  }

  /** Runs `fn` in the background, keeping track of it so `stop()` can wait. */
  private spawn(p: Promise<unknown>): void {
    const tracked = p.catch((err: unknown) =>
      this.log.error({ err }, 'workflow engine task failed'),
    );
    this.background.add(tracked);
    void tracked.finally(() => this.background.delete(tracked));
  }

  private async withLock<T>(iid: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(iid) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.locks.set(iid, tail);
    try {
      await prev;
      return await fn();
    } finally {
      release();
      if (this.locks.get(iid) === tail) this.locks.delete(iid);
    }
  }

  private adjustActive(accountId: string, workflow: string, delta: number): void {
    const k = wfKey(accountId, workflow);
    const n = (this.active.get(k) ?? 0) + delta;
    if (n <= 0) this.active.delete(k);
    else this.active.set(k, n);
    if (delta < 0) this.schedulePump();
  }

  private leaveActive(inst: WfInstancesTable): void {
    if (ACTIVE.has(inst.status)) this.adjustActive(inst.account_id, inst.workflow, -1);
  }

  // ==== definitions ===============================================================================

  async definition(accountId: string, name: string): Promise<StoredWorkflow | undefined> {
    const k = wfKey(accountId, name);
    if (this.defs.has(k)) return this.defs.get(k) ?? undefined;
    const doc = await workflowDefs.get(this.ctx.database.db, accountId, name);
    this.defs.set(k, doc?.body ?? null);
    return doc?.body;
  }

  async requireDefinition(accountId: string, name: string): Promise<StoredWorkflow> {
    const def = await this.definition(accountId, name);
    if (!def) throw apiError('workflow_not_found', name);
    return def;
  }

  /** Called after a definition is written: caches, schedules, and the queue (a new limit). */
  definitionChanged(accountId: string, def: StoredWorkflow): void {
    this.defs.set(wfKey(accountId, def.name), def);
    this.armSchedules(accountId, def);
    this.hasQueued.add(wfKey(accountId, def.name));
    this.schedulePump();
  }

  retentionOf(
    def: StoredWorkflow,
    input: RetentionInput | undefined,
  ): { success: number; error: number } {
    const pick = (v: number | string | undefined, fallback: number, what: string): number => {
      if (v === undefined || v === null) return fallback;
      const ms = parseDuration(v);
      if (ms === undefined)
        throw apiError('workflow_invalid', `${what}: invalid duration ${JSON.stringify(v)}`);
      return ms;
    };
    const success = pick(
      def.default_retention.success_retention,
      this.plan.retentionMs,
      'default_retention.success_retention',
    );
    const error = pick(
      def.default_retention.error_retention,
      this.plan.retentionMs,
      'default_retention.error_retention',
    );
    return {
      success: pick(input?.success, success, 'retention (success)'),
      error: pick(input?.error, error, 'retention (error)'),
    };
  }

  // ==== creating instances =======================================================================

  checkId(id: unknown): string {
    if (
      typeof id !== 'string' ||
      id.length === 0 ||
      id.length > 100 ||
      !ID_PATTERN.test(id) ||
      RESERVED_ID.test(id)
    ) {
      throw apiError('workflow_invalid_id', JSON.stringify(id));
    }
    return id;
  }

  /**
   * Creates instances. A single create of an existing id fails with `instance.already_exists`
   * (also for finished ids); a batch (`skipExisting`) leaves existing ids untouched and answers
   * their current record.
   */
  async create(
    accountId: string,
    workflow: string,
    items: CreateItem[],
    source: TriggerSource,
    opts: { skipExisting: boolean; schedule?: { cron: string; scheduledTime: number } },
  ): Promise<Created[]> {
    const def = await this.requireDefinition(accountId, workflow);
    if (items.length > MAX_BATCH) throw apiError('workflow_batch_too_large', items.length);
    const now = this.now();
    const ts = new Date(now).toISOString();
    const seen = new Set<string>();
    const rows: WfInstancesTable[] = [];
    for (const item of items) {
      const id = item.id === undefined || item.id === null ? uuid() : this.checkId(item.id);
      const paramsText = JSON.stringify(item.params === undefined ? {} : item.params);
      const size = byteLength(paramsText);
      if (size > MAX_PAYLOAD) throw apiError('workflow_payload_too_large', 'params', size);
      const retention = this.retentionOf(def, item.retention);
      if (seen.has(id)) continue;
      seen.add(id);
      rows.push({
        iid: hexId(),
        account_id: accountId,
        workflow,
        id,
        workflow_id: def.id,
        version_id: def.version_id,
        status: 'queued',
        generation: 1,
        params: paramsText,
        output: null,
        error: null,
        trigger_source: source,
        created_on: ts,
        modified_on: ts,
        started_on: null,
        ended_on: null,
        queued_at: now,
        priority: 1,
        paused_at: null,
        success_retention: retention.success,
        error_retention: retention.error,
        expires_at: null,
        schedule: opts.schedule ? JSON.stringify(opts.schedule) : null,
      });
    }
    // Reserve concurrency slots before writing, so concurrent creates cannot overshoot the limit.
    const k = wfKey(accountId, workflow);
    const reserved = Math.max(
      0,
      Math.min(rows.length, this.concurrencyOf(def) - (this.active.get(k) ?? 0)),
    );
    this.active.set(k, (this.active.get(k) ?? 0) + reserved);
    rows.forEach((r, i) => {
      if (i < reserved) {
        r.status = 'running';
        r.started_on = ts;
      }
    });
    let inserted = new Set<string>();
    try {
      if (rows.length > 0) {
        const out = await this.writes.run((tx) =>
          tx
            .insertInto('wf_instances')
            .values(rows)
            .onConflict((oc) => oc.columns(['account_id', 'workflow', 'id']).doNothing())
            .returning('iid')
            .execute(),
        );
        inserted = new Set(out.map((r) => r.iid));
      }
    } catch (err) {
      this.adjustActive(accountId, workflow, -reserved);
      throw err;
    }
    const unused = rows.filter((r, i) => i < reserved && !inserted.has(r.iid)).length;
    if (unused > 0) this.adjustActive(accountId, workflow, -unused);
    const result: Created[] = [];
    for (const r of rows) {
      if (inserted.has(r.iid)) {
        result.push({ instance: r, created: true });
        if (r.status === 'running') this.startAttempt(r, true);
        else {
          this.hasQueued.add(k);
          this.schedulePump();
        }
        continue;
      }
      if (!opts.skipExisting) throw apiError('workflow_instance_exists');
      const existing = await getInstance(this.db, accountId, workflow, r.id);
      if (existing) result.push({ instance: existing, created: false });
    }
    return result;
  }

  async requireInstance(
    accountId: string,
    workflow: string,
    id: string,
  ): Promise<WfInstancesTable> {
    await this.requireDefinition(accountId, workflow);
    const inst = await getInstance(this.db, accountId, workflow, id);
    if (!inst) throw apiError('workflow_instance_not_found');
    return inst;
  }

  // ==== the queue ================================================================================

  private schedulePump(): void {
    if (this.stopped) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    queueMicrotask(() => {
      this.spawn(
        (async () => {
          try {
            do {
              this.pumpAgain = false;
              await this.pumpOnce();
            } while (this.pumpAgain && !this.stopped);
          } finally {
            this.pumping = false;
          }
        })(),
      );
    });
  }

  /** Promotes queued instances of every workflow with free slots, oldest (and woken) first. */
  private async pumpOnce(): Promise<void> {
    for (const k of [...this.hasQueued]) {
      const [accountId, workflow] = k.split('\u0000');
      const def = await this.definition(accountId, workflow);
      if (!def) {
        this.hasQueued.delete(k);
        continue;
      }
      const free = this.concurrencyOf(def) - (this.active.get(k) ?? 0);
      if (free <= 0) continue;
      const want = Math.min(free, 500);
      this.hasQueued.delete(k);
      const rows = await this.db
        .selectFrom('wf_instances')
        .select(['iid'])
        .where('status', '=', 'queued')
        .where('account_id', '=', accountId)
        .where('workflow', '=', workflow)
        .orderBy('priority')
        .orderBy('queued_at')
        .limit(want)
        .execute();
      if (rows.length === want) this.hasQueued.add(k);
      if (rows.length === 0) continue;
      const holding = new Set(
        (
          await this.db
            .selectFrom('wf_timers')
            .select('iid')
            .where(
              'iid',
              'in',
              rows.map((r) => r.iid),
            )
            .where('kind', 'in', ['retry', 'resume'])
            .execute()
        ).map((r) => r.iid),
      );
      await Promise.all(
        rows.map((r) => this.withLock(r.iid, () => this.promote(r.iid, holding.has(r.iid)))),
      );
    }
  }

  private async promote(iid: string, waitForTimer: boolean): Promise<void> {
    // Still ending an earlier attempt (restarted meanwhile): its end re-runs the queue.
    if (this.executing.has(iid)) return;
    const ts = new Date(this.now()).toISOString();
    const res = await this.writes.run((tx) =>
      tx
        .updateTable('wf_instances')
        .set({
          status: 'running',
          modified_on: ts,
          started_on: sql<string>`coalesce(started_on, ${ts})`,
        })
        .where('iid', '=', iid)
        .where('status', '=', 'queued')
        .executeTakeFirst(),
    );
    if (Number(res.numUpdatedRows) !== 1) return;
    const inst = await getInstanceByIid(this.db, iid);
    if (!inst) return;
    this.adjustActive(inst.account_id, inst.workflow, +1);
    if (!waitForTimer) this.startAttempt(inst, false);
  }

  // ==== attempts ================================================================================

  private startAttempt(inst: WfInstancesTable, fresh: boolean): void {
    if (this.stopped || this.executing.has(inst.iid)) return;
    const att: Attempt = {
      id: hexId(),
      iid: inst.iid,
      accountId: inst.account_id,
      workflow: inst.workflow,
      instanceId: inst.id,
      generation: inst.generation,
      control: inst.status === 'waitingForPause' ? 'pause' : 'run',
      rerun: false,
      fresh,
      steps: new Map(),
      waits: new Set(),
    };
    this.executing.set(inst.iid, att);
    this.attempts.set(att.id, att);
    this.spawn(this.execute(att, inst));
  }

  private async acquireSlot(): Promise<void> {
    if (this.inflight < this.ctx.config.workflowsMaxInflight) {
      this.inflight++;
      return;
    }
    await new Promise<void>((resolve) => this.slotWaiters.push(resolve));
  }

  private releaseSlot(): void {
    const next = this.slotWaiters.shift();
    if (next) next();
    else this.inflight--;
  }

  private async execute(att: Attempt, inst: WfInstancesTable): Promise<void> {
    let outcome: AttemptOutcome | { outcome: 'infra'; message: string; unavailable?: boolean };
    await this.acquireSlot();
    try {
      outcome = await this.runAttempt(att, inst);
    } catch (err) {
      if (err instanceof RuntimeUnavailable)
        outcome = { outcome: 'infra', message: err.message, unavailable: true };
      else if (err instanceof ApiError)
        outcome = {
          outcome: 'error',
          fatal: true,
          error: { name: 'Error', message: err.errors[0]?.message ?? err.message },
        };
      else outcome = { outcome: 'infra', message: (err as Error).message ?? String(err) };
    } finally {
      this.releaseSlot();
    }
    await this.withLock(att.iid, () => this.finish(att, outcome));
  }

  private async runAttempt(att: Attempt, inst: WfInstancesTable): Promise<AttemptOutcome> {
    const def = await this.requireDefinition(att.accountId, att.workflow);
    if (!att.fresh) {
      for (const s of await stepsOf(this.db, att.iid, att.generation)) att.steps.set(s.key, s);
    }
    const cache: Record<string, CacheEntry> = {};
    const attempts: Record<string, number> = {};
    for (const s of att.steps.values()) {
      const entry = cacheEntry(s);
      if (entry) cache[s.key] = entry;
      else if (s.type === 'do' && s.state === 'running')
        attempts[s.key] = s.attempts ? (JSON.parse(s.attempts) as unknown[]).length : 0;
    }
    const req: AttemptRequest = {
      attemptId: att.id,
      instanceId: inst.id,
      className: def.class_name,
      params: JSON.parse(inst.params) as Encoded,
      timestamp: Date.parse(inst.created_on),
      cache,
      attempts,
      stepLimit: def.limits.steps ?? DEFAULT_STEP_LIMIT,
      yieldAfterMs: ATTEMPT_YIELD_MS,
    };
    const res = await this.registry.internalFetch(
      att.accountId,
      def.script_name,
      ATTEMPT_PATH,
      req,
    );
    const text = await res.text();
    let out: AttemptOutcome | undefined;
    try {
      out = JSON.parse(text) as AttemptOutcome;
    } catch {
      out = undefined;
    }
    if (!out || typeof out !== 'object' || !('outcome' in out)) {
      // The runtime's own error answer (a script that failed to start, a CPU limit…) ends the attempt.
      const kind = res.headers.get(FAILURE_HEADER);
      throw new Error(
        kind
          ? `the runtime stopped the attempt (${kind}): ${text.trim().slice(0, 500)}`
          : `the script answered ${res.status}: ${text.slice(0, 500)}`,
      );
    }
    return out;
  }

  /** Settles an attempt's end under the instance lock. */
  private async finish(
    att: Attempt,
    outcome: AttemptOutcome | { outcome: 'infra'; message: string; unavailable?: boolean },
  ): Promise<void> {
    if (this.executing.get(att.iid) === att) this.executing.delete(att.iid);
    this.attempts.delete(att.id);
    const inst = await getInstanceByIid(this.db, att.iid);
    if (
      !inst ||
      inst.generation !== att.generation ||
      FINAL.has(inst.status) ||
      att.control === 'stop'
    ) {
      // A restart queued the instance while this attempt ran: the queue may take it now.
      if (inst?.status === 'queued') this.hasQueued.add(wfKey(inst.account_id, inst.workflow));
      this.schedulePump();
      return;
    }
    const now = this.now();
    const ts = new Date(now).toISOString();
    if (outcome.outcome === 'infra') {
      const n = (this.infraFailures.get(att.iid) ?? 0) + 1;
      this.infraFailures.set(att.iid, n);
      this.log.warn(
        { instance: inst.id, workflow: inst.workflow, err: outcome.message },
        'workflow attempt did not run',
      );
      if (!outcome.unavailable && n >= MAX_INFRA_FAILURES) {
        await this.end(inst, 'errored', {
          error: { name: 'Error', message: `The workflow could not run: ${outcome.message}` },
        });
        return;
      }
      if (inst.status === 'waitingForPause') {
        await this.pauseNow(inst);
        return;
      }
      const delay = Math.min(60_000, 1000 * 2 ** (Math.min(n, 10) - 1));
      await this.writes.run(async (tx) => {
        await this.putTimer(tx, inst, 'resume', 'resume', now + delay);
      });
      return;
    }
    this.infraFailures.delete(att.iid);
    if (outcome.outcome === 'complete') {
      const text = JSON.stringify(outcome.output === undefined ? { $t: 'u' } : outcome.output);
      await this.end(inst, 'complete', { output: text });
      return;
    }
    if (outcome.outcome === 'error') {
      await this.end(inst, 'errored', { error: outcome.error });
      return;
    }
    // Suspended.
    if (inst.status === 'waitingForPause') {
      await this.pauseNow(inst);
      return;
    }
    if (att.rerun || outcome.yielded) {
      this.startAttempt(inst, false);
      return;
    }
    if (att.waits.has('retry')) return;
    if (att.waits.has('sleep') || att.waits.has('event_timeout') || att.waits.has('wait')) {
      await this.setStatus(inst, 'waiting', ts);
      return;
    }
    // A suspension without a recorded reason (a step answered `stop` for a pause that was then
    // resumed): run again.
    this.startAttempt(inst, false);
  }

  private async setStatus(
    inst: WfInstancesTable,
    status: Status,
    ts: string,
    extra: Partial<WfInstancesTable> = {},
  ): Promise<void> {
    await this.writes.run((tx) =>
      tx
        .updateTable('wf_instances')
        .set({ status, modified_on: ts, ...extra })
        .where('iid', '=', inst.iid)
        .execute(),
    );
    if (ACTIVE.has(inst.status) && !ACTIVE.has(status))
      this.adjustActive(inst.account_id, inst.workflow, -1);
    if (!ACTIVE.has(inst.status) && ACTIVE.has(status))
      this.adjustActive(inst.account_id, inst.workflow, +1);
    inst.status = status;
  }

  private async pauseNow(inst: WfInstancesTable): Promise<void> {
    const now = this.now();
    await this.setStatus(inst, 'paused', new Date(now).toISOString(), { paused_at: now });
  }

  /** Moves an instance to a final status; its timers go, its retention clock starts. */
  private async end(
    inst: WfInstancesTable,
    status: 'complete' | 'errored' | 'terminated',
    what: { output?: string; error?: ErrorView & { source?: string } },
  ): Promise<void> {
    const now = this.now();
    const ts = new Date(now).toISOString();
    const keep = status === 'complete' ? inst.success_retention : inst.error_retention;
    await this.writes.run(async (tx) => {
      // A timer left behind by a finished instance is dropped when it fires; only a termination
      // has pending ones to cancel.
      if (status === 'terminated')
        await tx.deleteFrom('wf_timers').where('iid', '=', inst.iid).execute();
      await tx
        .updateTable('wf_instances')
        .set({
          status,
          modified_on: ts,
          ended_on: ts,
          output: what.output ?? null,
          error: what.error ? JSON.stringify(what.error) : null,
          expires_at: now + (keep ?? this.plan.retentionMs),
          paused_at: null,
        })
        .where('iid', '=', inst.iid)
        .execute();
    });
    this.leaveActive(inst);
    inst.status = status;
    this.infraFailures.delete(inst.iid);
  }

  /**
   * What waking an instance (a timer fired, an event arrived) changes: the row update to write with
   * the cause, and what to do once it is committed. Call under the instance's lock.
   */
  private async planWake(
    inst: WfInstancesTable,
  ): Promise<{ set?: Partial<WfInstancesTable>; after: () => void }> {
    const att = this.executing.get(inst.iid);
    if (att) return { after: () => void (att.rerun = true) };
    if (inst.status === 'running') return { after: () => this.startAttempt(inst, false) };
    if (inst.status !== 'waiting') return { after: () => {} };
    const now = this.now();
    const ts = new Date(now).toISOString();
    const k = wfKey(inst.account_id, inst.workflow);
    const def = await this.definition(inst.account_id, inst.workflow);
    if (def && !this.hasQueued.has(k) && (this.active.get(k) ?? 0) < this.concurrencyOf(def)) {
      // The slot is taken now, so concurrent wake-ups cannot overshoot the limit.
      this.adjustActive(inst.account_id, inst.workflow, +1);
      return {
        set: { status: 'running', modified_on: ts },
        after: () => {
          inst.status = 'running';
          this.startAttempt(inst, false);
        },
      };
    }
    return {
      set: { status: 'queued', modified_on: ts, priority: 0, queued_at: now },
      after: () => {
        inst.status = 'queued';
        this.hasQueued.add(k);
        this.schedulePump();
      },
    };
  }

  private async wake(inst: WfInstancesTable): Promise<void> {
    const plan = await this.planWake(inst);
    if (plan.set) {
      const set = plan.set;
      await this.writes.run((tx) =>
        tx.updateTable('wf_instances').set(set).where('iid', '=', inst.iid).execute(),
      );
    }
    plan.after();
  }

  private async putTimer(
    tx: WfExec,
    inst: { iid: string; generation: number },
    key: string,
    kind: TimerKind,
    due: number,
  ): Promise<void> {
    await tx
      .insertInto('wf_timers')
      .values({ iid: inst.iid, key, generation: inst.generation, kind, due_at: due })
      .onConflict((oc) =>
        oc.columns(['iid', 'key']).doUpdateSet({ generation: inst.generation, kind, due_at: due }),
      )
      .execute();
    this.armAt(due);
  }

  // ==== RPCs from an attempt =====================================================================

  async onAttemptRpc(msg: AttemptRpc): Promise<unknown> {
    const att = this.attempts.get(msg.attempt);
    if (!att) return { stop: true };
    return this.withLock(att.iid, async () => {
      if (att.control === 'stop' || this.executing.get(att.iid) !== att) return { stop: true };
      if (msg.op === 'step') return this.onStep(att, msg);
      if (msg.op === 'sleep') return this.onSleep(att, msg);
      return this.onWait(att, msg);
    });
  }

  private async upsertStep(tx: WfExec, row: WfStepsTable): Promise<void> {
    const { iid: _i, generation: _g, key: _k, ...rest } = row;
    await tx
      .insertInto('wf_steps')
      .values(row)
      .onConflict((oc) => oc.columns(['iid', 'generation', 'key']).doUpdateSet(rest))
      .execute();
  }

  private async onStep(att: Attempt, msg: Extract<AttemptRpc, { op: 'step' }>): Promise<unknown> {
    const prev = att.steps.get(msg.key);
    if (prev && (prev.state === 'ok' || prev.state === 'error')) {
      if (att.control !== 'run') return { stop: true };
      return prev.state === 'ok' ? { ok: true } : { final: JSON.parse(prev.error!) as ErrorView };
    }
    const now = this.now();
    const end = new Date(now).toISOString();
    const start = new Date(now - Math.max(0, msg.elapsedMs | 0)).toISOString();
    const attempts = prev?.attempts ? (JSON.parse(prev.attempts) as unknown[]) : [];
    attempts.push({ start, end, success: !msg.error, error: msg.error ?? null });
    const row: WfStepsTable = {
      iid: att.iid,
      generation: att.generation,
      key: msg.key,
      seq: prev?.seq ?? this.nextSeq(),
      type: 'do',
      name: msg.name,
      count: msg.count,
      state: 'ok',
      output: null,
      error: null,
      config: JSON.stringify(msg.config),
      attempts: JSON.stringify(attempts),
      event_type: null,
      start_at: prev?.start_at ?? start,
      end_at: end,
    };
    let reply: Record<string, unknown>;
    let retryAt: number | undefined;
    if (!msg.error) {
      row.output = JSON.stringify(msg.value === undefined ? { $t: 'u' } : msg.value);
      const size = byteLength(row.output);
      if (size > MAX_PAYLOAD) {
        row.state = 'error';
        row.output = null;
        const error = {
          name: 'Error',
          message: `The output of step "${msg.name}" is ${size} bytes; the limit is ${MAX_PAYLOAD} bytes (1 MiB)`,
        };
        row.error = errorText(error);
        reply = { final: error };
      } else {
        reply = { ok: true };
      }
    } else {
      const limit = msg.config.retries.limit;
      if (msg.nonRetryable || attempts.length > limit) {
        row.state = 'error';
        row.error = errorText(msg.error);
        reply = { final: msg.error };
      } else {
        const delayMs = parseDuration(msg.config.retries.delay) ?? 0;
        const delay = retryDelay(delayMs, msg.config.retries.backoff as Backoff, attempts.length);
        row.state = 'running';
        row.error = errorText(msg.error);
        row.end_at = null;
        if (delay > 0) {
          retryAt = now + delay;
          att.waits.add('retry');
        }
        reply = { retryIn: delay };
      }
    }
    if (retryAt !== undefined) {
      const due = retryAt;
      await this.writes.run(async (tx) => {
        await this.upsertStep(tx, row);
        await this.putTimer(tx, att, msg.key, 'retry', due);
      });
    } else {
      await this.writes.run((tx) => this.upsertStep(tx, row));
    }
    att.steps.set(msg.key, row);
    if (att.control !== 'run') return { stop: true };
    return reply;
  }

  private async onSleep(att: Attempt, msg: Extract<AttemptRpc, { op: 'sleep' }>): Promise<unknown> {
    const now = this.now();
    const prev = att.steps.get(msg.key);
    if (prev) {
      if (prev.state === 'finished') return att.control === 'run' ? { done: true } : { stop: true };
      att.waits.add('sleep');
      return att.control === 'run' ? { suspend: true } : { stop: true };
    }
    const due = msg.untilMs ?? now + (msg.durationMs ?? 0);
    if (due - now > YEAR_MS) {
      return {
        final: {
          name: 'RangeError',
          message: `step.sleepUntil: ${new Date(due).toISOString()} is more than 365 days ahead`,
        },
      };
    }
    const row: WfStepsTable = {
      iid: att.iid,
      generation: att.generation,
      key: msg.key,
      seq: this.nextSeq(),
      type: 'sleep',
      name: msg.name,
      count: msg.count,
      state: due <= now ? 'finished' : 'waiting',
      output: null,
      error: null,
      config: null,
      attempts: null,
      event_type: null,
      start_at: new Date(now).toISOString(),
      end_at: new Date(due).toISOString(),
    };
    if (row.state === 'finished') {
      await this.writes.run((tx) => this.upsertStep(tx, row));
      att.steps.set(msg.key, row);
      return att.control === 'run' ? { done: true } : { stop: true };
    }
    await this.writes.run(async (tx) => {
      await this.upsertStep(tx, row);
      await this.putTimer(tx, att, msg.key, 'sleep', due);
    });
    att.steps.set(msg.key, row);
    att.waits.add('sleep');
    return att.control === 'run' ? { suspend: true } : { stop: true };
  }

  private async onWait(att: Attempt, msg: Extract<AttemptRpc, { op: 'wait' }>): Promise<unknown> {
    const prev = att.steps.get(msg.key);
    const gate = (reply: unknown) => (att.control === 'run' ? reply : { stop: true });
    if (prev) {
      if (prev.state === 'ok') return gate({ event: JSON.parse(prev.output!) as unknown });
      if (prev.state === 'error') return gate({ final: JSON.parse(prev.error!) as ErrorView });
      att.waits.add('wait');
      return gate({ suspend: true });
    }
    const now = this.now();
    const ts = new Date(now).toISOString();
    const event = await this.db
      .selectFrom('wf_events')
      .select(['eid', 'payload', 'created_on'])
      .where('iid', '=', att.iid)
      .where('consumed', '=', 0)
      .where('type', '=', msg.type)
      .orderBy('seq')
      .limit(1)
      .executeTakeFirst();
    const row: WfStepsTable = {
      iid: att.iid,
      generation: att.generation,
      key: msg.key,
      seq: this.nextSeq(),
      type: 'waitForEvent',
      name: msg.name,
      count: msg.count,
      state: 'waiting',
      output: null,
      error: null,
      config: JSON.stringify({ timeout: msg.timeoutMs }),
      attempts: null,
      event_type: msg.type,
      start_at: ts,
      end_at: new Date(now + msg.timeoutMs).toISOString(),
    };
    if (event) {
      const delivered = {
        type: msg.type,
        payload: JSON.parse(event.payload) as unknown,
        timestamp: Date.parse(event.created_on),
      };
      row.state = 'ok';
      row.output = JSON.stringify(delivered);
      row.end_at = ts;
      await this.writes.run(async (tx) => {
        await tx
          .updateTable('wf_events')
          .set({ consumed: 1 })
          .where('eid', '=', event.eid)
          .execute();
        await this.upsertStep(tx, row);
      });
      att.steps.set(msg.key, row);
      return gate({ event: delivered });
    }
    await this.writes.run(async (tx) => {
      await this.upsertStep(tx, row);
      await this.putTimer(tx, att, msg.key, 'event_timeout', now + msg.timeoutMs);
    });
    att.steps.set(msg.key, row);
    att.waits.add('wait');
    return gate({ suspend: true });
  }

  // ==== events ===================================================================================

  async sendEvent(
    accountId: string,
    workflow: string,
    id: string,
    type: string,
    payload: Encoded,
  ): Promise<WfInstancesTable> {
    if (typeof type !== 'string' || type.length === 0 || type.length > 100) {
      throw apiError(
        'workflow_invalid',
        'event type must be a non-empty string of at most 100 characters',
      );
    }
    const text = JSON.stringify(payload === undefined ? { $t: 'u' } : payload);
    const size = byteLength(text);
    if (size > MAX_PAYLOAD) throw apiError('workflow_payload_too_large', 'The event payload', size);
    const found = await this.requireInstance(accountId, workflow, id);
    return this.withLock(found.iid, async () => {
      const inst = await getInstanceByIid(this.db, found.iid);
      if (!inst) throw apiError('workflow_instance_not_found');
      if (FINAL.has(inst.status)) {
        throw new ApiError(409, [
          {
            code: 10212,
            message: `(instance.not_running) Instance is ${inst.status}; it no longer receives events`,
          },
        ]);
      }
      const now = this.now();
      const ts = new Date(now).toISOString();
      const waiting = await this.db
        .selectFrom('wf_steps')
        .selectAll()
        .where('iid', '=', inst.iid)
        .where('generation', '=', inst.generation)
        .where('type', '=', 'waitForEvent')
        .where('state', '=', 'waiting')
        .where('event_type', '=', type)
        .orderBy('seq')
        .limit(1)
        .executeTakeFirst();
      if (!waiting) {
        await this.writes.run((tx) =>
          tx
            .insertInto('wf_events')
            .values({
              eid: hexId(),
              iid: inst.iid,
              type,
              payload: text,
              seq: this.nextSeq(),
              consumed: 0,
              created_on: ts,
            })
            .execute(),
        );
        return inst;
      }
      const step: WfStepsTable = {
        ...toStep(waiting),
        state: 'ok',
        output: JSON.stringify({ type, payload, timestamp: now }),
        end_at: ts,
      };
      await this.writes.run(async (tx) => {
        await tx
          .updateTable('wf_steps')
          .set({ state: 'ok', output: step.output, end_at: ts })
          .where('iid', '=', inst.iid)
          .where('generation', '=', inst.generation)
          .where('key', '=', waiting.key)
          .execute();
        await tx
          .deleteFrom('wf_timers')
          .where('iid', '=', inst.iid)
          .where('key', '=', waiting.key)
          .execute();
      });
      const att = this.executing.get(inst.iid);
      if (att && att.generation === inst.generation) att.steps.set(step.key, step);
      if (inst.status !== 'paused') await this.wake(inst);
      return inst;
    });
  }

  // ==== control ==================================================================================

  private async locked<T>(
    accountId: string,
    workflow: string,
    id: string,
    fn: (inst: WfInstancesTable) => Promise<T>,
  ): Promise<T> {
    const found = await this.requireInstance(accountId, workflow, id);
    return this.withLock(found.iid, async () => {
      const inst = await getInstanceByIid(this.db, found.iid);
      if (!inst) throw apiError('workflow_instance_not_found');
      return fn(inst);
    });
  }

  /** running/waiting/queued → paused (through waitingForPause while a step is in flight). */
  async pause(accountId: string, workflow: string, id: string): Promise<WfInstancesTable> {
    return this.locked(accountId, workflow, id, async (inst) => {
      if (FINAL.has(inst.status)) throw apiError('workflow_cannot_pause');
      if (inst.status === 'paused' || inst.status === 'waitingForPause') return inst;
      const att = this.executing.get(inst.iid);
      if (att) {
        att.control = 'pause';
        await this.setStatus(inst, 'waitingForPause', new Date(this.now()).toISOString());
        return inst;
      }
      await this.pauseNow(inst);
      return inst;
    });
  }

  /** waitingForPause → running; paused → waiting (timers shifted by the pause) or queued. */
  async resume(accountId: string, workflow: string, id: string): Promise<WfInstancesTable> {
    return this.locked(accountId, workflow, id, async (inst) => {
      if (FINAL.has(inst.status)) throw apiError('workflow_cannot_resume');
      const now = this.now();
      const ts = new Date(now).toISOString();
      if (inst.status === 'waitingForPause') {
        const att = this.executing.get(inst.iid);
        if (att) att.control = 'run';
        await this.setStatus(inst, 'running', ts);
        if (!att) this.startAttempt(inst, false);
        return inst;
      }
      if (inst.status !== 'paused') return inst;
      const shift = Math.max(0, now - (inst.paused_at ?? now));
      const timers = (
        await this.db.selectFrom('wf_timers').selectAll().where('iid', '=', inst.iid).execute()
      ).map(toTimer);
      const hold = timers.some((t) => t.kind === 'retry' || t.kind === 'resume');
      const next: Status = timers.length > 0 && !hold ? 'waiting' : 'queued';
      await this.writes.run(async (tx) => {
        if (shift > 0 && timers.length > 0) {
          await tx
            .updateTable('wf_timers')
            .set({ due_at: sql<number>`due_at + ${shift}` })
            .where('iid', '=', inst.iid)
            .execute();
          const waiting = await tx
            .selectFrom('wf_steps')
            .select(['key', 'end_at'])
            .where('iid', '=', inst.iid)
            .where('generation', '=', inst.generation)
            .where('state', '=', 'waiting')
            .execute();
          for (const s of waiting) {
            if (!s.end_at) continue;
            await tx
              .updateTable('wf_steps')
              .set({ end_at: new Date(Date.parse(s.end_at) + shift).toISOString() })
              .where('iid', '=', inst.iid)
              .where('generation', '=', inst.generation)
              .where('key', '=', s.key)
              .execute();
          }
        }
        await tx
          .updateTable('wf_instances')
          .set({ status: next, modified_on: ts, paused_at: null, priority: 0, queued_at: now })
          .where('iid', '=', inst.iid)
          .execute();
      });
      inst.status = next;
      inst.paused_at = null;
      for (const t of timers) this.armAt(t.due_at + shift);
      if (next === 'queued') {
        this.hasQueued.add(wfKey(inst.account_id, inst.workflow));
        this.schedulePump();
      }
      return inst;
    });
  }

  async terminate(
    accountId: string,
    workflow: string,
    id: string,
    source: TriggerSource,
  ): Promise<WfInstancesTable> {
    return this.locked(accountId, workflow, id, async (inst) => {
      if (FINAL.has(inst.status)) throw apiError('workflow_cannot_terminate');
      this.detach(inst.iid);
      await this.end(inst, 'terminated', {
        error: { name: 'Terminated', message: 'The instance was terminated', source },
      });
      return inst;
    });
  }

  /** From any status: a new generation (optionally keeping the steps before `from`), queued again. */
  async restart(
    accountId: string,
    workflow: string,
    id: string,
    from?: { name: string; count?: number; type?: string },
  ): Promise<WfInstancesTable> {
    return this.locked(accountId, workflow, id, async (inst) => {
      const now = this.now();
      const ts = new Date(now).toISOString();
      let keep: WfStepsTable[] = [];
      if (from) {
        const steps = await stepsOf(this.db, inst.iid, inst.generation);
        const type = from.type ?? 'do';
        const target = steps.find(
          (s) => s.name === from.name && s.type === type && s.count === (from.count ?? 1),
        );
        if (!target)
          throw apiError(
            'workflow_cannot_restart',
            `Step "${from.name}" not found in execution history`,
          );
        keep = steps.filter(
          (s) =>
            s.seq < target.seq &&
            (s.state === 'ok' || s.state === 'error' || s.state === 'finished'),
        );
      }
      this.detach(inst.iid);
      const generation = inst.generation + 1;
      await this.writes.run(async (tx) => {
        await tx.deleteFrom('wf_timers').where('iid', '=', inst.iid).execute();
        await tx.deleteFrom('wf_events').where('iid', '=', inst.iid).execute();
        await tx.deleteFrom('wf_steps').where('iid', '=', inst.iid).execute();
        for (const s of keep)
          await tx
            .insertInto('wf_steps')
            .values({ ...s, generation })
            .execute();
        await tx
          .updateTable('wf_instances')
          .set({
            status: 'queued',
            generation,
            modified_on: ts,
            started_on: null,
            ended_on: null,
            output: null,
            error: null,
            paused_at: null,
            expires_at: null,
            priority: 1,
            queued_at: now,
          })
          .where('iid', '=', inst.iid)
          .execute();
      });
      this.leaveActive(inst);
      inst.status = 'queued';
      inst.generation = generation;
      this.infraFailures.delete(inst.iid);
      this.hasQueued.add(wfKey(inst.account_id, inst.workflow));
      this.schedulePump();
      return inst;
    });
  }

  /**
   * Stops an instance's attempt without waiting for it: its next call is told to stop and what it
   * reports is discarded, so a new attempt (after a restart) may start while its step finishes.
   */
  private detach(iid: string): void {
    const att = this.executing.get(iid);
    if (!att) return;
    att.control = 'stop';
    this.executing.delete(iid);
  }

  async deleteInstance(accountId: string, workflow: string, id: string): Promise<void> {
    await this.locked(accountId, workflow, id, async (inst) => {
      this.detach(inst.iid);
      await this.writes.run((tx) => deleteInstanceRows(tx, [inst.iid]));
      this.leaveActive(inst);
    });
  }

  /** Removes a workflow's instances (its definition is removed by the caller). */
  async deleteWorkflow(accountId: string, workflow: string): Promise<void> {
    const k = wfKey(accountId, workflow);
    for (const att of [...this.executing.values()]) {
      if (att.accountId === accountId && att.workflow === workflow) this.detach(att.iid);
    }
    for (;;) {
      const rows = await this.db
        .selectFrom('wf_instances')
        .select('iid')
        .where('account_id', '=', accountId)
        .where('workflow', '=', workflow)
        .limit(500)
        .execute();
      if (rows.length === 0) break;
      await this.writes.run((tx) =>
        deleteInstanceRows(
          tx,
          rows.map((r) => r.iid),
        ),
      );
    }
    this.active.delete(k);
    this.hasQueued.delete(k);
    this.defs.delete(k);
    this.registry.cron.set(`workflow:${accountId}/${workflow}`, []);
  }

  /** Forgets cached definitions after a script or workflow change. */
  forget(accountId: string, workflow: string): void {
    this.defs.delete(wfKey(accountId, workflow));
  }

  // ==== timers, retention, schedules =============================================================

  private armAt(due: number): void {
    if (this.stopped) return;
    if (this.timer && due >= this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    const wait = Math.max(0, Math.min(this.ctx.config.workflowsPollMs, due - this.now()));
    this.timerAt = this.now() + wait;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Infinity;
      this.requestTick();
    }, wait);
  }

  private requestTick(): void {
    if (this.stopped) return;
    if (this.ticking) {
      this.tickAgain = true;
      return;
    }
    this.ticking = true;
    this.spawn(
      (async () => {
        try {
          do {
            this.tickAgain = false;
            await this.tick();
          } while (this.tickAgain && !this.stopped);
        } finally {
          this.ticking = false;
          this.armAt(await this.nextDue());
        }
      })(),
    );
  }

  private async nextDue(): Promise<number> {
    if (this.stopped) return Infinity;
    const row = await this.db
      .selectFrom('wf_timers')
      .innerJoin('wf_instances', 'wf_instances.iid', 'wf_timers.iid')
      .select((eb) => eb.fn.min('wf_timers.due_at').as('due'))
      .where('wf_instances.status', '!=', 'paused')
      .executeTakeFirst();
    const due = row?.due;
    return due === null || due === undefined
      ? this.now() + this.ctx.config.workflowsPollMs
      : Number(due);
  }

  /** Fires due timers and collects expired instances. */
  private async tick(): Promise<void> {
    const now = this.now();
    for (;;) {
      const due = (
        await this.db
          .selectFrom('wf_timers')
          .innerJoin('wf_instances', 'wf_instances.iid', 'wf_timers.iid')
          .selectAll('wf_timers')
          .where('wf_timers.due_at', '<=', now)
          .where('wf_instances.status', '!=', 'paused')
          .orderBy('wf_timers.due_at')
          .limit(500)
          .execute()
      ).map(toTimer);
      if (due.length === 0) break;
      await Promise.all(
        due.map((t) =>
          this.withLock(t.iid, () => this.fire(t.iid, t.key, t.generation, t.kind, now)),
        ),
      );
      if (due.length < 500 || this.stopped) break;
    }
    // Expired instances are looked for once a second, or at once when the clock jumped a minute.
    if (Date.now() - this.lastCollect.real >= 1000 || now - this.lastCollect.clock >= 60_000) {
      this.lastCollect = { real: Date.now(), clock: now };
      await this.collectExpired(now);
    }
  }

  private async fire(
    iid: string,
    key: string,
    generation: number,
    kind: TimerKind,
    now: number,
  ): Promise<void> {
    const inst = await getInstanceByIid(this.db, iid);
    const timer = await this.db
      .selectFrom('wf_timers')
      .select('due_at')
      .where('iid', '=', iid)
      .where('key', '=', key)
      .executeTakeFirst();
    if (!timer || Number(timer.due_at) > now) return;
    if (!inst || inst.generation !== generation || FINAL.has(inst.status)) {
      await this.writes.run((tx) =>
        tx.deleteFrom('wf_timers').where('iid', '=', iid).where('key', '=', key).execute(),
      );
      return;
    }
    if (inst.status === 'paused') return;
    const ts = new Date(now).toISOString();
    const att = this.executing.get(iid);
    const plan = await this.planWake(inst);
    await this.writes.run(async (tx) => {
      await tx.deleteFrom('wf_timers').where('iid', '=', iid).where('key', '=', key).execute();
      if (plan.set)
        await tx.updateTable('wf_instances').set(plan.set).where('iid', '=', iid).execute();
      if (kind === 'sleep') {
        await tx
          .updateTable('wf_steps')
          .set({ state: 'finished' })
          .where('iid', '=', iid)
          .where('generation', '=', generation)
          .where('key', '=', key)
          .where('state', '=', 'waiting')
          .execute();
      } else if (kind === 'event_timeout') {
        const step = await tx
          .selectFrom('wf_steps')
          .select(['config'])
          .where('iid', '=', iid)
          .where('generation', '=', generation)
          .where('key', '=', key)
          .where('state', '=', 'waiting')
          .executeTakeFirst();
        if (step) {
          const timeout = (JSON.parse(step.config ?? '{}') as { timeout?: number }).timeout ?? 0;
          const error = {
            name: 'WorkflowTimeoutError',
            message: `Execution timed out after ${timeout}ms`,
          };
          await tx
            .updateTable('wf_steps')
            .set({ state: 'error', error: errorText(error), end_at: ts })
            .where('iid', '=', iid)
            .where('generation', '=', generation)
            .where('key', '=', key)
            .execute();
        }
      }
    });
    if (att && att.generation === generation) {
      const s = att.steps.get(key);
      if (s && kind === 'sleep' && s.state === 'waiting')
        att.steps.set(key, { ...s, state: 'finished' });
      if (s && kind === 'event_timeout' && s.state === 'waiting') att.steps.delete(key);
    }
    plan.after();
  }

  private async collectExpired(now: number): Promise<void> {
    for (;;) {
      const rows = await this.db
        .selectFrom('wf_instances')
        .select(['iid', 'account_id', 'workflow'])
        .where('expires_at', '<=', now)
        .limit(500)
        .execute();
      if (rows.length === 0) return;
      await this.writes.run((tx) =>
        deleteInstanceRows(
          tx,
          rows.map((r) => r.iid),
        ),
      );
      if (rows.length < 500) return;
    }
  }

  armSchedules(accountId: string, def: StoredWorkflow): void {
    this.registry.cron.set(
      `workflow:${accountId}/${def.name}`,
      def.schedules.map((s) => ({
        cron: parseCronOrThrow(s.cron),
        fire: async (scheduledTime: number) => {
          await this.create(accountId, def.name, [{ params: {} }], 'cron', {
            skipExisting: false,
            schedule: { cron: s.cron, scheduledTime },
          });
        },
      })),
    );
  }

  nextInstanceTimes(accountId: string, name: string): (number | undefined)[] {
    return this.registry.cron.nextOf(`workflow:${accountId}/${name}`);
  }

  // ==== lifecycle ================================================================================

  async start(): Promise<void> {
    this.stopped = false;
    const counts = await this.db
      .selectFrom('wf_instances')
      .select(['account_id', 'workflow', (eb) => eb.fn.countAll<number>().as('n')])
      .where('status', 'in', ['running', 'waitingForPause'])
      .groupBy(['account_id', 'workflow'])
      .execute();
    for (const c of counts) this.active.set(wfKey(c.account_id, c.workflow), Number(c.n));
    const queued = await this.db
      .selectFrom('wf_instances')
      .select(['account_id', 'workflow'])
      .distinct()
      .where('status', '=', 'queued')
      .execute();
    for (const q of queued) this.hasQueued.add(wfKey(q.account_id, q.workflow));
    // Instances that were executing when the process stopped run again; those holding for a retry
    // or resume timer wait for it.
    const holding = new Set(
      (
        await this.db
          .selectFrom('wf_timers')
          .select('iid')
          .where('kind', 'in', ['retry', 'resume'])
          .execute()
      ).map((r) => r.iid),
    );
    const running = (
      await this.db
        .selectFrom('wf_instances')
        .selectAll()
        .where('status', 'in', ['running', 'waitingForPause'])
        .execute()
    ).map(toInstance);
    for (const inst of running) {
      if (inst.status === 'waitingForPause') {
        await this.withLock(inst.iid, () => this.pauseNow(inst));
      } else if (!holding.has(inst.iid)) {
        this.startAttempt(inst, false);
      }
    }
    for (const doc of await workflowDefs.all(this.ctx.database.db, null)) {
      if (doc.body.schedules.length > 0) this.armSchedules(doc.scopeId, doc.body);
    }
    this.requestTick();
    this.schedulePump();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const att of this.executing.values()) att.control = 'stop';
    // Attempts in flight end on their own (their next RPC is told to stop); wait briefly for the
    // engine's own tasks so the database is not closed under them.
    const deadline = Date.now() + 5000;
    while (this.background.size > 0 && Date.now() < deadline) {
      await Promise.race([
        Promise.allSettled([...this.background]),
        new Promise((r) => setTimeout(r, 100)),
      ]);
    }
  }

  /** For views: whether an instance has an attempt executing right now. */
  isExecuting(iid: string): boolean {
    return this.executing.has(iid);
  }
}

function cacheEntry(s: WfStepsTable): CacheEntry | undefined {
  if (s.type === 'sleep') return s.state === 'finished' ? { f: 1 } : undefined;
  if (s.state === 'ok') return { v: JSON.parse(s.output!) as Encoded };
  if (s.state === 'error') return { e: JSON.parse(s.error!) as ErrorView };
  return undefined;
}

function parseCronOrThrow(text: string) {
  try {
    return parseCron(text);
  } catch (err) {
    if (err instanceof CronError) throw apiError('workflow_invalid', `schedules: ${err.message}`);
    throw err;
  }
}
