/**
 * Workflow definitions are documents (few, account-scoped, keyed by name). Instances, step results,
 * timers and events live in their own tables (migration 0003_workflows); this file types them and
 * converts rows (PostgreSQL returns BIGINT columns as strings).
 */
import type { Kysely, Transaction } from 'kysely';
import { defineCollection } from '../../core/storage/collection.ts';

export interface WorkflowVersion {
  id: string;
  class_name: string;
  script_name: string;
  created_on: string;
  modified_on: string;
  limits: { steps?: number };
  concurrency: { limit?: number };
  default_retention: { success_retention?: number; error_retention?: number };
}

export interface StoredWorkflow {
  id: string;
  name: string;
  class_name: string;
  script_name: string;
  version_id: string;
  created_on: string;
  modified_on: string;
  limits: { steps?: number };
  concurrency: { limit?: number };
  /** Milliseconds. */
  default_retention: { success_retention?: number; error_retention?: number };
  schedules: { cron: string }[];
  versions: WorkflowVersion[];
}

export const workflowDefs = defineCollection<StoredWorkflow, 'script'>({
  kind: 'workflow',
  indexes: { script: (w: StoredWorkflow) => w.script_name },
});

export type Status =
  | 'queued'
  | 'running'
  | 'paused'
  | 'errored'
  | 'terminated'
  | 'complete'
  | 'waitingForPause'
  | 'waiting'
  | 'unknown';

export const STATUSES: Status[] = [
  'queued',
  'running',
  'paused',
  'errored',
  'terminated',
  'complete',
  'waitingForPause',
  'waiting',
];
export const FINAL: ReadonlySet<Status> = new Set(['complete', 'errored', 'terminated']);
/** Statuses that hold a concurrency slot. */
export const ACTIVE: ReadonlySet<Status> = new Set(['running', 'waitingForPause']);

export interface WfInstancesTable {
  iid: string;
  account_id: string;
  workflow: string;
  id: string;
  workflow_id: string;
  version_id: string;
  status: Status;
  generation: number;
  params: string;
  output: string | null;
  error: string | null;
  trigger_source: string;
  created_on: string;
  modified_on: string;
  started_on: string | null;
  ended_on: string | null;
  queued_at: number;
  priority: number;
  paused_at: number | null;
  success_retention: number | null;
  error_retention: number | null;
  expires_at: number | null;
  schedule: string | null;
}

export type StepType = 'do' | 'sleep' | 'waitForEvent';
/** `running` = retrying, `waiting` = sleeping or waiting for an event; `ok`/`error`/`finished` are final. */
export type StepState = 'running' | 'waiting' | 'ok' | 'error' | 'finished';

export interface WfStepsTable {
  iid: string;
  generation: number;
  key: string;
  seq: number;
  type: StepType;
  name: string;
  count: number;
  state: StepState;
  output: string | null;
  error: string | null;
  config: string | null;
  attempts: string | null;
  event_type: string | null;
  start_at: string;
  end_at: string | null;
}

export type TimerKind = 'sleep' | 'retry' | 'event_timeout' | 'resume';

export interface WfTimersTable {
  iid: string;
  key: string;
  generation: number;
  kind: TimerKind;
  due_at: number;
}

export interface WfEventsTable {
  eid: string;
  iid: string;
  type: string;
  payload: string;
  seq: number;
  consumed: number;
  created_on: string;
}

export interface WfSchema {
  wf_instances: WfInstancesTable;
  wf_steps: WfStepsTable;
  wf_timers: WfTimersTable;
  wf_events: WfEventsTable;
}

export type WfDb = Kysely<WfSchema>;
export type WfTx = Transaction<WfSchema>;
export type WfExec = WfDb | WfTx;

const num = (v: unknown): number => (typeof v === 'number' ? v : Number(v));
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : num(v));

export function toInstance(r: WfInstancesTable): WfInstancesTable {
  return {
    ...r,
    generation: num(r.generation),
    queued_at: num(r.queued_at),
    priority: num(r.priority),
    paused_at: numOrNull(r.paused_at),
    success_retention: numOrNull(r.success_retention),
    error_retention: numOrNull(r.error_retention),
    expires_at: numOrNull(r.expires_at),
  };
}

export function toStep(r: WfStepsTable): WfStepsTable {
  return { ...r, generation: num(r.generation), seq: num(r.seq), count: num(r.count) };
}

export function toTimer(r: WfTimersTable): WfTimersTable {
  return { ...r, generation: num(r.generation), due_at: num(r.due_at) };
}

export async function getInstance(
  db: WfExec,
  accountId: string,
  workflow: string,
  id: string,
): Promise<WfInstancesTable | undefined> {
  const row = await db
    .selectFrom('wf_instances')
    .selectAll()
    .where('account_id', '=', accountId)
    .where('workflow', '=', workflow)
    .where('id', '=', id)
    .executeTakeFirst();
  return row ? toInstance(row) : undefined;
}

export async function getInstanceByIid(
  db: WfExec,
  iid: string,
): Promise<WfInstancesTable | undefined> {
  const row = await db
    .selectFrom('wf_instances')
    .selectAll()
    .where('iid', '=', iid)
    .executeTakeFirst();
  return row ? toInstance(row) : undefined;
}

export async function stepsOf(
  db: WfExec,
  iid: string,
  generation: number,
): Promise<WfStepsTable[]> {
  const rows = await db
    .selectFrom('wf_steps')
    .selectAll()
    .where('iid', '=', iid)
    .where('generation', '=', generation)
    .execute();
  return rows.map(toStep).sort((a, b) => a.seq - b.seq);
}

/** Deletes an instance and everything it owns. */
export async function deleteInstanceRows(tx: WfExec, iids: string[]): Promise<void> {
  if (iids.length === 0) return;
  await tx.deleteFrom('wf_steps').where('iid', 'in', iids).execute();
  await tx.deleteFrom('wf_timers').where('iid', 'in', iids).execute();
  await tx.deleteFrom('wf_events').where('iid', 'in', iids).execute();
  await tx.deleteFrom('wf_instances').where('iid', 'in', iids).execute();
}
