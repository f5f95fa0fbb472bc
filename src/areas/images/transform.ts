/**
 * The image engine (sharp/libvips): applies normalised transform options and overlays, and picks
 * the output format (`auto` from the Accept header). Orientation from EXIF is applied first;
 * resizing honours `dpr`; `fit` maps to libvips as the platform describes each mode; gravity
 * `face` and `auto` use libvips' attention strategy (the region with the most skin tone,
 * saturation and luminance), there is no face detector. Brightness, contrast and gamma run as one
 * lookup table over the colour channels (alpha untouched).
 */
import sharp, { type Sharp } from 'sharp';
import type { OutputFormat, TransformOptions } from './options.ts';

export const CONTENT_TYPES: Record<string, string> = {
  jpeg: 'image/jpeg',
  png: 'image/png',
  webp: 'image/webp',
  avif: 'image/avif',
  gif: 'image/gif',
  svg: 'image/svg+xml',
};

/** Accepted upload formats (sharp's names). */
export const UPLOAD_FORMATS = new Set(['jpeg', 'png', 'gif', 'webp', 'svg']);

export interface Overlay {
  input: Buffer;
  options: TransformOptions;
  top?: number;
  left?: number;
  bottom?: number;
  right?: number;
  opacity?: number;
  repeat?: boolean | 'x' | 'y';
}

export interface TransformResult {
  data: Buffer;
  format: OutputFormat;
  contentType: string;
  width: number;
  height: number;
}

/** Largest decoded image accepted (pixels), as a guard against decompression bombs. */
const PIXEL_LIMIT = 100_000_000;

/** The output format: explicit, `auto` by Accept, else the source's (SVG becomes PNG). */
export function chooseFormat(opts: TransformOptions, source: string, accept: string | undefined): OutputFormat {
  if (opts.format && opts.format !== 'auto') return opts.format;
  if (opts.format === 'auto') {
    const a = accept ?? '';
    if (/image\/avif/.test(a)) return 'avif';
    if (/image\/webp/.test(a)) return 'webp';
  }
  if (source === 'jpeg' || source === 'png' || source === 'gif') return source;
  if (source === 'webp') return opts.format === 'auto' ? 'jpeg' : 'webp';
  return 'png';
}

export async function transformImage(
  input: string | Buffer,
  opts: TransformOptions,
  output: { format: OutputFormat; quality?: number; background?: TransformOptions['background'] },
  overlays: Overlay[] = [],
): Promise<TransformResult> {
  const animate = (output.format === 'gif' || output.format === 'webp') && overlays.length === 0;
  if (animate) {
    // Animated sources keep their frames where libvips can process them page by page.
    try {
      const anim = await pipeline(input, opts, true);
      if (anim.animated) return await encode(anim.img, opts, output);
    } catch {
      // Fall back to the first frame below.
    }
  }
  let img = (await pipeline(input, opts)).img;
  if (overlays.length > 0) {
    const base = await img.png().toBuffer({ resolveWithObject: true });
    const layers: sharp.OverlayOptions[] = [];
    for (const o of overlays) {
      const layer = await (await pipeline(o.input, o.options)).img.ensureAlpha().png().toBuffer({ resolveWithObject: true });
      let data = layer.data;
      if (o.opacity !== undefined && o.opacity < 1) {
        data = await sharp(data)
          .composite([{ input: Buffer.from([255, 255, 255, Math.round(255 * Math.max(0, o.opacity))]), raw: { width: 1, height: 1, channels: 4 }, tile: true, blend: 'dest-in' }])
          .png()
          .toBuffer();
      }
      const W = base.info.width;
      const H = base.info.height;
      const w = layer.info.width;
      const h = layer.info.height;
      const left = o.left ?? (o.right !== undefined ? W - w - o.right : Math.round((W - w) / 2));
      const top = o.top ?? (o.bottom !== undefined ? H - h - o.bottom : Math.round((H - h) / 2));
      if (o.repeat) layers.push({ input: data, tile: true, gravity: 'northwest' });
      else if (left >= 0 && top >= 0 && left + w <= W && top + h <= H) layers.push({ input: data, left: Math.round(left), top: Math.round(top) });
      else {
        // Partly outside: crop the overlay to the base.
        const x0 = Math.max(0, -left);
        const y0 = Math.max(0, -top);
        const cw = Math.min(w - x0, W - Math.max(0, left));
        const ch = Math.min(h - y0, H - Math.max(0, top));
        if (cw <= 0 || ch <= 0) continue;
        const cropped = await sharp(data).extract({ left: x0, top: y0, width: cw, height: ch }).png().toBuffer();
        layers.push({ input: cropped, left: Math.max(0, Math.round(left)), top: Math.max(0, Math.round(top)) });
      }
    }
    img = sharp(base.data).composite(layers);
  }
  return encode(img, opts, output);
}

async function encode(
  img: Sharp,
  opts: TransformOptions,
  output: { format: OutputFormat; quality?: number; background?: TransformOptions['background'] },
): Promise<TransformResult> {
  const quality = output.quality ?? opts.quality ?? 85;
  const bg = output.background ?? opts.background;
  switch (output.format) {
    case 'jpeg':
      img = img.flatten({ background: bg ? { r: bg.r, g: bg.g, b: bg.b } : '#ffffff' }).jpeg({ quality, mozjpeg: false });
      break;
    case 'png':
      img = img.png();
      break;
    case 'webp':
      img = img.webp({ quality });
      break;
    case 'avif':
      img = img.avif({ quality, effort: 2 });
      break;
    case 'gif':
      img = img.gif();
      break;
  }
  const { data, info } = await img.toBuffer({ resolveWithObject: true });
  return { data, format: output.format, contentType: CONTENT_TYPES[output.format], width: info.width, height: info.pageHeight ?? info.height };
}

/** Decodes, orients, rotates, resizes, filters; metadata per `opts.metadata`. */
async function pipeline(input: string | Buffer, opts: TransformOptions, animate = false): Promise<{ img: Sharp; animated: boolean }> {
  const meta = await sharp(input, { limitInputPixels: PIXEL_LIMIT }).metadata();
  const g = opts.gravity;
  const animated =
    animate &&
    (meta.pages ?? 1) > 1 &&
    !needsLevels(opts) &&
    !opts.rotate &&
    !(g && (g.kind === 'point' || g.side === 'auto' || g.side === 'face'));
  if (animate && !animated) return { img: sharp(input), animated: false };
  const src = sharp(input, { limitInputPixels: PIXEL_LIMIT, failOn: 'error', animated });
  let img = src.autoOrient();
  let W = meta.autoOrient?.width ?? meta.width ?? 1;
  let H = animated ? (meta.pageHeight ?? meta.height ?? 1) : (meta.autoOrient?.height ?? meta.height ?? 1);
  if (opts.rotate) {
    img = img.rotate(opts.rotate);
    if (opts.rotate === 90 || opts.rotate === 270) [W, H] = [H, W];
  }
  const dpr = opts.dpr ?? 1;
  const tw = opts.width ? Math.round(opts.width * dpr) : undefined;
  const th = opts.height ? Math.round(opts.height * dpr) : undefined;
  if (tw || th) img = await resize(img, opts, W, H, tw, th);
  if (opts.blur) img = img.blur(Math.max(0.3, opts.blur / 2));
  if (opts.sharpen) img = img.sharpen({ sigma: 0.5 + opts.sharpen / 2 });
  if (needsLevels(opts)) img = await levels(img, opts);
  img = withMetadata(img, opts.metadata ?? 'copyright', meta);
  return { img, animated };
}

async function resize(img: Sharp, opts: TransformOptions, W: number, H: number, tw: number | undefined, th: number | undefined): Promise<Sharp> {
  const fit = opts.fit ?? 'scale-down';
  const bg = opts.background ?? { r: 255, g: 255, b: 255, alpha: 1 };
  switch (fit) {
    case 'scale-down':
      return img.resize(tw, th, { fit: 'inside', withoutEnlargement: true });
    case 'contain':
      return img.resize(tw, th, { fit: 'inside' });
    case 'pad':
      if (!tw || !th) return img.resize(tw, th, { fit: 'inside' });
      return img.resize(tw, th, { fit: 'contain', background: bg });
    case 'cover':
    case 'crop': {
      if (!tw || !th) return img.resize(tw, th, { fit: 'inside', withoutEnlargement: fit === 'crop' });
      // crop never enlarges: a smaller source only gets cut down to the box's aspect.
      let bw = tw;
      let bh = th;
      if (fit === 'crop' && (W < tw || H < th)) {
        const s = Math.min(W / tw, H / th, 1);
        bw = Math.max(1, Math.floor(tw * s));
        bh = Math.max(1, Math.floor(th * s));
      }
      const g = opts.gravity ?? { kind: 'side', side: 'center' };
      if (g.kind === 'point') {
        const scale = Math.max(bw / W, bh / H);
        const rw = Math.max(bw, Math.round(W * scale));
        const rh = Math.max(bh, Math.round(H * scale));
        const left = Math.min(rw - bw, Math.max(0, Math.round(g.x * rw - bw / 2)));
        const top = Math.min(rh - bh, Math.max(0, Math.round(g.y * rh - bh / 2)));
        const resized = await img.resize(rw, rh, { fit: 'fill' }).raw().toBuffer({ resolveWithObject: true });
        const { width, height, channels } = resized.info;
        return sharp(resized.data, { raw: { width, height, channels } }).extract({ left, top, width: bw, height: bh });
      }
      const position =
        g.side === 'auto' || g.side === 'face'
          ? sharp.strategy.attention
          : g.side === 'left'
            ? 'west'
            : g.side === 'right'
              ? 'east'
              : g.side === 'top'
                ? 'north'
                : g.side === 'bottom'
                  ? 'south'
                  : 'centre';
      return img.resize(bw, bh, { fit: 'cover', position });
    }
  }
}

function needsLevels(o: TransformOptions): boolean {
  return (o.brightness !== undefined && o.brightness !== 1) || (o.contrast !== undefined && o.contrast !== 1) || (o.gamma !== undefined && o.gamma !== 1);
}

/** Brightness (multiply), contrast (around mid-grey), gamma (exposure: >1 brighter) via one table. */
async function levels(img: Sharp, o: TransformOptions): Promise<Sharp> {
  const lut = new Uint8Array(256);
  const b = o.brightness ?? 1;
  const c = o.contrast ?? 1;
  const g = o.gamma ?? 1;
  for (let i = 0; i < 256; i++) {
    let v = i / 255;
    v = v * b;
    v = (v - 0.5) * c + 0.5;
    v = Math.min(1, Math.max(0, v));
    v = g === 0 ? 0 : Math.pow(v, 1 / g);
    lut[i] = Math.round(Math.min(1, Math.max(0, v)) * 255);
  }
  const { data, info } = await img.toColourspace('srgb').raw().toBuffer({ resolveWithObject: true });
  const ch = info.channels;
  const colour = ch === 4 || ch === 2 ? ch - 1 : ch;
  for (let i = 0; i < data.length; i += ch) {
    for (let k = 0; k < colour; k++) data[i + k] = lut[data[i + k]];
  }
  return sharp(data, { raw: { width: info.width, height: info.height, channels: ch } });
}

function withMetadata(img: Sharp, mode: 'none' | 'copyright' | 'keep', meta: sharp.Metadata): Sharp {
  if (mode === 'keep') return img.keepMetadata();
  if (mode === 'copyright') {
    const tags = meta.exif ? exifCopyright(meta.exif) : {};
    if (tags.Copyright || tags.Artist) return img.keepIccProfile().withExif({ IFD0: tags });
    return img.keepIccProfile();
  }
  return img;
}

/** Reads IFD0 Copyright (0x8298) and Artist (0x013b) from an EXIF block. */
export function exifCopyright(exif: Buffer): { Copyright?: string; Artist?: string } {
  const out: { Copyright?: string; Artist?: string } = {};
  try {
    let base = exif.indexOf('Exif\0\0') === 0 ? 6 : 0;
    if (exif.length < base + 8) return out;
    const le = exif.toString('latin1', base, base + 2) === 'II';
    const u16 = (o: number) => (le ? exif.readUInt16LE(o) : exif.readUInt16BE(o));
    const u32 = (o: number) => (le ? exif.readUInt32LE(o) : exif.readUInt32BE(o));
    const ifd = base + u32(base + 4);
    const n = u16(ifd);
    for (let i = 0; i < n && i < 500; i++) {
      const e = ifd + 2 + i * 12;
      const tag = u16(e);
      if (tag !== 0x8298 && tag !== 0x013b) continue;
      const count = u32(e + 4);
      const off = count <= 4 ? e + 8 : base + u32(e + 8);
      const text = exif.toString('utf8', off, off + count).replace(/\0+$/, '').split('\0')[0];
      if (tag === 0x8298) out.Copyright = text;
      else out.Artist = text;
    }
    base = 0;
  } catch {
    // A malformed EXIF block keeps nothing.
  }
  return out;
}

export interface Inspected {
  format: string;
  width: number;
  height: number;
  animated: boolean;
  frames: number;
}

/** Identifies an upload; undefined when sharp cannot read it as an image. */
export async function inspect(input: string | Buffer): Promise<Inspected | undefined> {
  try {
    const m = await sharp(input, { limitInputPixels: PIXEL_LIMIT }).metadata();
    if (!m.format) return undefined;
    return {
      format: m.format,
      width: m.autoOrient?.width ?? m.width ?? 0,
      height: m.autoOrient?.height ?? m.height ?? 0,
      animated: (m.pages ?? 1) > 1,
      frames: m.pages ?? 1,
    };
  } catch {
    return undefined;
  }
}
