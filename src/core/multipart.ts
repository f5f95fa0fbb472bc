/**
 * multipart/form-data in both forms clients send:
 * - the spec/curl form: a JSON `metadata` part plus file parts (`files`, or named by file name);
 * - the official client's bracket form: `metadata[main_module]`, `metadata[tags][]`, `files[]`.
 * The boundary comes from the Content-Type header, or — when a client sends a multipart body under
 * another content type — from the body's first line (`--<boundary>\r\n`).
 */
import { apiError, ApiError, CODES } from './errors.ts';
import { assertJsonDepth } from './json.ts';

export interface FilePart {
  field: string;
  filename: string;
  type: string;
  data: Buffer;
}

export interface MultipartForm {
  /** The `metadata` object, from a JSON part or from bracket fields. */
  metadata: Record<string, unknown>;
  /** Plain (non-file, non-metadata) fields; repeated fields become arrays. */
  fields: Record<string, string | string[]>;
  files: FilePart[];
}

interface RawPart {
  name: string;
  filename?: string;
  type: string;
  data: Buffer;
}

export function boundaryOf(contentType: string | undefined, body: Buffer): string | undefined {
  const m = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  if (m) return m[1] ?? m[2];
  // Sniff: the body starts with `--<boundary>` followed by CRLF.
  const head = body.subarray(0, 200).toString('latin1');
  const sniff = /^--([!-~]{1,70})\r?\n/.exec(head);
  return sniff?.[1];
}

/** A JSON `metadata` part: depth-bounded like every JSON body, and an object. */
function metadataPart(data: Buffer, root = 'metadata'): Record<string, unknown> {
  assertJsonDepth(data, `the ${root} part`);
  let value: unknown;
  try {
    value = JSON.parse(data.toString('utf8'));
  } catch (err) {
    throw bad(`${root}: not valid JSON (${(err as Error).message})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad(`${root}: must be a JSON object`);
  return value as Record<string, unknown>;
}

function bad(message: string): ApiError {
  return new ApiError(CODES.validation.status, [{ code: CODES.validation.code, message }]);
}

function splitParts(body: Buffer, boundary: string): RawPart[] {
  const delimiter = Buffer.from(`--${boundary}`);
  const parts: RawPart[] = [];
  let pos = body.indexOf(delimiter);
  if (pos < 0) throw bad(`multipart body does not contain its boundary ${boundary}`);
  for (let guard = 0; guard < 10_000; guard++) {
    pos += delimiter.length;
    // `--` after a delimiter closes the body.
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) return parts;
    if (body[pos] === 0x0d) pos++;
    if (body[pos] === 0x0a) pos++;
    const next = body.indexOf(delimiter, pos);
    if (next < 0) throw bad('multipart body ends without a closing boundary');
    let end = next;
    if (body[end - 1] === 0x0a) end--;
    if (body[end - 1] === 0x0d) end--;
    parts.push(parsePart(body.subarray(pos, end)));
    pos = next;
  }
  throw bad('multipart body has too many parts');
}

function parsePart(chunk: Buffer): RawPart {
  let headerEnd = chunk.indexOf('\r\n\r\n');
  let sep = 4;
  if (headerEnd < 0) {
    headerEnd = chunk.indexOf('\n\n');
    sep = 2;
  }
  if (headerEnd < 0) throw bad('multipart part has no header section');
  const headers = chunk.subarray(0, headerEnd).toString('utf8').split(/\r?\n/);
  let name: string | undefined;
  let filename: string | undefined;
  let type = 'text/plain';
  for (const line of headers) {
    const [key, ...rest] = line.split(':');
    const value = rest.join(':').trim();
    if (/^content-disposition$/i.test(key)) {
      name = /\bname="([^"]*)"/i.exec(value)?.[1] ?? /\bname=([^;]+)/i.exec(value)?.[1];
      filename = /\bfilename="([^"]*)"/i.exec(value)?.[1] ?? /\bfilename=([^;]+)/i.exec(value)?.[1];
    } else if (/^content-type$/i.test(key)) {
      type = value;
    }
  }
  if (name === undefined) throw bad('multipart part lacks a Content-Disposition name');
  return { name, filename, type, data: Buffer.from(chunk.subarray(headerEnd + sep)) };
}

/**
 * Sets `obj[a][b]…` from the bracket path `a[b][]`. `a[][b]` (how the official client encodes an
 * array of objects) fills the last object of the array; a field it already has starts the next one.
 */
function setBracket(obj: Record<string, unknown>, path: string[], value: unknown): void {
  const [key, ...rest] = path;
  // Never write through to prototypes (`metadata[__proto__][x]`).
  if (key === '' || key === '__proto__' || key === 'constructor' || key === 'prototype') return;
  if (rest.length === 0) {
    obj[key] = value;
    return;
  }
  if (rest[0] === '') {
    const arr = (Array.isArray(obj[key]) ? obj[key] : (obj[key] = [])) as unknown[];
    const after = rest.slice(1);
    if (after.length === 0) {
      arr.push(value);
      return;
    }
    let last = arr[arr.length - 1];
    if (!isRecord(last) || isSet(last, after)) arr.push((last = {}));
    setBracket(last as Record<string, unknown>, after, value);
    return;
  }
  if (typeof obj[key] !== 'object' || obj[key] === null) obj[key] = {};
  setBracket(obj[key] as Record<string, unknown>, rest, value);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** True if the bracket path already holds a scalar (so setting it again means a new array item). */
function isSet(obj: Record<string, unknown>, path: string[]): boolean {
  const [key, ...rest] = path;
  if (!(key in obj)) return false;
  if (rest.length === 0) return true;
  const next = obj[key];
  if (rest[0] === '') {
    const after = rest.slice(1);
    if (after.length === 0 || !Array.isArray(next)) return false;
    const last = next[next.length - 1];
    return isRecord(last) && isSet(last, after);
  }
  return isRecord(next) && isSet(next, rest);
}

function scalar(text: string): unknown {
  if (text === 'true') return true;
  if (text === 'false') return false;
  return text;
}

/**
 * `root` names the JSON part / bracket root read into `metadata` (`settings` for the routes that
 * take a `settings` part instead).
 */
export function parseMultipart(
  contentType: string | undefined,
  body: Buffer,
  root = 'metadata',
): MultipartForm {
  const boundary = boundaryOf(contentType, body);
  if (!boundary) throw apiError('unsupported_media', `${contentType ?? 'none'} (expected multipart/form-data)`);
  const form: MultipartForm = { metadata: {}, fields: {}, files: [] };
  for (const part of splitParts(body, boundary)) {
    if (part.name === root && part.filename === undefined) {
      form.metadata = { ...form.metadata, ...metadataPart(part.data, root) };
      continue;
    }
    if (part.name === root && part.filename !== undefined && /json/.test(part.type)) {
      form.metadata = { ...form.metadata, ...metadataPart(part.data, root) };
      continue;
    }
    const bracket = /^([^[\]]+)((?:\[[^\]]*\])+)$/.exec(part.name);
    if (bracket && bracket[1] === root && part.filename === undefined) {
      const path = [...bracket[2].matchAll(/\[([^\]]*)\]/g)].map((m) => m[1]);
      setBracket(form.metadata, path, scalar(part.data.toString('utf8')));
      continue;
    }
    if (part.filename !== undefined) {
      const field = bracket ? bracket[1] : part.name;
      form.files.push({ field, filename: part.filename, type: part.type, data: part.data });
      continue;
    }
    const prev = form.fields[part.name];
    const text = part.data.toString('utf8');
    form.fields[part.name] = prev === undefined ? text : Array.isArray(prev) ? [...prev, text] : [prev, text];
  }
  return form;
}
