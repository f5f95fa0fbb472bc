/**
 * Live transcript latency: a Chromium participant speaks a known sentence (espeak-ng, looped) into
 * a meeting whose preset enables transcription; for each recognised repetition, the time from the
 * end of speech to the entry's arrival in the page (bench/lib/transcript-latency.ts says how it is
 * measured), p50 and max, and the word error rate. The peer beside it, in the same run: the
 * recogniser alone on the same recording (pocketsphinx on the espeak-ng PCM, no browser, Opus or
 * meeting), which is the floor the meeting path adds to.
 *
 *   npm run bench -- meeting-transcripts [--utterances 4]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/core/config.ts';
import { createLogger } from '../src/core/log.ts';
import { startServer } from '../src/server.ts';
import { recognise } from '../src/areas/realtime-kit/media/transcriber.ts';
import { intOption, parseOrExit } from './lib/args.ts';
import { ms, table } from './lib/format.ts';
import { runTranscripts, speechWav, wordErrorRate, SENTENCE } from './lib/transcript-latency.ts';

export const description = 'live transcript latency (speech end → text in the page) p50 and WER, beside the recogniser alone';

const USAGE = 'usage: npm run bench -- meeting-transcripts [--utterances N]   (1..20, default 4)\n';
const TOKEN = 'bench-transcripts-token-0123456789abcdef';

function parse(argv: string[]): { utterances: number } | 'help' {
  const o = { utterances: 4 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i]!.split('=', 2) as [string, string | undefined];
    if (flag === '--help' || flag === '-h') return 'help';
    const value = inline ?? argv[++i];
    if (flag === '--utterances') o.utterances = intOption(flag, value, 1, 20);
    else throw new Error(`unknown option ${flag}`);
  }
  return o;
}

/** The recogniser alone on the same speech: decode time of the utterance PCM, and its WER. */
async function recogniserAlone(): Promise<{ decodeMs: number; wer: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'outpost-bench-asr-'));
  try {
    const wav = speechWav(dir);
    execFileSync('ffmpeg', ['-loglevel', 'error', '-y', '-i', wav, '-ar', '16000', '-ac', '1', '-f', 's16le', join(dir, 'u.raw')]);
    const t0 = performance.now();
    const text = await recognise(readFileSync(join(dir, 'u.raw')));
    return { decodeMs: performance.now() - t0, wer: wordErrorRate(SENTENCE, text) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function main(argv: string[]): Promise<number> {
  const opts = parseOrExit(argv, parse, USAGE);
  if (typeof opts === 'number') return opts;
  const dataDir = mkdtempSync(join(tmpdir(), 'outpost-bench-transcripts-'));
  const config = loadConfig({}, {}, { apiPort: 0, edgePort: 0, turnPort: 0, dnsPort: 0, dataDir, database: join(dataDir, 'outpost.db'), apiToken: TOKEN, logLevel: 'silent' });
  const server = await startServer(config, { logger: createLogger('silent') });
  try {
    const alone = await recogniserAlone();
    const run = await runTranscripts({ origin: server.apiUrl, token: TOKEN, accountId: server.seeded.accountId, utterances: opts.utterances, timeoutMs: 30_000 + opts.utterances * 20_000 });
    await run.close();
    if (run.transcripts.length === 0) {
      process.stderr.write('no transcript arrived\n');
      return 1;
    }
    process.stdout.write(
      table(
        ['path', 'utterances', 'p50 latency', 'max latency', 'WER (mean)'],
        [
          ['meeting: Chromium → Opus → forwarder → recogniser → page', String(run.transcripts.length), ms(run.p50Ms), ms(Math.max(...run.latenciesMs)), `${(run.werMean * 100).toFixed(0)}%`],
          ['recogniser alone (decode of the same PCM)', '1', ms(alone.decodeMs), ms(alone.decodeMs), `${(alone.wer * 100).toFixed(0)}%`],
        ],
      ) + '\n',
    );
    return 0;
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
