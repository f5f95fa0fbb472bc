import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Cloudflare, { toFile } from 'cloudflare';
import { boundaryOf, parseMultipart } from '../../src/core/multipart.ts';
import { ApiError } from '../../src/core/errors.ts';

interface Part {
  name: string;
  value: string;
  filename?: string;
  type?: string;
}

/** Encodes parts as multipart/form-data by hand (CRLF line ends, as clients send). */
function encode(boundary: string, parts: Part[], eol = '\r\n'): Buffer {
  let out = '';
  for (const p of parts) {
    out += `--${boundary}${eol}`;
    out += `Content-Disposition: form-data; name="${p.name}"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}${eol}`;
    if (p.type) out += `Content-Type: ${p.type}${eol}`;
    out += eol + p.value + eol;
  }
  out += `--${boundary}--${eol}`;
  return Buffer.from(out, 'utf8');
}

const B = '----outpostBoundary7MA4YWxk';

describe('parseMultipart: the spec form (JSON metadata part + file parts)', () => {
  const body = encode(B, [
    {
      name: 'metadata',
      value: JSON.stringify({
        main_module: 'main.js',
        tags: ['a', 'b'],
        compatibility_date: '2026-01-01',
      }),
      type: 'application/json',
    },
    {
      name: 'files',
      filename: 'main.js',
      type: 'application/javascript+module',
      value: 'export default { fetch() { return new Response("hi") } }',
    },
    {
      name: 'files',
      filename: 'util.js',
      type: 'application/javascript+module',
      value: 'export const x = 1;',
    },
  ]);

  it('parses metadata as JSON and keeps every file with its name, type and bytes', () => {
    const form = parseMultipart(`multipart/form-data; boundary=${B}`, body);
    expect(form.metadata).toEqual({
      main_module: 'main.js',
      tags: ['a', 'b'],
      compatibility_date: '2026-01-01',
    });
    expect(form.files.map((f) => [f.field, f.filename, f.type])).toEqual([
      ['files', 'main.js', 'application/javascript+module'],
      ['files', 'util.js', 'application/javascript+module'],
    ]);
    expect(form.files[1].data.toString('utf8')).toBe('export const x = 1;');
    expect(form.fields).toEqual({});
  });

  it('accepts a quoted boundary in the header', () => {
    const form = parseMultipart(`multipart/form-data; boundary="${B}"`, body);
    expect(form.metadata.main_module).toBe('main.js');
    expect(form.files).toHaveLength(2);
  });

  it('accepts a metadata part sent as a JSON file (curl -F metadata=@meta.json)', () => {
    const b = encode(B, [
      {
        name: 'metadata',
        filename: 'meta.json',
        type: 'application/json',
        value: '{"main_module":"w.js"}',
      },
      { name: 'w.js', filename: 'w.js', type: 'application/javascript+module', value: 'x' },
    ]);
    const form = parseMultipart(`multipart/form-data; boundary=${B}`, b);
    expect(form.metadata).toEqual({ main_module: 'w.js' });
    expect(form.files.map((f) => f.field)).toEqual(['w.js']);
  });

  it('keeps binary file content byte for byte', () => {
    const bytes = Buffer.from([0, 1, 2, 0x0d, 0x0a, 0xff, 0xfe, 0x2d, 0x2d]);
    const head = Buffer.from(
      `--${B}\r\nContent-Disposition: form-data; name="file"; filename="x.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
    );
    const tail = Buffer.from(`\r\n--${B}--\r\n`);
    const form = parseMultipart(
      `multipart/form-data; boundary=${B}`,
      Buffer.concat([head, bytes, tail]),
    );
    expect(form.files[0].data.equals(bytes)).toBe(true);
  });

  it('accepts bare LF line ends', () => {
    const b = encode(
      B,
      [
        { name: 'metadata', value: '{"a":1}' },
        { name: 'note', value: 'hello' },
      ],
      '\n',
    );
    const form = parseMultipart(`multipart/form-data; boundary=${B}`, b);
    expect(form.metadata).toEqual({ a: 1 });
    expect(form.fields).toEqual({ note: 'hello' });
  });
});

describe('parseMultipart: the official client bracket form', () => {
  it('builds metadata from bracket fields and collects files[] parts', () => {
    const body = encode(B, [
      { name: 'metadata[main_module]', value: 'main.js' },
      { name: 'metadata[tags][]', value: 'one' },
      { name: 'metadata[tags][]', value: 'two' },
      { name: 'metadata[bindings][0][name]', value: 'KV' },
      { name: 'metadata[logpush]', value: 'false' },
      {
        name: 'files[]',
        filename: 'main.js',
        type: 'application/javascript+module',
        value: 'export default {}',
      },
    ]);
    const form = parseMultipart(`multipart/form-data; boundary=${B}`, body);
    expect(form.metadata.main_module).toBe('main.js');
    expect(form.metadata.tags).toEqual(['one', 'two']);
    expect(form.metadata.logpush).toBe(false);
    expect(form.metadata.bindings).toEqual({ 0: { name: 'KV' } });
    expect(form.files).toHaveLength(1);
    expect(form.files[0]).toMatchObject({
      field: 'files',
      filename: 'main.js',
      type: 'application/javascript+module',
    });
    expect(form.files[0].data.toString()).toBe('export default {}');
  });

  it('parses a body produced by the platform FormData encoder', async () => {
    const fd = new FormData();
    fd.append('metadata[main_module]', 'main.js');
    fd.append('metadata[tags][]', 't1');
    fd.append('requireSignedURLs', 'true');
    fd.append(
      'files[]',
      new Blob(['console.log(1)'], { type: 'application/javascript+module' }),
      'main.js',
    );
    const res = new Response(fd);
    const type = res.headers.get('content-type') ?? '';
    const body = Buffer.from(await res.arrayBuffer());
    const form = parseMultipart(type, body);
    expect(form.metadata).toEqual({ main_module: 'main.js', tags: ['t1'] });
    expect(form.fields).toEqual({ requireSignedURLs: 'true' });
    expect(form.files[0].filename).toBe('main.js');
    expect(form.files[0].data.toString()).toBe('console.log(1)');
  });

  it('rebuilds arrays of objects from `[][field]` parts (a repeated field starts the next object)', () => {
    const body = encode(B, [
      { name: 'metadata[bindings][][name]', value: 'A' },
      { name: 'metadata[bindings][][type]', value: 'plain_text' },
      { name: 'metadata[bindings][][tags][]', value: 'x' },
      { name: 'metadata[bindings][][tags][]', value: 'y' },
      { name: 'metadata[bindings][][name]', value: 'B' },
      { name: 'metadata[bindings][][type]', value: 'secret_text' },
    ]);
    const form = parseMultipart(`multipart/form-data; boundary=${B}`, body);
    expect(form.metadata.bindings).toEqual([
      { name: 'A', type: 'plain_text', tags: ['x', 'y'] },
      { name: 'B', type: 'secret_text' },
    ]);
  });

  it('never writes bracket fields through to object prototypes', () => {
    const body = encode(B, [
      { name: 'metadata[__proto__][polluted]', value: 'yes' },
      { name: 'metadata[constructor][prototype][polluted]', value: 'yes' },
      { name: 'metadata[ok]', value: 'fine' },
    ]);
    const form = parseMultipart(`multipart/form-data; boundary=${B}`, body);
    expect(form.metadata).toEqual({ ok: 'fine' });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('turns repeated plain fields into an array', () => {
    const body = encode(B, [
      { name: 'tag', value: 'a' },
      { name: 'tag', value: 'b' },
      { name: 'tag', value: 'c' },
    ]);
    expect(parseMultipart(`multipart/form-data; boundary=${B}`, body).fields).toEqual({
      tag: ['a', 'b', 'c'],
    });
  });
});

describe('boundary sniffing', () => {
  const body = encode(B, [
    { name: 'metadata', value: '{"main_module":"index.js"}' },
    {
      name: 'index.js',
      filename: 'index.js',
      type: 'application/javascript+module',
      value: 'export default {}',
    },
  ]);

  it('finds the boundary in the first body line when the Content-Type has none', () => {
    expect(boundaryOf('application/javascript', body)).toBe(B);
    const form = parseMultipart('application/javascript', body);
    expect(form.metadata).toEqual({ main_module: 'index.js' });
    expect(form.files[0].filename).toBe('index.js');
  });

  it('also sniffs with no Content-Type at all and with multipart/form-data lacking a boundary', () => {
    expect(parseMultipart(undefined, body).files).toHaveLength(1);
    expect(parseMultipart('multipart/form-data', body).metadata.main_module).toBe('index.js');
  });

  it('prefers the header boundary', () => {
    expect(boundaryOf('multipart/form-data; boundary=abc', body)).toBe('abc');
  });
});

describe('malformed multipart → 400', () => {
  const expect400 = (fn: () => unknown, pattern?: RegExp) => {
    try {
      fn();
      expect.unreachable('should have thrown');
    } catch (err) {
      expect(err).toBeInstanceOf(ApiError);
      expect((err as ApiError).status).toBe(400);
      expect((err as ApiError).errors[0].code).toBeGreaterThanOrEqual(1000);
      if (pattern) expect((err as ApiError).errors[0].message).toMatch(pattern);
    }
  };

  it('rejects a body without its boundary', () => {
    expect400(
      () => parseMultipart('multipart/form-data; boundary=nothere', Buffer.from('hello world')),
      /boundary/,
    );
  });

  it('rejects a body without a closing boundary', () => {
    const cut = Buffer.from(`--${B}\r\nContent-Disposition: form-data; name="a"\r\n\r\nvalue`);
    expect400(() => parseMultipart(`multipart/form-data; boundary=${B}`, cut), /closing boundary/);
  });

  it('rejects a part without headers', () => {
    const b = Buffer.from(`--${B}\r\nno header separator here\r\n--${B}--\r\n`);
    expect400(() => parseMultipart(`multipart/form-data; boundary=${B}`, b), /header/);
  });

  it('rejects a part without a name', () => {
    const b = Buffer.from(`--${B}\r\nContent-Type: text/plain\r\n\r\nx\r\n--${B}--\r\n`);
    expect400(() => parseMultipart(`multipart/form-data; boundary=${B}`, b), /name/);
  });

  it('rejects a metadata part that is not JSON, naming metadata', () => {
    const b = encode(B, [{ name: 'metadata', value: '{not json' }]);
    expect400(() => parseMultipart(`multipart/form-data; boundary=${B}`, b), /^metadata/);
  });

  it('answers 415 for a body that is not multipart at all', () => {
    try {
      parseMultipart('application/json', Buffer.from('{"a":1}'));
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ApiError);
      expect((err as ApiError).status).toBe(415);
    }
  });
});

describe('what the official client actually sends', () => {
  // A bare HTTP server captures the client's upload; the parser must read it back intact.
  let server: Server;
  let base = '';
  const captured: { contentType: string | undefined; body: Buffer }[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        captured.push({ contentType: req.headers['content-type'], body: Buffer.concat(chunks) });
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ success: true, errors: [], messages: [], result: {} }));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/client/v4`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('parses a script upload: bracket metadata, arrays of objects, files[], boundary sniffed', async () => {
    const client = new Cloudflare({ baseURL: base, apiToken: 'unused', maxRetries: 0 });
    const metadata = {
      main_module: 'main.js',
      compatibility_date: '2026-01-01',
      bindings: [
        { name: 'GREETING', type: 'plain_text', text: 'hello' },
        { name: 'OTHER', type: 'plain_text', text: 'bye' },
      ],
      tags: ['t1', 't2'],
    };
    await client.workers.scripts.update('my-script', {
      account_id: '023e105f4ecef8ad9ca31a8372d0c353',
      metadata: metadata as never,
      files: [
        await toFile(Buffer.from('export default { fetch() {} }'), 'main.js', {
          type: 'application/javascript+module',
        }),
      ],
    });
    const { contentType, body } = captured[captured.length - 1];
    const form = parseMultipart(contentType, body);
    expect(form.metadata).toEqual(metadata);
    expect(form.files).toHaveLength(1);
    expect(form.files[0]).toMatchObject({
      field: 'files',
      filename: 'main.js',
      type: 'application/javascript+module',
    });
    expect(form.files[0].data.toString()).toBe('export default { fetch() {} }');
  });
});
