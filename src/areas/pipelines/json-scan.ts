/**
 * A JSON checker for ingest bodies that builds no objects: it walks the bytes once and says
 * whether they are one JSON array of objects (and how many), accepting exactly the grammar
 * `JSON.parse` accepts (RFC 8259: whitespace is space, tab, CR, LF; strings without raw control
 * characters and with only the standard escapes; numbers without leading zeros, `+`, `.5` or
 * `5.`). An untyped stream's ingest needs no more than this, so the body is parsed only once, by
 * the pipeline that reads it. When the answer is no, the caller parses the body the ordinary way
 * to say what is wrong; this checker never has to explain.
 *
 * Bytes of 0x80 and above are accepted inside strings as they are (as `JSON.parse` of the UTF-8
 * decoded text does, where a bad sequence becomes U+FFFD); outside strings they are refused.
 */

import { MAX_JSON_DEPTH } from '../../core/json.ts';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

const IN_OBJECT = 1;
const IN_ARRAY = 2;

/** The kinds of containers open while scanning one value; grown as needed, one per thread. */
let stack = new Uint8Array(256);

function skipWs(b: Uint8Array, i: number, n: number): number {
  while (i < n) {
    const c = b[i];
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** `i` is just past the opening quote; returns the index past the closing quote, or -1. */
function scanString(b: Uint8Array, i: number, n: number): number {
  while (i < n) {
    const c = b[i];
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) {
      if (i + 1 >= n) return -1;
      const e = b[i + 1];
      if (e === 0x75) {
        if (i + 5 >= n || !isHex(b[i + 2]) || !isHex(b[i + 3]) || !isHex(b[i + 4]) || !isHex(b[i + 5])) return -1;
        i += 6;
        continue;
      }
      // " \ / b f n r t
      if (e !== QUOTE && e !== BACKSLASH && e !== 0x2f && e !== 0x62 && e !== 0x66 && e !== 0x6e && e !== 0x72 && e !== 0x74) return -1;
      i += 2;
      continue;
    }
    if (c < 0x20) return -1;
    i++;
  }
  return -1;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function scanNumber(b: Uint8Array, i: number, n: number): number {
  if (b[i] === 0x2d) i++;
  if (i >= n) return -1;
  if (b[i] === 0x30) i++;
  else if (b[i] >= 0x31 && b[i] <= 0x39) {
    i++;
    while (i < n && isDigit(b[i])) i++;
  } else return -1;
  if (i < n && b[i] === 0x2e) {
    i++;
    if (i >= n || !isDigit(b[i])) return -1;
    while (i < n && isDigit(b[i])) i++;
  }
  if (i < n && (b[i] === 0x65 || b[i] === 0x45)) {
    i++;
    if (i < n && (b[i] === 0x2b || b[i] === 0x2d)) i++;
    if (i >= n || !isDigit(b[i])) return -1;
    while (i < n && isDigit(b[i])) i++;
  }
  return i;
}

function literal(b: Uint8Array, i: number, n: number, word: readonly number[]): number {
  if (i + word.length > n) return -1;
  for (let k = 0; k < word.length; k++) if (b[i + k] !== word[k]) return -1;
  return i + word.length;
}
const TRUE = [0x74, 0x72, 0x75, 0x65];
const FALSE = [0x66, 0x61, 0x6c, 0x73, 0x65];
const NULL = [0x6e, 0x75, 0x6c, 0x6c];

/** Scans one key and its colon from `i` (at the key's quote or whitespace before it). */
function scanKey(b: Uint8Array, i: number, n: number): number {
  i = skipWs(b, i, n);
  if (i >= n || b[i] !== QUOTE) return -1;
  i = scanString(b, i + 1, n);
  if (i < 0) return -1;
  i = skipWs(b, i, n);
  if (i >= n || b[i] !== COLON) return -1;
  return i + 1;
}

/** Scans one complete value starting at `i` (no leading whitespace); returns its end or -1. */
function scanValue(b: Uint8Array, i: number, n: number): number {
  let depth = 0;
  for (;;) {
    // A value is expected at i (after optional whitespace).
    i = skipWs(b, i, n);
    if (i >= n) return -1;
    const c = b[i];
    if (c === QUOTE) i = scanString(b, i + 1, n);
    else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      const j = skipWs(b, i + 1, n);
      if (j < n && b[j] === (c === OPEN_OBJECT ? CLOSE_OBJECT : CLOSE_ARRAY)) i = j + 1;
      else {
        // Near the nesting limit the caller's ordinary path measures the depth exactly and
        // says so (the array around the events is one level, an empty container one more).
        if (depth + 2 >= MAX_JSON_DEPTH) return -1;
        if (depth === stack.length) {
          const bigger = new Uint8Array(stack.length * 2);
          bigger.set(stack);
          stack = bigger;
        }
        stack[depth++] = c === OPEN_OBJECT ? IN_OBJECT : IN_ARRAY;
        if (c === OPEN_OBJECT) {
          i = scanKey(b, j, n);
          if (i < 0) return -1;
        } else i = j;
        continue;
      }
    } else if (c === 0x74) i = literal(b, i, n, TRUE);
    else if (c === 0x66) i = literal(b, i, n, FALSE);
    else if (c === 0x6e) i = literal(b, i, n, NULL);
    else i = scanNumber(b, i, n);
    if (i < 0) return -1;
    // After a value: close containers, or a comma and the next member.
    for (;;) {
      if (depth === 0) return i;
      i = skipWs(b, i, n);
      if (i >= n) return -1;
      const d = b[i];
      const top = stack[depth - 1];
      if (d === COMMA) {
        i = top === IN_OBJECT ? scanKey(b, i + 1, n) : i + 1;
        if (i < 0) return -1;
        break;
      }
      if (d === (top === IN_OBJECT ? CLOSE_OBJECT : CLOSE_ARRAY)) {
        depth--;
        i++;
        continue;
      }
      return -1;
    }
  }
}

/**
 * The number of events when `body` is exactly one JSON array whose elements are all objects
 * (0 for `[]`); -1 for anything else (not JSON, a single object, an array holding a non-object).
 */
export function countEventArray(body: Uint8Array): number {
  const n = body.length;
  let i = skipWs(body, 0, n);
  if (i >= n || body[i] !== OPEN_ARRAY) return -1;
  i = skipWs(body, i + 1, n);
  let count = 0;
  if (i < n && body[i] === CLOSE_ARRAY) return skipWs(body, i + 1, n) === n ? 0 : -1;
  for (;;) {
    if (i >= n || body[i] !== OPEN_OBJECT) return -1;
    i = scanValue(body, i, n);
    if (i < 0) return -1;
    count++;
    i = skipWs(body, i, n);
    if (i >= n) return -1;
    if (body[i] === COMMA) {
      i = skipWs(body, i + 1, n);
      continue;
    }
    if (body[i] === CLOSE_ARRAY) return skipWs(body, i + 1, n) === n ? count : -1;
    return -1;
  }
}
