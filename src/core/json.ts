/**
 * JSON from requests. Every JSON body the API reads goes through `parseJsonBody`, which bounds the
 * nesting depth before parsing: a body nested deeper than `MAX_JSON_DEPTH` arrays or objects is a
 * 400 (code 6007) naming the limit, so no handler, schema or encoder ever walks an unbounded tree.
 */
import { apiError } from './errors.ts';

/** The deepest nesting of arrays and objects accepted in a request body (documented limit). */
export const MAX_JSON_DEPTH = 128;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/**
 * The deepest nesting of arrays/objects in JSON text, stopping early once it passes `limit`.
 * Works on the UTF-8 bytes: every byte it looks at is ASCII, and no byte of a multi-byte UTF-8
 * sequence is ASCII, so it never needs to decode. Malformed text gives a meaningless depth;
 * JSON.parse reports the malformation afterwards.
 */
export function jsonDepth(bytes: Uint8Array, limit = Infinity): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (inString) {
      if (b === BACKSLASH) i++;
      else if (b === QUOTE) inString = false;
      continue;
    }
    if (b === QUOTE) inString = true;
    else if (b === OPEN_ARRAY || b === OPEN_OBJECT) {
      if (++depth > max) {
        max = depth;
        if (max > limit) return max;
      }
    } else if (b === CLOSE_ARRAY || b === CLOSE_OBJECT) depth--;
  }
  return max;
}

/** 400 (naming `what` and the limit) when JSON text nests deeper than `MAX_JSON_DEPTH`. */
export function assertJsonDepth(input: Buffer | string, what: string): void {
  const bytes = typeof input === 'string' ? Buffer.from(input, 'utf8') : input;
  if (jsonDepth(bytes, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) throw apiError('json_too_deep', what, MAX_JSON_DEPTH);
}

/** Parses JSON text from a request; 400 for malformed JSON or nesting past `MAX_JSON_DEPTH`. */
export function parseJsonBody(input: Buffer | string, what = 'request body'): unknown {
  assertJsonDepth(input, what);
  try {
    return JSON.parse(typeof input === 'string' ? input : input.toString('utf8'));
  } catch (err) {
    throw apiError('invalid_json', (err as Error).message);
  }
}
