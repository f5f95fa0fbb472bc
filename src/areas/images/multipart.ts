/**
 * A streaming multipart/form-data reader for uploads of up to 100 MB: the `file` part goes
 * straight to a temporary file (never whole in memory), other parts are small text fields. Past
 * the file limit the rest of the body is read and discarded (bounded), so the client gets the
 * answer instead of a reset connection.
 */
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { boundaryOf } from '../../core/multipart.ts';

export interface StreamedFile {
  field: string;
  filename: string;
  type: string;
  path: string;
  size: number;
}

export interface StreamedForm {
  fields: Record<string, string>;
  file?: StreamedFile;
  /** Set when the file part exceeded the limit (the file is then removed). */
  tooLarge?: boolean;
}

export class MultipartError extends Error {}

export interface StreamOptions {
  tmpDir: string;
  maxFileBytes: number;
  maxFieldBytes?: number;
  /** Stop reading after this many bytes in all (the overflow drain is bounded too). */
  maxTotalBytes?: number;
  /** Part names carrying the file. */
  fileFields?: string[];
}

const CRLF2 = Buffer.from('\r\n\r\n');

export async function readMultipartStream(
  contentType: string | undefined,
  body: AsyncIterable<Uint8Array>,
  opts: StreamOptions,
): Promise<StreamedForm> {
  const maxField = opts.maxFieldBytes ?? 1024 * 1024;
  const maxTotal = opts.maxTotalBytes ?? opts.maxFileBytes * 2 + 16 * 1024 * 1024;
  const fileFields = new Set(opts.fileFields ?? ['file']);
  const iterator = body[Symbol.asyncIterator]();
  let buf = Buffer.alloc(0);
  let total = 0;
  let ended = false;
  const pull = async (): Promise<boolean> => {
    if (ended) return false;
    const { done, value } = await iterator.next();
    if (done) {
      ended = true;
      return false;
    }
    total += value.byteLength;
    if (total > maxTotal) throw new MultipartError(`request body exceeds ${maxTotal} bytes`);
    buf = buf.length === 0 ? Buffer.from(value) : Buffer.concat([buf, value]);
    return true;
  };

  // Find the boundary: from the header, or sniffed from the first bytes.
  while (buf.length < 256 && (await pull()));
  const boundary = boundaryOf(contentType, buf);
  if (!boundary) throw new MultipartError(`expected multipart/form-data, got ${contentType ?? 'no content type'}`);
  const opening = Buffer.from(`--${boundary}`);
  const delimiter = Buffer.from(`\r\n--${boundary}`);

  const form: StreamedForm = { fields: {} };
  let fh: FileHandle | undefined;
  let tmpPath: string | undefined;
  const cleanup = async () => {
    await fh?.close().catch(() => {});
    fh = undefined;
    if (tmpPath) await unlink(tmpPath).catch(() => {});
    tmpPath = undefined;
  };

  try {
    // Preamble up to the first boundary.
    for (;;) {
      const at = buf.indexOf(opening);
      if (at >= 0) {
        buf = buf.subarray(at + opening.length);
        break;
      }
      if (buf.length > 64 * 1024) throw new MultipartError('multipart body does not contain its boundary');
      if (!(await pull())) throw new MultipartError('multipart body does not contain its boundary');
    }
    for (let parts = 0; ; parts++) {
      if (parts > 100) throw new MultipartError('multipart body has too many parts');
      while (buf.length < 2 && (await pull()));
      if (buf[0] === 0x2d && buf[1] === 0x2d) break; // closing `--`
      // Headers.
      let headerEnd: number;
      for (;;) {
        headerEnd = buf.indexOf(CRLF2);
        if (headerEnd >= 0) break;
        if (buf.length > 16 * 1024) throw new MultipartError('multipart part headers are too long');
        if (!(await pull())) throw new MultipartError('multipart body ends inside part headers');
      }
      const head = buf.subarray(0, headerEnd).toString('utf8');
      buf = buf.subarray(headerEnd + 4);
      const disposition = /content-disposition:([^\r\n]*)/i.exec(head)?.[1] ?? '';
      const name = /\bname="([^"]*)"/i.exec(disposition)?.[1] ?? /\bname=([^;\s]+)/i.exec(disposition)?.[1];
      const filename = /\bfilename="([^"]*)"/i.exec(disposition)?.[1] ?? /\bfilename=([^;\s]+)/i.exec(disposition)?.[1];
      const type = /content-type:\s*([^\r\n]*)/i.exec(head)?.[1]?.trim() ?? 'application/octet-stream';
      if (name === undefined) throw new MultipartError('a multipart part lacks a Content-Disposition name');
      const isFile = fileFields.has(name) && !form.file;
      let size = 0;
      const chunks: Buffer[] = [];
      if (isFile) {
        await mkdir(opts.tmpDir, { recursive: true });
        tmpPath = join(opts.tmpDir, randomBytes(12).toString('hex'));
        fh = await open(tmpPath, 'wx');
      }
      const emit = async (data: Buffer) => {
        if (data.length === 0) return;
        size += data.length;
        if (isFile) {
          if (form.tooLarge) return;
          if (size > opts.maxFileBytes) {
            form.tooLarge = true;
            await cleanup();
            return;
          }
          await fh!.write(data);
        } else {
          if (size > maxField) throw new MultipartError(`field ${name} exceeds ${maxField} bytes`);
          chunks.push(Buffer.from(data));
        }
      };
      // Body up to the next delimiter.
      for (;;) {
        const at = buf.indexOf(delimiter);
        if (at >= 0) {
          await emit(buf.subarray(0, at));
          buf = buf.subarray(at + delimiter.length);
          break;
        }
        const keep = delimiter.length - 1;
        if (buf.length > keep) {
          await emit(buf.subarray(0, buf.length - keep));
          buf = buf.subarray(buf.length - keep);
        }
        if (!(await pull())) throw new MultipartError('multipart body ends without a closing boundary');
      }
      if (isFile) {
        if (!form.tooLarge) {
          await fh!.close();
          fh = undefined;
          form.file = { field: name, filename: filename ?? 'file', type, path: tmpPath!, size };
          tmpPath = undefined;
        }
      } else if (!(name in form.fields)) {
        form.fields[name] = Buffer.concat(chunks).toString('utf8');
      }
      // After a delimiter: `--` (end) or CRLF (next part).
      while (buf.length < 2 && (await pull()));
      if (buf[0] === 0x0d && buf[1] === 0x0a) buf = buf.subarray(2);
    }
    // Drain the epilogue (bounded by maxTotal).
    while (await pull()) buf = Buffer.alloc(0);
    return form;
  } catch (err) {
    await cleanup();
    if (form.file) await unlink(form.file.path).catch(() => {});
    throw err;
  }
}
