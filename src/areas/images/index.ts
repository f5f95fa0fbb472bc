/**
 * @module images — spec 002 "Images" (transform options, endpoints, delivery, binding, error
 * codes) with the real shapes of reference §2.18.
 *
 * API (`/accounts/{account_id}/images`): `POST /v1` multipart `file` or `url` (+ `id`, `metadata`
 * JSON text, `requireSignedURLs`, `creator`), streamed to disk (never whole in memory), formats
 * JPEG, PNG, GIF (animated too), WebP, SVG (sanitised, see `svg.ts`) else 5400, over 100 MB 5401;
 * `GET /v1` (page/per_page, `result.images` and the client's `result.items`), `GET /v2`
 * (`continuation_token`), `GET|PATCH|DELETE /v1/{id}`, `GET /v1/{id}/blob`, variants
 * (`/v1/variants`, default `public`), signing keys (`/v1/keys`, at most two, PUT rotates),
 * `/v1/stats`, `POST /v2/direct_upload` (JSON as the spec, multipart as the client) →
 * `{id, uploadURL}`: a draft record whose one-time, expiring upload URL takes a multipart `file`
 * without a token.
 *
 * Delivery (`delivery.ts`): `/<account_hash>/<image_id>/<variant | options>` and
 * `/cdn-cgi/imagedelivery/…` on the API port, whatever the Host header; `/cdn-cgi/image/<options>/
 * <source>` on the edge for zones (`edge.ts`). Transforms in `transform.ts` (sharp).
 *
 * Permissions: Images Read / Images Write (account).
 *
 * LIMITATIONS: animated sources keep their frames in GIF/WebP output except with rotate, levels,
 * attention or point gravity (then the first frame); gravity `face` uses libvips' attention strategy, not a face
 * detector; upload by URL refuses loopback and private addresses unless
 * `--images-fetch-allow-private`; error codes other than 5400/5401/5403 are Outpost's.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { defineArea } from '../../core/area.ts';
import { BlobStore } from '../../core/storage/blobs.ts';
import { EDGE, OriginFetcher, type EdgeService } from '../../edge/index.ts';
import { Delivery } from './delivery.ts';
import { addImageTransformPhase } from './edge.ts';
import { mountImageRoutes, IMAGES_PERMISSION } from './routes.ts';
import { ImageService } from './service.ts';
import { ImageStore } from './store.ts';

export const IMAGES_SERVICE = 'images';
export type { ImageService } from './service.ts';
export { accountHash } from './store.ts';
export { signPath } from './delivery.ts';
/** The script binding: the Node end and the in-script shim (`__imagesBinding(fetcher)`). */
export { imagesBinding, IMAGES_SHIM } from './binding.ts';

export default defineArea({
  name: 'images',
  mount(ctx) {
    const log = ctx.log.child({ area: 'images' });
    ctx.permissions.define({ key: IMAGES_PERMISSION, name: 'Images', scope: 'account' });
    const blobs = new BlobStore(join(ctx.config.dataDir, 'blobs'));
    const cache = new BlobStore(join(ctx.config.dataDir, 'cache', 'images'));
    const store = new ImageStore(ctx.database, ctx.clock);
    const images = new ImageService(store, blobs, ctx.config, ctx.clock, log);
    const delivery = new Delivery(images, cache, log);
    mountImageRoutes(ctx, images, delivery);
    ctx.services.provide<ImageService>(IMAGES_SERVICE, images);
    const origin = new OriginFetcher({ connectTimeoutMs: ctx.config.originConnectTimeoutMs, responseTimeoutMs: ctx.config.originResponseTimeoutMs });
    addImageTransformPhase(ctx.services.require<EdgeService>(EDGE), origin, delivery, ctx.clock, log);
    return {
      // Temporary files of uploads cut short by a crash are never adopted: clear them.
      start: async () => rm(images.tmpDir, { recursive: true, force: true }),
      stop: async () => origin.close(),
    };
  },
});
