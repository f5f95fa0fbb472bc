/**
 * Live transcripts, session exports, summaries and daywise analytics.
 *
 * Media (SQLite pass only): a participant in Debian Chromium whose fake microphone plays an
 * espeak-ng recording of a known sentence joins with a preset that enables transcription; the page's
 * `meeting.ai.transcripts` fills with the recognised sentence (word error rate printed and bounded),
 * a second peer on the signalling socket receives the same entries, and the session transcript
 * downloads parse as CSV, JSON, SRT and VTT.
 *
 * API (both passes): chat export CSV from real chat messages, extractive summary, daywise analytics
 * from the stored sessions and peers, and bad input → 400/403/404.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { runTranscripts, type TranscriptRun } from '../../../bench/lib/transcript-latency.ts';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { addParticipant, connect, createApp, createMeeting, parseCsv, until, type Client, type Fixture } from './support.ts';

/** RFC 4180 reader: quoted fields, doubled quotes, CRLF rows. */

const HAVE_ASR = existsSync('/usr/bin/pocketsphinx_batch') && existsSync('/usr/bin/espeak-ng') && existsSync('/usr/bin/chromium');

describe.skipIf(sqlitePassOnly('live transcripts drive media and a browser, not storage'))('live transcripts in Chromium', () => {
  let t: TestServer;
  let run: TranscriptRun | undefined;

  beforeAll(async () => {
    t = await startTestServer({ meetingsKeepAliveCap: 0 });
  }, 30_000);
  afterAll(async () => {
    await run?.close();
    await t?.stop();
  });

  it('a spoken sentence reaches every client as ai.transcripts and downloads as CSV, JSON, SRT and VTT', async () => {
    if (!HAVE_ASR) {
      console.log('skipped: pocketsphinx, espeak-ng or chromium is missing (scripts/test.sh installs them)');
      return;
    }
    // A listener without transcription joins first: it must receive the speaker's entries too.
    let listener: Client | undefined;
    run = await runTranscripts({
      origin: t.url,
      token: t.token,
      accountId: t.accountId,
      utterances: 1,
      timeoutMs: 60_000,
      log: (m) => console.log(m),
      beforeSpeech: async (m) => {
        const p = await addParticipant(t, { appId: m.appId, base: m.base }, m.meetingId, 'listener', 'group_call_host', 'Lee');
        listener = await connect(t, p.token);
        await listener.request({ t: 'join' });
      },
    });
    expect(run.transcripts.length).toBeGreaterThanOrEqual(1);
    const first = run.transcripts[0]!;
    console.log(`reference:  "${run.reference}"\nhypothesis: "${first.transcript}"\nWER ${(run.werFirst * 100).toFixed(0)}%  latency ${run.latenciesMs.map((l) => l.toFixed(0)).join(', ')} ms`);
    // The stock en-us model on synthetic speech after Chromium's audio processing and Opus: offline
    // the same recording scores about 20 % WER, through the meeting 47-73 % measured. The bound catches a
    // broken pipeline (silence, garbage, another language model), not the model's quality.
    expect(run.werFirst).toBeLessThanOrEqual(0.85);
    const words = new Set(first.transcript.toLowerCase().split(/\s+/));
    expect(['please', 'open', 'close', 'because', 'today', 'window', 'weather'].filter((w) => words.has(w)).length).toBeGreaterThanOrEqual(2);
    expect(first.name).toBe('Sam Speaker');
    expect((first as unknown as { inList: boolean }).inList).toBe(true);
    expect(Date.parse(first.endTime)).toBeGreaterThan(Date.parse(first.startTime));

    const heard = await listener!.next((e) => e.t === 'transcript', 5_000);
    expect(heard.transcript).toMatchObject({ id: first.id, peerId: first.peerId, transcript: first.transcript, customParticipantId: 'speaker-1' });
    listener!.ws.close();

    const csvRes = await t.call('GET', `${run.base}/sessions/${run.sessionId}/transcript`, undefined, { accept: 'text/csv' });
    expect(csvRes.status).toBe(200);
    expect(csvRes.headers.get('content-type')).toContain('text/csv');
    const rows = parseCsv(csvRes.text);
    expect(rows[0]).toEqual(['id', 'session_id', 'participant_id', 'user_id', 'custom_participant_id', 'name', 'start_time', 'end_time', 'start_offset', 'end_offset', 'transcript']);
    expect(rows.length).toBeGreaterThanOrEqual(2);
    expect(rows[1]![10]).toBe(first.transcript);
    expect(rows[1]![4]).toBe('speaker-1');

    for (const format of ['JSON', 'SRT', 'VTT']) {
      const link = await t.call('GET', `${run.base}/sessions/${run.sessionId}/transcript?format=${format.toLowerCase()}`);
      expect(link.status).toBe(200);
      expect(link.body.data.sessionId).toBe(run.sessionId);
      const file = await fetch(link.body.data.transcript_download_url);
      expect(file.status).toBe(200);
      const text = await file.text();
      if (format === 'JSON') expect(JSON.parse(text).transcript[0].transcript).toBe(first.transcript);
      if (format === 'SRT') expect(text).toMatch(/^1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\nSam Speaker: /);
      if (format === 'VTT') expect(text).toMatch(/^WEBVTT\n\n\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}\n<v Sam Speaker>/);
    }

    const made = await t.call('POST', `${run.base}/sessions/${run.sessionId}/summary`);
    expect(made.status).toBe(200);
    expect(made.body.data).toMatchObject({ session_id: run.sessionId, status: 'COMPLETED', method: 'extractive' });
    const md = await t.call('GET', `${run.base}/sessions/${run.sessionId}/summary`, undefined, { accept: 'text/markdown' });
    expect(md.text).toContain('Sam Speaker: ');
  }, 90_000);
});

describe('session exports, summaries and analytics', () => {
  let t: TestServer;
  let f: Fixture;

  beforeAll(async () => {
    t = await startTestServer({ meetingsKeepAliveCap: 0 });
    f = await createApp(t, 'exports');
  }, 30_000);
  afterAll(async () => t?.stop());

  it('exports a session chat as CSV, summarises it, and counts it per day', async () => {
    const meetingId = await createMeeting(t, f, { title: 'Planning' });
    const a = await addParticipant(t, f, meetingId, 'ann', 'group_call_host', 'Ann');
    const b = await addParticipant(t, f, meetingId, 'bob', 'group_call_host', 'Bob, "the builder"');
    const ca = await connect(t, a.token);
    const joined = await ca.request({ t: 'join' });
    const sessionId = joined.data.meta.sessionId as string;
    const cb = await connect(t, b.token);
    await cb.request({ t: 'join' });
    await ca.request({ t: 'chat', kind: 'text', text: 'The release ships on Friday, after the release checklist is done.' });
    await cb.request({ t: 'chat', kind: 'text', text: 'I will finish the checklist, line one\nline two, and "quoted" text' });
    await cb.request({ t: 'chat', kind: 'text', text: '=1+1' });

    const chat = await until(async () => {
      const r = await t.call('GET', `${f.base}/sessions/${sessionId}/chat`, undefined, { accept: 'text/csv' });
      return parseCsv(r.text).length === 4 ? r : undefined;
    }, 5000, 'three stored chat messages');
    const rows = parseCsv(chat.text);
    expect(rows[0]).toEqual(['id', 'participantId', 'sessionId', 'meetingId', 'displayName', 'pinned', 'isEdited', 'payloadType', 'payload', 'createdAt']);
    expect(rows[1]![4]).toBe('Ann');
    expect(rows[2]![4]).toBe('Bob, "the builder"');
    expect(rows[2]![8]).toBe('I will finish the checklist, line one\nline two, and "quoted" text');
    expect(rows[3]![8]).toBe("'=1+1");
    expect(rows.slice(1).map((r) => [r[2], r[3], r[7]])).toEqual(Array(3).fill([sessionId, meetingId, 'TEXT_MESSAGE']));

    const link = await t.call('GET', `${f.base}/sessions/${sessionId}/chat`);
    expect(link.status).toBe(200);
    expect(Date.parse(link.body.data.chat_download_url_expiry)).toBeGreaterThan(Date.now());
    const dl = await fetch(link.body.data.chat_download_url);
    expect(dl.status).toBe(200);
    expect(await dl.text()).toBe(chat.text);
    const forged = await fetch(link.body.data.chat_download_url.replace(/sig=[^&]+/, 'sig=forged'));
    expect(forged.status).toBe(403);
    const otherFormat = await fetch(link.body.data.chat_download_url.replace('/chat?', '/transcript?'));
    expect(otherFormat.status).toBe(403);

    expect((await t.call('GET', `${f.base}/sessions/${sessionId}/summary`)).status).toBe(404);
    const made = await t.call('POST', `${f.base}/sessions/${sessionId}/summary`);
    expect(made.status).toBe(200);
    expect(made.body.data).toEqual({ session_id: sessionId, status: 'COMPLETED', method: 'extractive' });
    const got = await t.call('GET', `${f.base}/sessions/${sessionId}/summary`);
    expect(got.body.data.sessionId).toBe(sessionId);
    const md = await (await fetch(got.body.data.summaryDownloadUrl)).text();
    expect(md).toContain('# Planning');
    expect(md).toContain('Participants: Ann, Bob, "the builder"');
    expect(md).toContain('Ann: The release ships on Friday');

    // Minutes are reported to two decimals: stay long enough (2 × 1 s) to show above zero.
    await new Promise((r) => setTimeout(r, 1000));
    ca.ws.close();
    cb.ws.close();
    await until(async () => (await t.call('GET', `${f.base}/sessions/${sessionId}`)).body.data?.status === 'ENDED', 10_000, 'the session to end');
    const today = new Date().toISOString().slice(0, 10);
    const day = await t.call('GET', `${f.base}/analytics/daywise?start_date=${today}&end_date=${today}`);
    expect(day.status).toBe(200);
    const s = day.body.data.session_stats;
    expect(s.sessions_count).toBe(1);
    expect(s.day_stats).toHaveLength(1);
    expect(s.day_stats[0]).toMatchObject({ day: today, total_sessions: 1, total_participants: 2 });
    expect(s.participant_minutes_consumed).toBeGreaterThan(0);
    expect(day.body.data.recording_stats).toMatchObject({ recording_count: 0, recording_minutes_consumed: 0 });
    const week = await t.call('GET', `${f.base}/analytics/daywise?start_date=2020-01-01&end_date=2020-01-07`);
    expect(week.body.data.session_stats.day_stats.map((d: { day: string }) => d.day)).toEqual(['2020-01-01', '2020-01-02', '2020-01-03', '2020-01-04', '2020-01-05', '2020-01-06', '2020-01-07']);
    expect(week.body.data.session_stats.sessions_count).toBe(0);
  }, 30_000);

  it('answers bad input with 400, unknown sessions with 404', async () => {
    const bad = async (path: string, status: number, message: RegExp) => {
      const r = await t.call('GET', `${f.base}${path}`);
      expect(r.status, path).toBe(status);
      expect(r.body.success).toBe(false);
      expect(r.body.error.message).toMatch(message);
    };
    await bad('/analytics/daywise?start_date=2024-02-10&end_date=2024-02-01', 400, /end_date is before start_date/);
    await bad('/analytics/daywise?start_date=2024-02-30&end_date=2024-03-01', 400, /start_date must be a date/);
    await bad('/analytics/daywise?start_date=2024-02-01&end_date=tomorrow', 400, /end_date must be a date/);
    await bad('/analytics/daywise?start_date=2024-02-01', 400, /end_date/);
    await bad('/analytics/daywise?start_date=2020-01-01&end_date=2024-01-01', 400, /at most 366 days/);
    await bad('/sessions/00000000-0000-0000-0000-000000000000/transcript', 404, /Session .* not found/);
    await bad('/sessions/00000000-0000-0000-0000-000000000000/chat', 404, /Session .* not found/);
    await bad('/sessions/00000000-0000-0000-0000-000000000000/summary', 404, /Session .* not found/);
    const post = await t.call('POST', `${f.base}/sessions/00000000-0000-0000-0000-000000000000/summary`);
    expect(post.status).toBe(404);
    const meetingId = await createMeeting(t, f);
    const p = await addParticipant(t, f, meetingId, 'solo', 'group_call_host');
    const c = await connect(t, p.token);
    const sessionId = (await c.request({ t: 'join' })).data.meta.sessionId;
    await bad(`/sessions/${sessionId}/transcript?format=DOCX`, 400, /format/);
    const empty = await t.call('GET', `${f.base}/sessions/${sessionId}/transcript`, undefined, { accept: 'text/csv' });
    expect(parseCsv(empty.text)).toHaveLength(1);
    c.ws.close();
    const expired = await fetch(`${t.url}/realtime/kit/downloads/${f.appId}/${sessionId}/chat?format=CSV&expires=1&sig=x`);
    expect(expired.status).toBe(403);
  }, 30_000);
});
