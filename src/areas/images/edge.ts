/**
 * `/cdn-cgi/image/<options>/<source>` on the edge: for any proxied host of a zone, the source
 * (a path on the same host, or an absolute URL on a host of the same zone) is fetched from the
 * zone's origin through the edge's origin leg (origin rules apply), transformed with the same
 * options and engine as delivery, and answered. Runs after the security phases, so IP access and
 * custom rules still block. Results are not cached here; the origin's Cache-Control is passed on.
 * The same phase serves stored images on a zone's host names at
 * `/cdn-cgi/imagedelivery/<account_hash>/<image_id>/<variant>` (see `delivery.ts`).
 */
import type { EdgeRequest, EdgeService, OriginFetcher } from '../../edge/index.ts';
import { PHASE_ORDER } from '../../edge/index.ts';
import type { Logger } from '../../core/log.ts';
import type { Clock } from '../../core/clock.ts';
import type { Delivery } from './delivery.ts';
import { OptionError, parseOptionString, type TransformOptions } from './options.ts';
import { MAX_IMAGE_BYTES } from './service.ts';
import { chooseFormat, inspect, transformImage, UPLOAD_FORMATS } from './transform.ts';

const PREFIX = '/cdn-cgi/image/';
const DELIVERY_PREFIX = '/cdn-cgi/imagedelivery/';

function answer(er: EdgeRequest, status: number, body: string | Buffer, headers: Record<string, string> = {}): 'handled' {
  const res = er.res!;
  res.writeHead(status, { 'cf-ray': `${er.rayId}-OUT`, 'content-type': 'text/plain; charset=utf-8', 'content-length': String(Buffer.byteLength(body)), ...headers });
  res.end(er.req.method === 'HEAD' ? undefined : body);
  return 'handled';
}

export function addImageTransformPhase(edge: EdgeService, origin: OriginFetcher, delivery: Delivery, clock: Clock, log: Logger): void {
  edge.addPhase({
    name: 'image_transform',
    // After the firewall and origin phases (origin rules decide where the source comes from).
    order: PHASE_ORDER.http_request_cache_settings + 5,
    async run(er) {
      const url = er.req.url ?? '/';
      if (er.res && url.startsWith(DELIVERY_PREFIX) && (er.req.method === 'GET' || er.req.method === 'HEAD')) {
        // Stored images on the zone's own host name: /cdn-cgi/imagedelivery/<hash>/<id>/<variant>.
        const u = new URL(url, 'http://zone');
        const path = u.pathname.slice(DELIVERY_PREFIX.length - 1);
        const headers = new Headers();
        for (const [k, v] of Object.entries(er.req.headers)) if (typeof v === 'string') headers.set(k, v);
        const r = await delivery.serve(path, u.search, headers, clock.now().getTime(), [path, u.pathname]);
        return answer(er, r.status, r.status === 304 ? '' : r.body, r.headers);
      }
      if (!er.res || !url.startsWith(PREFIX)) return 'continue';
      if (er.req.method !== 'GET' && er.req.method !== 'HEAD') return answer(er, 405, 'ERROR 9401: image transformations take GET or HEAD\n', { allow: 'GET, HEAD' });
      const rest = url.slice(PREFIX.length);
      const slash = rest.indexOf('/');
      if (slash <= 0) return answer(er, 400, 'ERROR 5403: expected /cdn-cgi/image/<options>/<source>\n');
      let options: TransformOptions;
      try {
        options = parseOptionString(rest.slice(0, slash));
      } catch (err) {
        if (err instanceof OptionError) return answer(er, 400, `ERROR 5403: invalid transform option ${err.message}\n`);
        throw err;
      }
      const source = rest.slice(slash + 1);
      let target: URL;
      try {
        target = /^https?:\/\//i.test(source) ? new URL(source) : new URL(`/${source.replace(/^\/+/, '')}`, `${er.scheme}://${er.host}`);
      } catch {
        return answer(er, 400, 'ERROR 9405: the source is not a URL\n');
      }
      const zone = er.route.zoneName;
      const host = target.hostname.toLowerCase();
      if (host !== er.host && host !== zone && !host.endsWith(`.${zone}`)) {
        return answer(er, 403, `ERROR 9403: the source must be on ${zone} or one of its subdomains\n`);
      }
      if (target.pathname.startsWith('/cdn-cgi/')) return answer(er, 400, 'ERROR 9405: the source may not be another /cdn-cgi/ path\n');

      const accept = typeof er.req.headers.accept === 'string' ? er.req.headers.accept : undefined;
      const upstream = await origin.fetch(er, new Request(`${er.scheme}://${host}${target.pathname}${target.search}`, { headers: { accept: 'image/*,*/*;q=0.8' } }));
      if (!upstream.ok || !upstream.body) {
        await upstream.body?.cancel().catch(() => {});
        return answer(er, upstream.status >= 400 ? upstream.status : 502, `ERROR 9404: the origin answered ${upstream.status} for the source\n`);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of upstream.body as unknown as AsyncIterable<Uint8Array>) {
        size += chunk.byteLength;
        if (size > MAX_IMAGE_BYTES) return answer(er, 413, 'ERROR 5401: the source is over 100 MB\n');
        chunks.push(Buffer.from(chunk));
      }
      const input = Buffer.concat(chunks);
      const info = await inspect(input);
      if (!info || !UPLOAD_FORMATS.has(info.format)) return answer(er, 415, 'ERROR 5400: the source is not a JPEG, PNG, GIF, WebP or SVG image\n');
      try {
        const out = await transformImage(input, options, { format: chooseFormat(options, info.format, accept) });
        return answer(er, 200, out.data, {
          'content-type': out.contentType,
          'cache-control': upstream.headers.get('cache-control') ?? 'public, max-age=3600',
          vary: 'Accept',
          'cf-resized': `internal=ok q=${options.quality ?? 85} n=${info.width}x${info.height}`,
        });
      } catch (err) {
        log.warn({ err, ray: er.rayId }, 'edge image transform failed');
        return answer(er, 415, `ERROR 5400: the source could not be transformed: ${(err as Error).message}\n`);
      }
    },
  });
}
