/**
 * Request schemas of the workflows REST API, in both the spec's forms (`{id, params, retention}`,
 * `{type, payload}`) and the official client's (`{instance_id, params (JSON text or value),
 * instance_retention}`, the event type in the path).
 */
import { z } from 'zod';
import { pageQuery } from '../../core/pagination.ts';
import { qString } from '../../core/validate.ts';
import { STATUSES } from './store.ts';

const Duration = z.union([z.number().min(0), z.string().min(1)]);

export const WORKFLOW_NAME = /^[a-zA-Z0-9_][a-zA-Z0-9-_]*$/;

export const PutWorkflowBody = z
  .object({
    class_name: z.string().min(1).max(255),
    script_name: z.string().min(1).max(63),
    limits: z.object({ steps: z.number().int().min(1).max(25_000).optional() }).optional(),
    concurrency: z.object({ limit: z.number().int().min(1).max(10_000).optional() }).optional(),
    default_retention: z
      .object({ success_retention: Duration.optional(), error_retention: Duration.optional() })
      .optional(),
    schedules: z
      .array(z.object({ cron: z.string().min(1) }))
      .max(20)
      .optional(),
  })
  .passthrough();
export type PutWorkflowBody = z.infer<typeof PutWorkflowBody>;

export const CreateInstanceItem = z
  .object({
    id: z.string().optional(),
    instance_id: z.string().optional(),
    params: z.unknown().optional(),
    retention: Duration.optional(),
    instance_retention: z
      .object({ success_retention: Duration.optional(), error_retention: Duration.optional() })
      .optional(),
    location_hint: z.string().optional(),
  })
  .passthrough();
export type CreateInstanceItem = z.infer<typeof CreateInstanceItem>;

export const CreateInstanceBody = CreateInstanceItem.optional();
export const BatchBody = z.array(CreateInstanceItem);

export const StatusBody = z.object({
  status: z.enum(['pause', 'resume', 'terminate', 'restart']),
  rollback: z.boolean().optional(),
  from: z
    .object({
      name: z.string().min(1),
      count: z.number().int().min(1).optional(),
      type: z.enum(['do', 'sleep', 'waitForEvent']).optional(),
    })
    .optional(),
});

export const SpecEventBody = z.object({
  type: z.string().min(1).max(100),
  payload: z.unknown().optional(),
});
export const EventPayloadBody = z.unknown();

export const ListWorkflowsQuery = z.object({
  ...pageQuery({ perPage: 10, min: 1, max: 100 }),
  search: qString().optional(),
});

export const ListInstancesQuery = z.object({
  ...pageQuery({ perPage: 50, min: 1, max: 100 }),
  status: qString(z.enum(STATUSES as [string, ...string[]])).optional(),
  cursor: qString().optional(),
  direction: qString(z.enum(['asc', 'desc'])).optional(),
  date_start: qString().optional(),
  date_end: qString().optional(),
});

export const InstanceGetQuery = z.object({
  order: qString(z.enum(['asc', 'desc'])).optional(),
  simple: qString(z.enum(['true', 'false'])).optional(),
});

export const StepQuery = z.object({
  name: qString(),
  type: qString(z.enum(['step', 'do', 'waitForEvent'])).optional(),
  attempt: qString().optional(),
});
