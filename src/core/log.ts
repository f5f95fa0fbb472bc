/** Structured JSON logs (pino). One logger per process; areas take a child with their name. */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return pino(
    { level, base: { app: 'outpost' }, timestamp: pino.stdTimeFunctions.isoTime },
    destination ?? pino.destination({ dest: 1, sync: false }),
  );
}
