/**
 * Child processes and cleanup for benchmarks. Every child, temporary directory and database
 * schema a benchmark creates is registered here and released in reverse order: on a normal end,
 * on an error, and on SIGINT/SIGTERM (which also aborts `abortSignal`, so request loops stop).
 * Whatever an async cleanup could not do before the process exits is done synchronously at exit:
 * children still alive get SIGKILL, directories are removed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

interface Cleanup {
  label: string;
  run: () => Promise<void>;
  /** Best effort at process exit, when `run` did not complete. */
  atExit?: () => void;
  /** Set once started; later callers wait for the same run. */
  running?: Promise<void>;
  finished: boolean;
}

const cleanups: Cleanup[] = [];
let allRunning: Promise<void> | undefined;
const abort = new AbortController();

/** Aborted on SIGINT/SIGTERM: loops stop, and the benchmark unwinds through its cleanups. */
export const abortSignal: AbortSignal = abort.signal;

export class Interrupted extends Error {
  constructor() {
    super('interrupted');
  }
}

function start(entry: Cleanup): Promise<void> {
  entry.running ??= (async () => {
    try {
      await entry.run();
    } catch (err) {
      process.stderr.write(`cleanup (${entry.label}) failed: ${(err as Error).message}\n`);
      try {
        entry.atExit?.();
      } catch {
        // already reported
      }
    } finally {
      entry.finished = true;
      const i = cleanups.indexOf(entry);
      if (i >= 0) cleanups.splice(i, 1);
    }
  })();
  return entry.running;
}

/** Registers a cleanup; returns a function that runs it now (once; concurrent callers share it). */
export function onCleanup(
  label: string,
  run: () => Promise<void> | void,
  atExit?: () => void,
): () => Promise<void> {
  const entry: Cleanup = { label, run: async () => run(), atExit, finished: false };
  cleanups.push(entry);
  return () => start(entry);
}

/** Runs every pending cleanup, newest first, one at a time. Concurrent callers share the run. */
export function runCleanups(): Promise<void> {
  allRunning ??= (async () => {
    for (;;) {
      const entry = [...cleanups].reverse().find((e) => !e.finished);
      if (!entry) break;
      await start(entry);
    }
  })().finally(() => {
    allRunning = undefined;
  });
  return allRunning;
}

let installed = false;

/** Installs the signal and exit handlers (once). */
export function installCleanupHandlers(): void {
  if (installed) return;
  installed = true;
  const onSignal = (signal: NodeJS.Signals) => {
    if (abort.signal.aborted) {
      process.stderr.write(`\n${signal} again: exiting without waiting for cleanup\n`);
      process.exit(130);
    }
    process.stderr.write(`\n${signal}: stopping the run, the servers, and cleaning up…\n`);
    abort.abort();
    // The benchmark's own `finally` awaits the same run; this is in case it is stuck elsewhere.
    void runCleanups();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('exit', () => {
    for (const entry of [...cleanups].reverse()) {
      if (entry.finished) continue;
      try {
        entry.atExit?.();
      } catch {
        // nothing more can be done while exiting
      }
    }
  });
}

/** Throws Interrupted once a signal has arrived. */
export function throwIfInterrupted(): void {
  if (abort.signal.aborted) throw new Interrupted();
}

/** A fresh temporary directory, removed on cleanup. */
export function tempDir(prefix: string): { path: string; remove: () => Promise<void> } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  const rm = () => rmSync(path, { recursive: true, force: true });
  const remove = onCleanup(`remove ${path}`, rm, rm);
  return { path, remove };
}

export interface Child {
  name: string;
  proc: ChildProcess;
  /** The regex match of the ready line. */
  ready: RegExpExecArray;
  /** The last part of the child's stdout and stderr. */
  output(): string;
  /** True once the child has exited without being asked to. */
  crashed(): boolean;
  /** SIGTERM, then SIGKILL after 10 s; resolves when the child has exited. */
  stop(): Promise<void>;
}

const OUTPUT_KEEP = 64 * 1024;

/**
 * Spawns `node <args>` and waits for its stdout to match `ready`. The child is stopped on cleanup;
 * its output is kept (the last 64 KiB) for error messages.
 */
export async function spawnNode(
  name: string,
  args: string[],
  opts: {
    env?: Record<string, string>;
    cwd: string;
    ready: RegExp;
    timeoutMs?: number;
    stdinPipe?: boolean;
  },
): Promise<Child> {
  const proc = spawn(process.execPath, args, {
    cwd: opts.cwd,
    env: { ...process.env, ...opts.env },
    stdio: [opts.stdinPipe ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const append = (d: Buffer) => {
    out += d.toString('utf8');
    if (out.length > OUTPUT_KEEP * 2) out = out.slice(-OUTPUT_KEEP);
  };
  proc.stdout!.on('data', append);
  proc.stderr!.on('data', append);
  // A child that dies closes its stdin; writing to it must not crash the benchmark.
  proc.stdin?.on('error', () => {});
  let stopping = false;
  let exited = false;
  const exitPromise = new Promise<void>((resolve) => {
    proc.once('exit', () => {
      exited = true;
      resolve();
    });
    proc.once('error', (err) => {
      append(Buffer.from(`\n[spawn error] ${err.message}\n`));
      if (proc.pid === undefined) {
        exited = true;
        resolve();
      }
    });
  });

  const kill = (signal: NodeJS.Signals) => {
    if (exited || proc.pid === undefined) return;
    try {
      proc.kill(signal);
    } catch {
      // already gone
    }
  };
  let graceMs = 10_000;
  const stopNow = async () => {
    stopping = true;
    if (exited) return;
    kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([exitPromise, deadline]);
    clearTimeout(timer);
    if (!exited) {
      process.stderr.write(`${name} did not stop within ${graceMs} ms: SIGKILL\n`);
      kill('SIGKILL');
      await exitPromise;
    }
  };
  const release = onCleanup(`stop ${name} (pid ${proc.pid})`, stopNow, () => kill('SIGKILL'));

  const timeoutMs = opts.timeoutMs ?? 30_000;
  let ready: RegExpExecArray;
  try {
    ready = await new Promise<RegExpExecArray>((resolve, reject) => {
      const timer = setTimeout(
        () => done(new Error(`${name} did not start within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const check = () => {
        const m = opts.ready.exec(out);
        if (m) done(undefined, m);
      };
      const onExit = () =>
        done(
          new Error(
            `${name} exited during start (code ${proc.exitCode}, signal ${proc.signalCode})`,
          ),
        );
      const onAbort = () => done(new Interrupted());
      function done(err?: Error, m?: RegExpExecArray) {
        clearTimeout(timer);
        proc.stdout!.off('data', check);
        proc.off('exit', onExit);
        abortSignal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(m!);
      }
      proc.stdout!.on('data', check);
      proc.once('exit', onExit);
      abortSignal.addEventListener('abort', onAbort);
      if (exited) onExit();
      else check();
    });
  } catch (err) {
    graceMs = 2_000;
    await release();
    if (err instanceof Interrupted) throw err;
    throw new Error(`${(err as Error).message}\n--- ${name} output ---\n${out.slice(-4000)}`);
  }

  return {
    name,
    proc,
    ready,
    output: () => out,
    crashed: () => exited && !stopping,
    stop: release,
  };
}

/**
 * CPU time (user + system, ms) used so far by a process and every descendant (Linux `/proc`;
 * undefined elsewhere). Measured per phase, it tells what a request costs even when the machine is
 * shared and requests/s are not comparable between runs.
 */
export function cpuMsOfTree(pid: number): number | undefined {
  let entries: string[];
  try {
    entries = readdirSync('/proc').filter((e) => /^\d+$/.test(e));
  } catch {
    return undefined;
  }
  const children = new Map<number, number[]>();
  const cpu = new Map<number, number>();
  const ticksMs = 1000 / 100; // USER_HZ is 100 on Linux
  for (const e of entries) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${e}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const id = Number(e);
    const ppid = Number(fields[1]);
    cpu.set(id, (Number(fields[11]) + Number(fields[12])) * ticksMs);
    const list = children.get(ppid) ?? [];
    list.push(id);
    children.set(ppid, list);
  }
  if (!cpu.has(pid)) return undefined;
  let total = 0;
  const stack = [pid];
  while (stack.length > 0) {
    const id = stack.pop()!;
    total += cpu.get(id) ?? 0;
    stack.push(...(children.get(id) ?? []));
  }
  return total;
}
