/**
 * BOLA (broken object-level authorisation) detection, in memory per process:
 * - enumeration: per operation, the distinct object ids (path variable values) each session has
 *   requested; once the operation has been seen from at least `min_sessions` sessions (the
 *   platform's 10,000 unless the schema's BOLA setting says otherwise), a session whose distinct ids
 *   exceed max(10, 5 × the median session's) is flagged;
 * - pollution: a path parameter of the operation also supplied in the query string
 *   (`/orders/12345?orderId=67890`).
 * Memory is bounded: at most 10,000 sessions per operation and 1,000 ids per session are tracked.
 */
const MAX_SESSIONS = 10_000;
const MAX_IDS = 1_000;

interface OpState {
  sessions: Map<string, Set<string>>;
  median: number;
  sinceBaseline: number;
}

export class BolaTracker {
  private readonly ops = new Map<string, OpState>();

  /** Records a request and says whether its session enumerates object ids. */
  record(opKey: string, session: string, objectId: string, minSessions: number): boolean {
    let op = this.ops.get(opKey);
    if (!op) this.ops.set(opKey, (op = { sessions: new Map(), median: 0, sinceBaseline: 0 }));
    let ids = op.sessions.get(session);
    if (!ids) {
      if (op.sessions.size >= MAX_SESSIONS) return false;
      op.sessions.set(session, (ids = new Set()));
    }
    if (ids.size < MAX_IDS) ids.add(objectId);
    // The baseline is recomputed every 50 requests (and while it is still small), not per request.
    if (++op.sinceBaseline >= 50 || op.sessions.size <= 50) {
      op.sinceBaseline = 0;
      const counts = [...op.sessions.values()].map((s) => s.size).sort((a, b) => a - b);
      op.median = counts[Math.floor((counts.length - 1) / 2)];
    }
    if (op.sessions.size < minSessions) return false;
    return ids.size > Math.max(10, 5 * op.median);
  }
}

/** Whether a path parameter is supplied again in the query string. */
export function pollutes(paramNames: string[], query: URLSearchParams): boolean {
  return paramNames.some((name) => query.has(name));
}
