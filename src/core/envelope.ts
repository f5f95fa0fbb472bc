/** The v4 response envelope: `{result, success, errors, messages}` plus `result_info` on lists. */
import type { ErrorItem } from './errors.ts';

export interface ResultInfo {
  page: number;
  per_page: number;
  count: number;
  total_count: number;
  total_pages: number;
}

export interface Envelope<T> {
  result: T;
  success: boolean;
  errors: ErrorItem[];
  messages: unknown[];
  result_info?: ResultInfo;
}

export function ok<T>(result: T, resultInfo?: ResultInfo): Envelope<T> {
  const body: Envelope<T> = { result, success: true, errors: [], messages: [] };
  if (resultInfo) body.result_info = resultInfo;
  return body;
}

export function failure(errors: ErrorItem[]): Envelope<null> {
  return { result: null, success: false, errors, messages: [] };
}

/** A page of a list: the router renders it as `result` + `result_info`. */
export class Page<T> {
  constructor(
    readonly items: T[],
    readonly info: ResultInfo,
  ) {}
}
