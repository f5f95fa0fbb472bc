/**
 * Live transcript measurement shared by the transcript test and benchmark: a participant in
 * Debian Chromium whose fake microphone plays an espeak-ng recording of a known sentence (looped,
 * with silence between repetitions) joins a meeting through Outpost's client SDK with a preset that
 * enables transcription; the page collects `meeting.ai` transcript events with their arrival time.
 *
 * Latency of one utterance = arrival in the page − end of speech, where the end of speech is the
 * utterance end the server stamped minus the quiet it waits before closing an utterance
 * (HANGOVER_MS): so the figure includes that wait, the recogniser and the fan-out, as a listener
 * experiences it. Server and page run on one host, so their clocks agree.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser } from 'puppeteer-core';
import { HANGOVER_MS } from '../../src/areas/realtime-kit/media/transcriber.ts';

export const CHROMIUM = '/usr/bin/chromium';
export const SENTENCE = 'please open the window and close the door because the weather is very cold today';
/** espeak-ng voice and speed the recogniser does best with among the stock voices (measured). */
const VOICE = ['-v', 'en-us+f2', '-s', '160'];

/** Word error rate: word-level Levenshtein distance / reference length. */
export function wordErrorRate(reference: string, hypothesis: string): number {
  const norm = (s: string) => s.toLowerCase().replace(/[^a-z0-9' ]+/g, ' ').split(/\s+/).filter(Boolean);
  const r = norm(reference);
  const h = norm(hypothesis);
  let prev = Array.from({ length: h.length + 1 }, (_, j) => j);
  for (let i = 1; i <= r.length; i++) {
    const cur = [i];
    for (let j = 1; j <= h.length; j++) cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (r[i - 1] === h[j - 1] ? 0 : 1));
    prev = cur;
  }
  return r.length === 0 ? (h.length ? 1 : 0) : prev[h.length]! / r.length;
}

export function percentile(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]! : NaN;
}

/** The fake microphone: 1 s of silence, the sentence, 2 s of silence (Chromium loops the file). */
export function speechWav(dir: string, sentence = SENTENCE): string {
  const raw = join(dir, 'speech-raw.wav');
  const out = join(dir, 'speech.wav');
  execFileSync('espeak-ng', [...VOICE, '-w', raw, sentence]);
  execFileSync('ffmpeg', ['-loglevel', 'error', '-y', '-i', raw, '-af', 'adelay=1000,apad=pad_dur=2', '-ar', '48000', '-ac', '1', '-c:a', 'pcm_s16le', out]);
  return out;
}

export interface TranscriptRunOptions {
  /** Outpost's API origin (`http://127.0.0.1:port`). */
  origin: string;
  token: string;
  accountId: string;
  /** Utterances to collect (each is one repetition of the sentence). */
  utterances: number;
  timeoutMs?: number;
  sentence?: string;
  log?: (msg: string) => void;
  /** Called once the meeting exists, before the speaker joins (e.g. to join a listener). */
  beforeSpeech?: (m: { appId: string; meetingId: string; base: string }) => Promise<void>;
}

export interface TranscriptRun {
  appId: string;
  meetingId: string;
  sessionId: string;
  /** `/accounts/{a}/realtime/kit/{app}` */
  base: string;
  reference: string;
  transcripts: { id: string; transcript: string; endTime: string; startTime: string; name: string; peerId: string; arrivedAt: number }[];
  werFirst: number;
  werMean: number;
  latenciesMs: number[];
  p50Ms: number;
  /** Leaves the meeting and closes the browser. */
  close(): Promise<void>;
}

const PAGE = String.raw`async (token) => {
  const { default: RealtimeKitClient } = await import('/realtime/kit/sdk.js');
  const meeting = await RealtimeKitClient.init({ authToken: token, defaults: { audio: true, video: false } });
  window.meeting = meeting;
  window.__tx = [];
  meeting.ai.on('transcript', (t) => window.__tx.push({ ...t, arrivedAt: Date.now(), inList: meeting.ai.transcripts.includes(t) }));
  await meeting.join();
  return meeting.meta.sessionId;
}`;

export async function runTranscripts(o: TranscriptRunOptions): Promise<TranscriptRun> {
  const log = o.log ?? (() => undefined);
  const reference = o.sentence ?? SENTENCE;
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${o.origin}/client/v4/accounts/${o.accountId}${path}`, { method, headers: { authorization: `Bearer ${o.token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = (await res.json()) as { success: boolean; data: any };
    if (!json.success) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json.data;
  };
  const appId = (await api('POST', '/realtime/kit/apps', { name: 'transcripts' })).app.id as string;
  const rk = `/realtime/kit/${appId}`;
  await api('POST', `${rk}/presets`, { name: 'speaker', permissions: { transcription_enabled: true, media: { audio: { can_produce: 'ALLOWED' }, video: { can_produce: 'ALLOWED' } } } });
  const meetingId = (await api('POST', `${rk}/meetings`, { title: 'Transcribed meeting' })).id as string;
  const speaker = await api('POST', `${rk}/meetings/${meetingId}/participants`, { custom_participant_id: 'speaker-1', preset_name: 'speaker', name: 'Sam Speaker' });

  await o.beforeSpeech?.({ appId, meetingId, base: `/accounts/${o.accountId}${rk}` });
  const dir = mkdtempSync(join(tmpdir(), 'outpost-transcripts-'));
  const wav = speechWav(dir, reference);
  let browser: Browser | undefined;
  const close = async () => {
    await browser?.close().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      userDataDir: join(dir, 'profile'),
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--use-fake-ui-for-media-stream', '--use-fake-device-for-media-stream', `--use-file-for-fake-audio-capture=${wav}`, '--autoplay-policy=no-user-gesture-required'],
    });
    const page = await browser.newPage();
    page.on('pageerror', (err) => log(`page error: ${(err as Error).message}`));
    await page.goto(`${o.origin}/realtime/kit/sdk.d.ts`);
    const sessionId = (await page.evaluate(`(${PAGE})(${JSON.stringify(speaker.token)})`)) as string;
    log(`joined session ${sessionId}`);
    const end = Date.now() + (o.timeoutMs ?? 60_000);
    let got: TranscriptRun['transcripts'] = [];
    while (Date.now() < end) {
      got = (await page.evaluate('window.__tx')) as TranscriptRun['transcripts'];
      if (got.length >= o.utterances) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    for (const t of got) log(`heard: "${t.transcript}"`);
    const wers = got.map((t) => wordErrorRate(reference, t.transcript));
    const latenciesMs = got.map((t) => t.arrivedAt - (Date.parse(t.endTime) - HANGOVER_MS));
    return {
      appId,
      meetingId,
      sessionId,
      base: `/accounts/${o.accountId}${rk}`,
      reference,
      transcripts: got,
      werFirst: wers.length ? wers[0]! : 1,
      werMean: wers.length ? wers.reduce((a, b) => a + b, 0) / wers.length : 1,
      latenciesMs,
      p50Ms: percentile(latenciesMs, 50),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
