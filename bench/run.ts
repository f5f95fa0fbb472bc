/**
 * Benchmark dispatcher: `npm run bench -- <name> [options]` runs `bench/<name>.ts`, whose
 * `main(args)` returns the exit code. Without a name, or with an unknown one, lists them.
 */
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const HERE = fileURLToPath(new URL('.', import.meta.url));
/** Files in bench/ that are not benchmarks themselves. */
const NOT_BENCHMARKS = new Set(['run', 'baseline-server']);

interface Benchmark {
  description?: string;
  main(args: string[]): Promise<number>;
}

function available(): string[] {
  return readdirSync(HERE)
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
    .map((f) => f.slice(0, -3))
    .filter((name) => !NOT_BENCHMARKS.has(name))
    .sort();
}

async function list(out: NodeJS.WriteStream): Promise<void> {
  out.write(
    'usage: npm run bench -- <name> [options]   (options: npm run bench -- <name> --help)\n\nbenchmarks:\n',
  );
  for (const name of available()) {
    const mod = (await import(`./${name}.ts`)) as Partial<Benchmark>;
    out.write(`  ${name.padEnd(16)} ${mod.description ?? ''}\n`);
  }
}

async function run(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (name === undefined || name === '--help' || name === '-h') {
    await list(process.stdout);
    return name === undefined ? 2 : 0;
  }
  if (!available().includes(name)) {
    process.stderr.write(`unknown benchmark: ${name}\n\n`);
    await list(process.stderr);
    return 2;
  }
  const mod = (await import(`./${name}.ts`)) as Partial<Benchmark>;
  if (typeof mod.main !== 'function') {
    process.stderr.write(`bench/${name}.ts has no main(args) export\n`);
    return 2;
  }
  return mod.main(args);
}

run(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
