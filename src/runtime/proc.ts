/**
 * What the host reads about runtime processes from `/proc` (Linux): which child process a runtime
 * instance is, and how much CPU time and memory it uses. workerd has no CPU limit of its own, so
 * these numbers are what the watchdog enforces limits with. Elsewhere (no `/proc`) every read
 * returns undefined and only the wall-clock timeout applies.
 *
 * It also binds runtime processes to the host's life: Miniflare starts workerd from
 * `MINIFLARE_WORKERD_PATH`, which `bindRuntimeToHost` points at `workerd-bound.sh` so the kernel
 * kills workerd when Outpost ends, even by `kill -9` (parent-death signal, Linux `setpriv`).
 */
import { accessSync, constants, readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const TICK_NS = 10_000_000; // USER_HZ is 100 on Linux
const PAGE_BYTES = 4096;

const WRAPPER = fileURLToPath(new URL('./workerd-bound.sh', import.meta.url));
const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'];
/** Names a runtime child has on its way to workerd (the wrapper, then setpriv, then workerd). */
const RUNTIME_COMMS = ['workerd', 'workerd-bound.s', 'setpriv'];

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

let bound: boolean | undefined;

/**
 * Makes every workerd that Miniflare starts from now on end with this process (idempotent). Needs
 * Linux `setpriv` (util-linux); without it runtime processes are ended only on a graceful stop, and
 * this returns false.
 */
export function bindRuntimeToHost(): boolean {
  if (bound !== undefined) return bound;
  bound = false;
  if (process.platform !== 'linux' || !SETPRIV.some(executable) || !executable(WRAPPER))
    return bound;
  // A process started by a bound one inherits the wrapper as MINIFLARE_WORKERD_PATH; the real
  // binary is then the one the parent recorded, or the wrapper would end up running itself.
  const inherited = process.env.MINIFLARE_WORKERD_PATH;
  const real =
    (inherited !== WRAPPER ? inherited : process.env.OUTPOST_WORKERD_BIN) ??
    (createRequire(import.meta.url)('workerd') as { default: string }).default;
  process.env.OUTPOST_WORKERD_BIN = real;
  process.env.MINIFLARE_WORKERD_PATH = WRAPPER;
  bound = true;
  return bound;
}

/** Process ids claimed by some instance in this process, so a new spawn is told apart. */
const claimed = new Set<number>();

interface ProcStat {
  ppid: number;
  comm: string;
  startTicks: number;
  cpuNs: number;
}

function readStat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return undefined;
  }
  // comm may contain spaces and parentheses: the fields after it start at the last ')'.
  const close = text.lastIndexOf(')');
  const comm = text.slice(text.indexOf('(') + 1, close);
  const f = text.slice(close + 2).split(' ');
  // f[0] is field 3 (state): ppid = field 4, utime = 14, stime = 15, starttime = 22.
  return {
    ppid: Number(f[1]),
    comm,
    startTicks: Number(f[19]),
    cpuNs: (Number(f[11]) + Number(f[12])) * TICK_NS,
  };
}

/**
 * The newest unclaimed `workerd` child of this process, claimed for the caller. Called right after
 * a spawn, synchronously, so no other spawn can come in between.
 */
export function claimNewestRuntimeChild(): number | undefined {
  let best: { pid: number; start: number } | undefined;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return undefined;
  }
  for (const name of entries) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid <= 0 || claimed.has(pid)) continue;
    const st = readStat(pid);
    if (!st || st.ppid !== process.pid || !RUNTIME_COMMS.some((c) => st.comm.startsWith(c)))
      continue;
    if (!best || st.startTicks > best.start || (st.startTicks === best.start && pid > best.pid))
      best = { pid, start: st.startTicks };
  }
  if (best) claimed.add(best.pid);
  return best?.pid;
}

export function releaseRuntimeChild(pid: number | undefined): void {
  if (pid !== undefined) claimed.delete(pid);
}

/** Resident set size in bytes. */
export function rssBytes(pid: number): number | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/statm`, 'latin1');
    return Number(text.split(' ')[1]) * PAGE_BYTES;
  } catch {
    return undefined;
  }
}

/**
 * CPU time and run-queue wait of the process's main thread, ns (`schedstat`). Their sum is the
 * time it wanted the CPU: a spinning script on a crowded machine waits much and runs little, an
 * idle one does neither. Without schedstat, the wait counts as zero.
 */
export function schedNs(pid: number): { cpu: number; runnable: number; total: number } | undefined {
  // All threads' CPU time, in clock ticks: coarse, but kept current by the kernel even for a
  // thread that spins on a core (the main thread's schedstat can lag then).
  const total = readStat(pid)?.cpuNs;
  if (total === undefined) return undefined;
  try {
    const [run, wait] = readFileSync(`/proc/${pid}/schedstat`, 'latin1').split(' ').map(Number);
    if (Number.isFinite(run) && Number.isFinite(wait))
      return { cpu: run, runnable: run + wait, total };
  } catch {
    // no schedstat: fall through
  }
  return { cpu: total, runnable: total, total };
}
