// Entry of the pipelines transform thread: worker threads do not inherit the main thread's
// TypeScript loader, so this plain module registers it before loading the worker's source.
import { register } from 'tsx/esm/api';

register();
await import('./transform-worker.ts');
