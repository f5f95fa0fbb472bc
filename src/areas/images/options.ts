/**
 * Transform options: the spec's names and URL short names (`w`, `h`, `q`, `f`, `g`), parsed from a
 * delivery path segment (`w=400,fit=cover,q=80`), a `/cdn-cgi/image/` options segment or the
 * binding's `transform({...})` object, into one normalised form. A bad value throws
 * `OptionError` naming the option; callers answer 5403.
 */

export type Fit = 'scale-down' | 'contain' | 'cover' | 'crop' | 'pad';
export type OutputFormat = 'avif' | 'webp' | 'jpeg' | 'png' | 'gif';
export type Gravity = { kind: 'side'; side: 'auto' | 'face' | 'center' | 'left' | 'right' | 'top' | 'bottom' } | { kind: 'point'; x: number; y: number };

export interface TransformOptions {
  width?: number;
  height?: number;
  fit?: Fit;
  quality?: number;
  format?: OutputFormat | 'auto';
  dpr?: number;
  gravity?: Gravity;
  sharpen?: number;
  blur?: number;
  rotate?: 0 | 90 | 180 | 270;
  background?: { r: number; g: number; b: number; alpha: number };
  metadata?: 'none' | 'copyright' | 'keep';
  brightness?: number;
  contrast?: number;
  gamma?: number;
}

export class OptionError extends Error {
  constructor(
    readonly option: string,
    detail: string,
  ) {
    super(`${option}: ${detail}`);
  }
}

const SHORT: Record<string, string> = { w: 'width', h: 'height', q: 'quality', f: 'format', g: 'gravity' };

const FITS = new Set<Fit>(['scale-down', 'contain', 'cover', 'crop', 'pad']);
const FORMATS = new Set(['avif', 'webp', 'jpeg', 'png', 'auto']);
const SIDES = new Set(['auto', 'face', 'center', 'left', 'right', 'top', 'bottom']);

function num(name: string, value: unknown, min: number, max: number, opts: { int?: boolean; minExclusive?: boolean } = {}): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' && /^-?(\d+\.?\d*|\.\d+)$/.test(value.trim()) ? Number(value) : NaN;
  if (!Number.isFinite(n)) throw new OptionError(name, `${JSON.stringify(value)} is not a number`);
  if (opts.int && !Number.isInteger(n)) throw new OptionError(name, `${n} is not a whole number`);
  if (opts.minExclusive ? n <= min : n < min) throw new OptionError(name, `${n} is below the minimum ${min}${opts.minExclusive ? ' (exclusive)' : ''}`);
  if (n > max) throw new OptionError(name, `${n} is above the maximum ${max}`);
  return n;
}

/** Sets one option (long or short name) on `out`; throws OptionError for unknown names and bad values. */
export function setOption(out: TransformOptions, rawName: string, value: unknown): void {
  const name = SHORT[rawName] ?? rawName;
  switch (name) {
    case 'width':
    case 'height':
      out[name] = Math.round(num(rawName, value, 0, 12000, { minExclusive: true }));
      if (out[name] === 0) throw new OptionError(rawName, 'must be at least 1');
      return;
    case 'fit': {
      const v = String(value);
      if (!FITS.has(v as Fit)) throw new OptionError(rawName, `${JSON.stringify(value)} is not one of ${[...FITS].join(', ')}`);
      out.fit = v as Fit;
      return;
    }
    case 'quality':
      out.quality = Math.round(num(rawName, value, 1, 100));
      return;
    case 'format': {
      const v = String(value) === 'jpg' ? 'jpeg' : String(value);
      if (!FORMATS.has(v)) throw new OptionError(rawName, `${JSON.stringify(value)} is not one of avif, webp, jpeg, png, auto`);
      out.format = v as OutputFormat | 'auto';
      return;
    }
    case 'dpr':
      out.dpr = num(rawName, value, 1, 3);
      return;
    case 'gravity':
      out.gravity = gravityOf(rawName, value);
      return;
    case 'sharpen':
      out.sharpen = num(rawName, value, 0, 10);
      return;
    case 'blur':
      out.blur = num(rawName, value, 1, 250);
      return;
    case 'rotate': {
      const n = num(rawName, value, 0, 270, { int: true });
      if (n !== 0 && n !== 90 && n !== 180 && n !== 270) throw new OptionError(rawName, `${n} is not one of 90, 180, 270`);
      out.rotate = n;
      return;
    }
    case 'background':
      out.background = parseColor(rawName, String(value));
      return;
    case 'metadata': {
      const v = String(value);
      if (v !== 'none' && v !== 'copyright' && v !== 'keep') throw new OptionError(rawName, `${JSON.stringify(value)} is not one of none, copyright, keep`);
      out.metadata = v;
      return;
    }
    case 'brightness':
    case 'contrast':
    case 'gamma':
      out[name] = num(rawName, value, 0, 2);
      return;
    default:
      throw new OptionError(rawName, 'unknown option');
  }
}

function gravityOf(name: string, value: unknown): Gravity {
  if (typeof value === 'object' && value !== null && 'x' in value && 'y' in value) {
    const v = value as { x: unknown; y: unknown };
    return { kind: 'point', x: num(`${name}.x`, v.x, 0, 1), y: num(`${name}.y`, v.y, 0, 1) };
  }
  const s = String(value);
  if (SIDES.has(s)) return { kind: 'side', side: s as 'auto' };
  const m = /^(\d*\.?\d+)x(\d*\.?\d+)$/.exec(s);
  if (m) return { kind: 'point', x: num(name, m[1], 0, 1), y: num(name, m[2], 0, 1) };
  throw new OptionError(name, `${JSON.stringify(value)} is not one of auto, face, center, left, right, top, bottom or XxY coordinates (0-1)`);
}

/** Parses `w=400,fit=cover` (the delivery and `/cdn-cgi/image/` form). */
export function parseOptionString(text: string): TransformOptions {
  const out: TransformOptions = {};
  for (const item of splitOptions(text)) {
    if (item === '') continue;
    const eq = item.indexOf('=');
    if (eq <= 0) throw new OptionError(item, 'expected name=value');
    let value: string;
    try {
      value = decodeURIComponent(item.slice(eq + 1));
    } catch {
      throw new OptionError(item.slice(0, eq), 'value is not valid percent-encoding');
    }
    setOption(out, item.slice(0, eq), value);
  }
  return out;
}

/** Splits on commas outside parentheses (`background=rgb(1,2,3)` stays one item). */
function splitOptions(text: string): string[] {
  const items: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === '(') depth++;
    else if (ch === ')') depth = Math.max(0, depth - 1);
    else if (ch === ',' && depth === 0) {
      items.push(text.slice(start, i));
      start = i + 1;
    }
  }
  items.push(text.slice(start));
  return items;
}

/** The binding's / variant's object form (`{width: 400, fit: 'cover'}`). */
export function parseOptionObject(obj: Record<string, unknown>, ignore: ReadonlySet<string> = new Set()): TransformOptions {
  const out: TransformOptions = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v === undefined || ignore.has(k)) continue;
    setOption(out, k, v);
  }
  return out;
}

/** A canonical text of the options, for cache keys and ETags. */
export function canonical(o: TransformOptions): string {
  return JSON.stringify(Object.keys(o).sort().map((k) => [k, o[k as keyof TransformOptions]]));
}

const NAMED: Record<string, [number, number, number]> = {
  black: [0, 0, 0], white: [255, 255, 255], red: [255, 0, 0], lime: [0, 255, 0], green: [0, 128, 0],
  blue: [0, 0, 255], yellow: [255, 255, 0], cyan: [0, 255, 255], aqua: [0, 255, 255], magenta: [255, 0, 255],
  fuchsia: [255, 0, 255], gray: [128, 128, 128], grey: [128, 128, 128], silver: [192, 192, 192],
  maroon: [128, 0, 0], olive: [128, 128, 0], purple: [128, 0, 128], teal: [0, 128, 128], navy: [0, 0, 128],
  orange: [255, 165, 0], pink: [255, 192, 203], brown: [165, 42, 42],
};

/** CSS colours: `#rgb`, `#rgba`, `#rrggbb`, `#rrggbbaa`, `rgb(…)`, `rgba(…)`, basic names, `transparent`. */
export function parseColor(name: string, text: string): { r: number; g: number; b: number; alpha: number } {
  const s = text.trim().toLowerCase();
  if (s === 'transparent') return { r: 0, g: 0, b: 0, alpha: 0 };
  const named = NAMED[s];
  if (named) return { r: named[0], g: named[1], b: named[2], alpha: 1 };
  let m = /^#([0-9a-f]{3,4}|[0-9a-f]{6}|[0-9a-f]{8})$/.exec(s);
  if (m) {
    let hex = m[1];
    if (hex.length <= 4) hex = [...hex].map((c) => c + c).join('');
    const v = (i: number) => parseInt(hex.slice(i, i + 2), 16);
    return { r: v(0), g: v(2), b: v(4), alpha: hex.length === 8 ? v(6) / 255 : 1 };
  }
  m = /^rgba?\(\s*(\d{1,3})\s*[, ]\s*(\d{1,3})\s*[, ]\s*(\d{1,3})\s*(?:[,/]\s*(\d*\.?\d+)\s*)?\)$/.exec(s);
  if (m) {
    const [r, g, b] = [m[1], m[2], m[3]].map(Number);
    const alpha = m[4] === undefined ? 1 : Number(m[4]);
    if (r <= 255 && g <= 255 && b <= 255 && alpha <= 1) return { r, g, b, alpha };
  }
  throw new OptionError(name, `${JSON.stringify(text)} is not a CSS colour (#rrggbb, rgb(r,g,b), rgba(r,g,b,a) or a basic name)`);
}
