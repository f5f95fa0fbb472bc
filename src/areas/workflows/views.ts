/** How workflows and instances look on the wire (REST) and to bindings. */
import { toPlain } from './encoding.ts';
import type { Status, StoredWorkflow, WfInstancesTable, WfStepsTable } from './store.ts';

interface ErrorWithSource {
  name: string;
  message: string;
  source?: string;
}

function parseError(inst: WfInstancesTable): ErrorWithSource | null {
  return inst.error ? (JSON.parse(inst.error) as ErrorWithSource) : null;
}

export function workflowView(
  def: StoredWorkflow,
  counts: Partial<Record<Status, number>>,
  triggeredOn: string | null,
  next: (number | undefined)[],
) {
  const view: Record<string, unknown> = {
    id: def.id,
    name: def.name,
    class_name: def.class_name,
    script_name: def.script_name,
    created_on: def.created_on,
    modified_on: def.modified_on,
    triggered_on: triggeredOn,
    instances: counts,
  };
  if (def.schedules.length > 0) {
    view.schedules = def.schedules.map((s, i) => ({
      cron: s.cron,
      next_instance: next[i] === undefined ? null : new Date(next[i]!).toISOString(),
    }));
  }
  return view;
}

export function putWorkflowView(def: StoredWorkflow, triggeredOn: string | null) {
  return {
    id: def.id,
    name: def.name,
    class_name: def.class_name,
    script_name: def.script_name,
    created_on: def.created_on,
    modified_on: def.modified_on,
    triggered_on: triggeredOn,
    version_id: def.version_id,
    is_deleted: 0,
    terminator_running: 0,
  };
}

export function versionView(def: StoredWorkflow, v: StoredWorkflow['versions'][number]) {
  return {
    id: v.id,
    workflow_id: def.id,
    class_name: v.class_name,
    created_on: v.created_on,
    modified_on: v.modified_on,
    has_dag: false,
    language: 'javascript',
    limits: v.limits,
    concurrency: v.concurrency,
    default_retention: v.default_retention,
  };
}

export function createdView(inst: WfInstancesTable) {
  return {
    id: inst.id,
    status: inst.status,
    version_id: inst.version_id,
    workflow_id: inst.workflow_id,
    trigger_source: inst.trigger_source,
  };
}

export function listItemView(inst: WfInstancesTable) {
  return {
    id: inst.id,
    status: inst.status,
    created_on: inst.created_on,
    modified_on: inst.modified_on,
    started_on: inst.started_on,
    ended_on: inst.ended_on,
    version_id: inst.version_id,
    workflow_id: inst.workflow_id,
    trigger_source: inst.trigger_source,
  };
}

/** `{status, error?, output?}`; `encoded` keeps the output in the wrapper's encoding (bindings). */
export function statusView(inst: WfInstancesTable, encoded: boolean) {
  const out: { status: Status; error?: { name: string; message: string }; output?: unknown } = {
    status: inst.status,
  };
  const err = parseError(inst);
  if (err && inst.status !== 'terminated') out.error = { name: err.name, message: err.message };
  if (inst.output !== null) {
    const value = JSON.parse(inst.output) as unknown;
    out.output = encoded ? value : toPlain(value);
  }
  return out;
}

/** Longest step output shown in an instance's history (the `/step` endpoint has it all). */
const HISTORY_OUTPUT_CHARS = 1024;

function redacted(s: WfStepsTable): boolean {
  const config = s.config ? (JSON.parse(s.config) as { sensitive?: string }) : {};
  return config.sensitive === 'output';
}

/** A step's output in the history: JSON text, truncated, as the official schema types it. */
function historyOutput(value: unknown): string {
  const text = JSON.stringify(value === undefined ? null : value);
  return text.length > HISTORY_OUTPUT_CHARS ? text.slice(0, HISTORY_OUTPUT_CHARS) : text;
}

function stepOutput(s: WfStepsTable): string | null {
  if (s.output === null) return null;
  if (redacted(s)) return '[REDACTED]';
  return historyOutput(toPlain(JSON.parse(s.output)));
}

/** An instance's output in its details: strings and numbers as they are, anything else as JSON text. */
function instanceOutput(text: string | null): string | number | null {
  if (text === null) return null;
  const value = toPlain(JSON.parse(text));
  if (typeof value === 'string' || typeof value === 'number') return value;
  return JSON.stringify(value);
}

export function stepView(s: WfStepsTable) {
  const error = s.error ? (JSON.parse(s.error) as { name: string; message: string }) : null;
  if (s.type === 'sleep') {
    return {
      type: 'sleep',
      name: s.name,
      start: s.start_at,
      end: s.end_at,
      finished: s.state === 'finished',
      error: null,
    };
  }
  if (s.type === 'waitForEvent') {
    const delivered = s.output ? (JSON.parse(s.output) as { payload: unknown }) : undefined;
    const view: Record<string, unknown> = {
      type: 'waitForEvent',
      name: s.name,
      start: s.start_at,
      end: s.end_at,
      finished: s.state === 'ok' || s.state === 'error',
      error,
      event_type: s.event_type ?? undefined,
    };
    if (delivered) view.output = historyOutput(toPlain(delivered.payload));
    return view;
  }
  const attempts = s.attempts
    ? (JSON.parse(s.attempts) as {
        start: string;
        end: string | null;
        success: boolean | null;
        error: unknown;
      }[])
    : [];
  return {
    type: 'step',
    name: s.name,
    start: s.start_at,
    end: s.state === 'ok' || s.state === 'error' ? s.end_at : null,
    success: s.state === 'ok' ? true : s.state === 'error' ? false : null,
    output: stepOutput(s),
    error: s.state === 'error' ? error : null,
    config: s.config ? JSON.parse(s.config) : null,
    attempts,
  };
}

export function detailsView(
  inst: WfInstancesTable,
  steps: WfStepsTable[],
  opts: { order: 'asc' | 'desc'; simple: boolean },
) {
  const err = parseError(inst);
  const list: unknown[] = opts.simple ? [] : steps.map(stepView);
  if (!opts.simple && inst.status === 'terminated')
    list.push({ type: 'termination', trigger: { source: err?.source ?? 'api' } });
  if (opts.order === 'desc') list.reverse();
  const view: Record<string, unknown> = {
    id: inst.id,
    status: inst.status,
    params: toPlain(JSON.parse(inst.params)),
    trigger: { source: inst.trigger_source },
    versionId: inst.version_id,
    queued: inst.created_on,
    start: inst.started_on,
    end: inst.ended_on,
    success:
      inst.status === 'complete'
        ? true
        : inst.status === 'errored' || inst.status === 'terminated'
          ? false
          : null,
    output: instanceOutput(inst.output),
    error: err && inst.status !== 'terminated' ? { name: err.name, message: err.message } : null,
    rollback: null,
    step_count: steps.filter((s) => s.type !== 'sleep').length,
    steps: list,
  };
  if (inst.schedule) view.schedule = JSON.parse(inst.schedule);
  return view;
}

/** `GET …/step?name=&type=`: one step's full output. */
export function stepStatusView(s: WfStepsTable) {
  const status =
    s.state === 'ok' || s.state === 'finished'
      ? 'complete'
      : s.state === 'error'
        ? 'errored'
        : s.state === 'waiting'
          ? 'waiting'
          : 'running';
  const error = s.error ? (JSON.parse(s.error) as { name: string; message: string }) : null;
  const view: Record<string, unknown> = {
    status,
    error: status === 'complete' ? null : error,
    output: null,
  };
  if (s.type === 'waitForEvent') {
    view.event_type = s.event_type;
    if (s.output) view.output = toPlain((JSON.parse(s.output) as { payload: unknown }).payload);
  } else if (status === 'complete' && s.output !== null) {
    view.output = redacted(s) ? '[REDACTED]' : toPlain(JSON.parse(s.output));
  }
  return view;
}
