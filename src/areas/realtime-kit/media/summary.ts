/**
 * Session summaries (`POST/GET /sessions/{id}/summary`). Without configuration the summary is
 * EXTRACTIVE: no language model is involved. The transcript utterances and text chat messages are
 * split into sentences, each word (lower-cased, stop words dropped) is weighted by how often it
 * occurs in the whole session, a sentence scores the mean weight of its words, and the best
 * sentences are kept in the order they were said. The result is Markdown: who took part, how long,
 * the key sentences with their speakers.
 *
 * With `meetings-summary-url` set (an OpenAI-compatible `…/v1` base URL; model from
 * `meetings-summary-model`, bearer key from `OUTPOST_MEETINGS_SUMMARY_KEY`), the same material is
 * sent to `POST {url}/chat/completions` instead and the model's answer is the summary. When that
 * call fails the extractive summary is stored and the failure is recorded in `error`.
 */
import type { Executor } from '../../../core/storage/db.ts';
import { defineCollection } from '../../../core/storage/collection.ts';
import type { TranscriptEntry } from './transcripts.ts';
import type { StoredChat } from './exports.ts';

export interface StoredSummary {
  session_id: string;
  status: 'COMPLETED' | 'FAILED';
  method: 'extractive' | 'model';
  summary: string;
  error?: string;
  created_at: string;
}

export const summaries = defineCollection<StoredSummary>({ kind: 'rtk_summary' });

export interface SummaryModel {
  url: string;
  model: string;
  key?: string;
  timeoutMs?: number;
}

const STOP = new Set(
  'a an and are as at be but by for from has have he her his i if in into is it its me my no not of on or our she so than that the their them then there these they this to too was we were what when where which who will with you your yes okay ok um uh just like do does did can could would should all any some also very really'.split(' '),
);
const MAX_SENTENCES = 8;
const MAX_MATERIAL_CHARS = 60_000;

interface Line {
  who: string;
  at: string;
  text: string;
}

function words(s: string): string[] {
  return (s.toLowerCase().match(/[a-z0-9']+/g) ?? []).filter((w) => w.length > 1 && !STOP.has(w));
}

function lines(transcript: TranscriptEntry[], chat: StoredChat[]): Line[] {
  const out: Line[] = [];
  for (const t of transcript) out.push({ who: t.name, at: t.start_time, text: t.text });
  for (const m of chat) if (m.type === 'text' && m.message) out.push({ who: m.display_name, at: m.time, text: m.message });
  return out.sort((a, b) => a.at.localeCompare(b.at));
}

export function extractiveSummary(info: { title: string; startedAt: string; endedAt?: string; participants: string[] }, transcript: TranscriptEntry[], chat: StoredChat[]): string {
  const all = lines(transcript, chat);
  const sentences: (Line & { i: number; score: number })[] = [];
  for (const l of all) for (const s of l.text.split(/(?<=[.!?])\s+/)) if (s.trim()) sentences.push({ ...l, text: s.trim(), i: sentences.length, score: 0 });
  const freq = new Map<string, number>();
  for (const s of sentences) for (const w of words(s.text)) freq.set(w, (freq.get(w) ?? 0) + 1);
  const top = Math.max(1, ...freq.values());
  for (const s of sentences) {
    const ws = words(s.text);
    // Very short sentences carry little; the mean favours dense ones, the log favours longer ones.
    s.score = ws.length === 0 ? 0 : (ws.reduce((n, w) => n + (freq.get(w) ?? 0) / top, 0) / ws.length) * Math.log2(1 + ws.length);
  }
  const keep = Math.min(MAX_SENTENCES, Math.max(3, Math.ceil(sentences.length * 0.3)));
  const chosen = [...sentences].sort((a, b) => b.score - a.score || a.i - b.i).slice(0, keep).sort((a, b) => a.i - b.i);
  const minutes = info.endedAt ? Math.round((Date.parse(info.endedAt) - Date.parse(info.startedAt)) / 600) / 100 : undefined;
  const keywords = [...freq.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 8).map(([w]) => w);
  const out = [`# ${info.title || 'Meeting'} — summary`, '', `Started ${info.startedAt}${minutes !== undefined ? `, lasted ${minutes} minutes` : ' (still live)'}.`, ''];
  out.push(`Participants: ${info.participants.length ? info.participants.join(', ') : 'none recorded'}.`, '');
  if (keywords.length) out.push(`Key terms: ${keywords.join(', ')}.`, '');
  if (chosen.length && chosen[0]!.score > 0) {
    out.push('Key points (extractive: sentences quoted from the transcript and chat):', '');
    for (const s of chosen) out.push(`- ${s.who}: ${s.text}`);
  } else out.push('Nothing was said or written in this session.');
  return out.join('\n') + '\n';
}

export async function modelSummary(m: SummaryModel, info: { title: string; participants: string[] }, transcript: TranscriptEntry[], chat: StoredChat[]): Promise<string> {
  const material = lines(transcript, chat)
    .map((l) => `[${l.at}] ${l.who}: ${l.text}`)
    .join('\n')
    .slice(-MAX_MATERIAL_CHARS);
  const res = await fetch(`${m.url.replace(/\/+$/, '')}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(m.key ? { authorization: `Bearer ${m.key}` } : {}) },
    body: JSON.stringify({
      model: m.model,
      messages: [
        { role: 'system', content: 'Summarise this meeting in Markdown: a short overview, key points, decisions and action items. Use only what is in the material.' },
        { role: 'user', content: `Meeting: ${info.title}\nParticipants: ${info.participants.join(', ')}\n\n${material || '(nothing was said or written)'}` },
      ],
    }),
    signal: AbortSignal.timeout(m.timeoutMs ?? 60_000),
  });
  if (!res.ok) throw new Error(`the summary endpoint answered ${res.status}`);
  const body = (await res.json()) as { choices?: { message?: { content?: unknown } }[] };
  const text = body.choices?.[0]?.message?.content;
  if (typeof text !== 'string' || !text.trim()) throw new Error('the summary endpoint returned no message content');
  return text.trim() + '\n';
}

export async function saveSummary(db: Executor, appId: string, s: StoredSummary, at: Date): Promise<void> {
  const doc = await summaries.get(db, appId, s.session_id);
  if (doc) await summaries.update(db, doc, s, at);
  else await summaries.insert(db, appId, s.session_id, s, at);
}
