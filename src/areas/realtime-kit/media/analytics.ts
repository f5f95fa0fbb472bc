/**
 * Daywise analytics (`GET /analytics/daywise?start_date&end_date`, dates `YYYY-MM-DD`, UTC days,
 * both inclusive) computed from the stored sessions (count and minutes by the day they started),
 * their peers (participant minutes) and recordings (count and minutes by the day they started).
 * Recordings are read through `RecordingSource`, which the recordings module provides; without it
 * recording figures are zero.
 */
import type { Executor } from '../../../core/storage/db.ts';
import { sessionPeers, sessions } from '../store.ts';

export const MAX_DAYS = 366;

export interface RecordingFigure {
  /** ISO time the recording started (or was invoked). */
  started_at: string;
  /** Seconds recorded. */
  duration_secs: number;
}
export type RecordingSource = (db: Executor, appId: string) => Promise<RecordingFigure[]>;

export function parseDay(s: string): number | undefined {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(s)) return undefined;
  const ms = Date.parse(`${s}T00:00:00Z`);
  if (Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== s) return undefined;
  return ms;
}

const round = (n: number) => Math.round(n * 100) / 100;

export async function daywise(db: Executor, appId: string, startMs: number, endMs: number, now: Date, recordings?: RecordingSource): Promise<Record<string, unknown>> {
  const days: string[] = [];
  for (let t = startMs; t <= endMs; t += 86_400_000) days.push(new Date(t).toISOString().slice(0, 10));
  const sess = new Map(days.map((d) => [d, { total_sessions: 0, total_session_minutes: 0, total_participant_minutes: 0, total_participants: 0 }]));
  const recs = new Map(days.map((d) => [d, { total_recordings: 0, total_recording_minutes: 0 }]));
  for (const doc of await sessions.all(db, appId)) {
    const s = doc.body;
    const day = sess.get(s.started_at.slice(0, 10));
    if (!day) continue;
    day.total_sessions++;
    // A live session counts the minutes it has run so far.
    day.total_session_minutes += s.ended_at ? s.minutes_consumed : (now.getTime() - Date.parse(s.started_at)) / 60_000;
    for (const p of await sessionPeers.all(db, s.id)) {
      day.total_participants++;
      day.total_participant_minutes += p.body.duration ?? (p.body.left_at ? 0 : (now.getTime() - Date.parse(p.body.joined_at)) / 60_000);
    }
  }
  for (const r of recordings ? await recordings(db, appId) : []) {
    const day = recs.get(r.started_at.slice(0, 10));
    if (!day) continue;
    day.total_recordings++;
    day.total_recording_minutes += r.duration_secs / 60;
  }
  const sessDays = days.map((d) => {
    const v = sess.get(d)!;
    return { day: d, total_sessions: v.total_sessions, total_session_minutes: round(v.total_session_minutes), total_participants: v.total_participants, total_participant_minutes: round(v.total_participant_minutes) };
  });
  const recDays = days.map((d) => ({ day: d, total_recordings: recs.get(d)!.total_recordings, total_recording_minutes: round(recs.get(d)!.total_recording_minutes) }));
  return {
    session_stats: {
      day_stats: sessDays,
      sessions_count: sessDays.reduce((n, d) => n + d.total_sessions, 0),
      sessions_minutes_consumed: round(sessDays.reduce((n, d) => n + d.total_session_minutes, 0)),
      participant_minutes_consumed: round(sessDays.reduce((n, d) => n + d.total_participant_minutes, 0)),
    },
    recording_stats: {
      day_stats: recDays,
      recording_count: recDays.reduce((n, d) => n + d.total_recordings, 0),
      recording_minutes_consumed: round(recDays.reduce((n, d) => n + d.total_recording_minutes, 0)),
    },
  };
}
