/** CSV (RFC 4180) for the session exports: every field quoted when it needs to be, CRLF rows. */
export function csvField(v: unknown): string {
  const s = v === undefined || v === null ? '' : String(v);
  // A leading formula character is neutralised so a spreadsheet does not evaluate user text.
  const safe = /^[=+\-@\t\r]/.test(s) && typeof v === 'string' ? `'${s}` : s;
  return /[",\r\n']/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

export function csv(header: string[], rows: unknown[][]): string {
  return [header, ...rows].map((r) => r.map(csvField).join(',')).join('\r\n') + '\r\n';
}
