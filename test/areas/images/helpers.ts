/** Shared helpers for the images tests: generated pictures and multipart uploads. */
import sharp from 'sharp';
import type { TestServer } from '../../support/server.ts';

export async function solid(width: number, height: number, rgb: [number, number, number], format: 'jpeg' | 'png' | 'webp' | 'gif' = 'png'): Promise<Buffer> {
  const img = sharp({ create: { width, height, channels: 3, background: { r: rgb[0], g: rgb[1], b: rgb[2] } } });
  return img[format]().toBuffer();
}

/** Left half red, right half blue: shows which side a crop or rotation kept. */
export async function halves(width: number, height: number): Promise<Buffer> {
  const left = await sharp({ create: { width: Math.floor(width / 2), height, channels: 3, background: '#ff0000' } }).png().toBuffer();
  return sharp({ create: { width, height, channels: 3, background: '#0000ff' } })
    .composite([{ input: left, left: 0, top: 0 }])
    .png()
    .toBuffer();
}

/** Noise: blur changes its variance. */
export async function noise(width: number, height: number): Promise<Buffer> {
  const data = Buffer.alloc(width * height * 3);
  let x = 12345;
  for (let i = 0; i < data.length; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    data[i] = x & 0xff;
  }
  return sharp(data, { raw: { width, height, channels: 3 } }).png().toBuffer();
}

export async function upload(t: TestServer, fields: Record<string, string | { data: Buffer; name: string; type?: string }>, token = t.token) {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) {
    if (typeof v === 'string') form.append(k, v);
    else form.append(k, new Blob([new Uint8Array(v.data)], { type: v.type ?? 'application/octet-stream' }), v.name);
  }
  const res = await fetch(`${t.api}/accounts/${t.accountId}/images/v1`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: form });
  const text = await res.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, body, text };
}

export async function pixel(buf: Buffer, x: number, y: number): Promise<number[]> {
  const { data, info } = await sharp(buf).raw().toBuffer({ resolveWithObject: true });
  const i = (y * info.width + x) * info.channels;
  return [...data.subarray(i, i + info.channels)];
}

export function near(actual: number[], expected: number[], tolerance = 12): boolean {
  return expected.every((v, i) => Math.abs(actual[i] - v) <= tolerance);
}
