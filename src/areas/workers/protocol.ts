/**
 * Messages between the generated wrapper (inside the runtime) and the workflows engine (in Node).
 * Values are in the wrapper's tagged JSON encoding (`Encoded`).
 */
export type Encoded = unknown;

export interface ErrorView {
  name: string;
  message: string;
}

/** A memoised step as the wrapper reads it: a value, an error, or a finished sleep. */
export type CacheEntry = { v: Encoded } | { e: ErrorView } | { f: 1 };

/** Engine → script: run one attempt. */
export interface AttemptRequest {
  attemptId: string;
  instanceId: string;
  className: string;
  params: Encoded;
  /** Instance creation time, ms since the epoch. */
  timestamp: number;
  cache: Record<string, CacheEntry>;
  /** Failed attempts so far of steps still being retried. */
  attempts: Record<string, number>;
  stepLimit: number;
  /** After this long (ms) the attempt stops after its current step and answers `yielded`. */
  yieldAfterMs: number;
}

export type AttemptOutcome =
  | { outcome: 'complete'; output: Encoded }
  | { outcome: 'error'; error: ErrorView; fatal?: boolean }
  | { outcome: 'suspended'; yielded?: boolean };

export interface StepConfigView {
  retries: {
    limit: number;
    delay: number | string;
    backoff: 'constant' | 'linear' | 'exponential';
  };
  timeout: number | string;
  sensitive?: 'output';
}

/** Script → engine, within an attempt. */
export type AttemptRpc =
  | {
      op: 'step';
      attempt: string;
      key: string;
      name: string;
      count: number;
      config: StepConfigView;
      elapsedMs: number;
      value?: Encoded;
      error?: ErrorView;
      nonRetryable?: boolean;
    }
  | {
      op: 'sleep';
      attempt: string;
      key: string;
      name: string;
      count: number;
      durationMs?: number;
      untilMs?: number;
    }
  | {
      op: 'wait';
      attempt: string;
      key: string;
      name: string;
      count: number;
      type: string;
      timeoutMs: number;
    };

export interface RetentionInput {
  success?: number | string;
  error?: number | string;
}

export interface BindingCreateItem {
  id?: unknown;
  params: Encoded;
  retention?: RetentionInput;
}

/** Script → engine, from a workflow binding. */
export type BindingRpc =
  | ({ op: 'create'; workflow: string } & BindingCreateItem)
  | { op: 'createBatch'; workflow: string; items: BindingCreateItem[] }
  | { op: 'get' | 'status' | 'pause' | 'resume' | 'terminate'; workflow: string; id: string }
  | {
      op: 'restart';
      workflow: string;
      id: string;
      from?: { name: string; count?: number; type?: string };
    }
  | { op: 'sendEvent'; workflow: string; id: string; type: string; payload: Encoded };
