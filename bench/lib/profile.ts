/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`): self time by function and by where the
 * code lives (a package under node_modules, a folder of src/, Node internals, GC), idle excluded.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileSummary {
  busyMs: number;
  byFunction: { name: string; ms: number }[];
  byPlace: { place: string; ms: number }[];
}

function place(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native)';
  let path = url;
  try {
    if (url.startsWith('file:')) path = fileURLToPath(url);
  } catch {
    // keep the URL
  }
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path);
  if (nm) return nm[1];
  if (path.startsWith('node:')) return 'node internals';
  const src = /\/(src|bench)\/(.*)\/[^/]+$/.exec(path) ?? /\/(src|bench)\/([^/]+)$/.exec(path);
  if (src) return `${src[1]}/${src[2].split('/').slice(0, 2).join('/')}`;
  return path;
}

function shortUrl(url: string): string {
  const i = url.search(/\/(node_modules|src|bench)\//);
  return i >= 0 ? url.slice(i + 1) : url.replace(/^file:\/\//, '');
}

export function summariseProfile(file: string, top = 15): ProfileSummary {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  for (let i = 0; i < prof.samples.length; i++) {
    const id = prof.samples[i];
    self.set(id, (self.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0));
  }
  const fnTotals = new Map<string, number>();
  const placeTotals = new Map<string, number>();
  let busy = 0;
  for (const [id, us] of self) {
    const node = byId.get(id);
    if (!node) continue;
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === '(idle)' || functionName === '(program)' || functionName === '(root)')
      continue;
    busy += us;
    const name = `${functionName || '(anonymous)'}${url ? ` ${shortUrl(url)}:${lineNumber + 1}` : ''}`;
    fnTotals.set(name, (fnTotals.get(name) ?? 0) + us);
    const p = place(url, functionName);
    placeTotals.set(p, (placeTotals.get(p) ?? 0) + us);
  }
  const sorted = <K>(m: Map<K, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return {
    busyMs: busy / 1000,
    byFunction: sorted(fnTotals)
      .slice(0, top)
      .map(([name, us]) => ({ name, ms: us / 1000 })),
    byPlace: sorted(placeTotals)
      .slice(0, top)
      .map(([p, us]) => ({ place: p, ms: us / 1000 })),
  };
}
