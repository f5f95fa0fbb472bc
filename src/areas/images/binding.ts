/**
 * The script binding (`images` binding type): `env.IMAGES.input(bytes | stream)
 * .transform({...}).draw(other, {top, left, bottom, right, opacity, repeat}).output({format,
 * quality, background})` → `.response()`, `.image()`, `.contentType()`; `env.IMAGES.info(input)`.
 *
 * Inside the script, `IMAGES_SHIM` builds that object over a Node service binding; each `output()`
 * or `info()` is one call carrying the plan (transform and draw steps in order) as JSON and the
 * images as multipart parts. Failures come back as `ERROR <code>: <message>` with header
 * `cf-images-binding: err=<code>` and are thrown in the script as an Error with `code`
 * (5403 bad option, 9412 not an image, 9520 unsupported output format).
 */
import { ApiError } from '../../core/errors.ts';
import { parseMultipart } from '../../core/multipart.ts';
import type { NodeBinding } from '../../runtime/index.ts';
import { OptionError, parseColor, setOption, type OutputFormat, type TransformOptions } from './options.ts';
import { MAX_IMAGE_BYTES } from './service.ts';
import { inspect, transformImage, UPLOAD_FORMATS, type Overlay } from './transform.ts';
import sharp from 'sharp';

interface TransformStep {
  op: 'transform';
  options: Record<string, unknown>;
}
interface DrawStep {
  op: 'draw';
  part: string;
  transforms: Record<string, unknown>[];
  options: Record<string, unknown>;
}
interface Plan {
  op: 'output' | 'info';
  steps?: (TransformStep | DrawStep)[];
  output?: { format?: string; quality?: number; background?: string };
}

class BindingError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

const FORMATS: Record<string, OutputFormat | 'rgb' | 'rgba'> = {
  'image/avif': 'avif',
  'image/webp': 'webp',
  'image/jpeg': 'jpeg',
  'image/png': 'png',
  'image/gif': 'gif',
  rgb: 'rgb',
  rgba: 'rgba',
};

function options(obj: Record<string, unknown>, ignore: string[] = []): TransformOptions {
  const out: TransformOptions = {};
  for (const [k, v] of Object.entries(obj ?? {})) {
    if (v === undefined || ignore.includes(k)) continue;
    try {
      setOption(out, k, v);
    } catch (err) {
      if (err instanceof OptionError) throw new BindingError(5403, `invalid transform option ${err.message}`);
      throw err;
    }
  }
  return out;
}

async function applyAll(input: Buffer, list: Record<string, unknown>[]): Promise<Buffer> {
  let current = input;
  for (const t of list) current = (await transformImage(current, options(t), { format: 'png' })).data;
  return current;
}

function num(name: string, v: unknown, min: number, max: number): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw new BindingError(5403, `invalid draw option ${name}: ${JSON.stringify(v)} (a number from ${min} to ${max})`);
  return v;
}

/** Runs a plan: the steps in order, then the output encoding. */
async function run(plan: Plan, parts: Map<string, Buffer>): Promise<Response> {
  const main = parts.get('image');
  if (!main) throw new BindingError(9412, 'no input image');
  const info = await inspect(main);
  if (!info || !UPLOAD_FORMATS.has(info.format)) throw new BindingError(9412, 'Input is not an image (JPEG, PNG, GIF, WebP or SVG)', 415);
  if (plan.op === 'info') {
    if (info.format === 'svg') return Response.json({ format: 'image/svg+xml' });
    return Response.json({ format: `image/${info.format}`, fileSize: main.length, width: info.width, height: info.height });
  }
  const out = plan.output ?? {};
  const fmt = FORMATS[out.format ?? 'image/png'];
  if (!fmt) throw new BindingError(9520, `unsupported output format ${JSON.stringify(out.format)} (image/avif, image/webp, image/jpeg, image/png, image/gif, rgb, rgba)`, 415);
  const quality = num('quality', out.quality, 1, 100);
  let background: TransformOptions['background'];
  if (out.background !== undefined) {
    try {
      background = parseColor('background', String(out.background));
    } catch (err) {
      throw new BindingError(5403, `invalid output option ${(err as Error).message}`);
    }
  }
  // Steps: consecutive transforms then draws; each draw composites onto the current picture.
  let current: Buffer = main;
  let pending: TransformOptions | undefined;
  const steps = plan.steps ?? [];
  for (const step of steps) {
    if (step.op === 'transform') {
      if (pending) current = (await transformImage(current, pending, { format: 'png' })).data;
      pending = options(step.options);
    } else {
      const src = parts.get(step.part);
      if (!src) throw new BindingError(9412, `draw input ${step.part} is missing`);
      if (!(await inspect(src))) throw new BindingError(9412, 'a draw input is not an image', 415);
      const overlayInput = await applyAll(src, step.transforms);
      const o = step.options ?? {};
      const overlay: Overlay = {
        input: overlayInput,
        options: {},
        top: num('top', o.top, -100000, 100000),
        left: num('left', o.left, -100000, 100000),
        bottom: num('bottom', o.bottom, -100000, 100000),
        right: num('right', o.right, -100000, 100000),
        opacity: num('opacity', o.opacity, 0, 1),
        repeat: o.repeat === true || o.repeat === 'x' || o.repeat === 'y' ? (o.repeat as Overlay['repeat']) : undefined,
      };
      current = (await transformImage(current, pending ?? {}, { format: 'png' }, [overlay])).data;
      pending = undefined;
    }
  }
  if (fmt === 'rgb' || fmt === 'rgba') {
    const img = sharp((await transformImage(current, pending ?? {}, { format: 'png' })).data);
    const raw = await (fmt === 'rgba' ? img.ensureAlpha() : img.removeAlpha()).raw().toBuffer();
    return new Response(new Uint8Array(raw), { headers: { 'content-type': fmt } });
  }
  const result = await transformImage(current, pending ?? {}, { format: fmt, quality, background });
  return new Response(new Uint8Array(result.data), { headers: { 'content-type': result.contentType } });
}

/** The Node end of an `images` binding. */
export function imagesBinding(): NodeBinding {
  return {
    type: 'service',
    async fetch(req) {
      try {
        const buf = await readLimited(req, MAX_IMAGE_BYTES * 2);
        const form = parseMultipart(req.headers.get('content-type') ?? undefined, buf);
        const planText = form.fields.plan;
        if (typeof planText !== 'string') throw new BindingError(5403, 'missing plan');
        const plan = JSON.parse(planText) as Plan;
        const parts = new Map(form.files.map((f) => [f.field, f.data]));
        return await run(plan, parts);
      } catch (err) {
        let code = 9523;
        let status = 500;
        const message = (err as Error).message;
        if (err instanceof BindingError) ({ code, status } = err);
        else if (err instanceof ApiError) {
          code = err.status === 413 ? 5401 : 5403;
          status = err.status;
        } else if (/unsupported image format|Input buffer|corrupt|VipsJpeg|pngload|webpload/i.test(message)) {
          code = 9412;
          status = 415;
        }
        return new Response(`ERROR ${code}: ${message}`, { status, headers: { 'cf-images-binding': `err=${code}`, 'content-type': 'text/plain' } });
      }
    },
  };
}

async function readLimited(req: Request, limit: number): Promise<Buffer> {
  if (!req.body) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req.body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > limit) throw new BindingError(5401, `the images are over ${limit} bytes in all`, 413);
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks);
}

/**
 * The in-script side (plain JavaScript, runs in workerd). `__imagesBinding(fetcher)` returns the
 * binding object over the Node service binding `fetcher`.
 */
export const IMAGES_SHIM = String.raw`
async function __imgBytes(input) {
  if (input && typeof input === 'object' && typeof input.arrayBuffer === 'function' && !(input instanceof ReadableStream)) return new Uint8Array(await input.arrayBuffer());
  return new Uint8Array(await new Response(input).arrayBuffer());
}
async function __imgCall(fetcher, plan, parts) {
  const form = new FormData();
  form.append('plan', JSON.stringify(plan));
  for (const [name, bytes] of parts) form.append(name, new Blob([bytes]), name);
  const res = await fetcher.fetch('https://images.binding/' + plan.op, { method: 'POST', body: form });
  if (!res.ok) {
    const text = await res.text();
    const m = /^ERROR (\d+): ([\s\S]*)$/.exec(text);
    const err = new Error('IMAGES_' + plan.op.toUpperCase() + '_ERROR ' + (m ? m[1] + ': ' + m[2] : text));
    err.code = m ? Number(m[1]) : res.status;
    throw err;
  }
  return res;
}
class __ImageResult {
  constructor(res) { this._res = res; this._type = res.headers.get('content-type'); }
  response() { return new Response(this._res.body, { headers: { 'content-type': this._type } }); }
  image() { return this._res.body; }
  contentType() { return this._type; }
}
class __ImageTransformer {
  constructor(fetcher, input) { this._f = fetcher; this._input = input; this._steps = []; this._draws = []; }
  transform(options) { this._steps.push({ op: 'transform', options: options || {} }); return this; }
  draw(image, options) { this._steps.push({ op: 'draw', image, options: options || {} }); return this; }
  async output(options) {
    const parts = [['image', await __imgBytes(this._input)]];
    const steps = [];
    let n = 0;
    for (const s of this._steps) {
      if (s.op === 'transform') { steps.push(s); continue; }
      const part = 'draw' + (n++);
      let bytes, transforms = [];
      if (s.image instanceof __ImageTransformer) {
        bytes = await __imgBytes(s.image._input);
        for (const t of s.image._steps) {
          if (t.op !== 'transform') throw new TypeError('a drawn image may only carry transforms, not draws of its own');
          transforms.push(t.options);
        }
      } else bytes = await __imgBytes(s.image);
      parts.push([part, bytes]);
      steps.push({ op: 'draw', part, transforms, options: s.options });
    }
    const res = await __imgCall(this._f, { op: 'output', steps, output: options || {} }, parts);
    return new __ImageResult(res);
  }
}
function __imagesBinding(fetcher) {
  return {
    input(stream) { return new __ImageTransformer(fetcher, stream); },
    async info(stream) {
      const res = await __imgCall(fetcher, { op: 'info' }, [['image', await __imgBytes(stream)]]);
      return res.json();
    },
  };
}
`;
