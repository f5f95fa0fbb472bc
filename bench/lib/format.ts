/** Number formatting and plain-text tables for benchmark reports. */

export function int(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–';
}

/** Milliseconds with about three significant digits. */
export function ms(n: number): string {
  if (!Number.isFinite(n)) return '–';
  if (n < 10) return n.toFixed(2);
  if (n < 100) return n.toFixed(1);
  return n.toFixed(0);
}

export function ratio(a: number, b: number): string {
  if (!(b > 0) || !Number.isFinite(a)) return '–';
  return `${(a / b).toFixed(2)}x`;
}

/** Columns are right-aligned unless listed in `left`. */
export function table(headers: string[], rows: string[][], left: number[] = [0]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const cell = (s: string, i: number) =>
    left.includes(i) ? s.padEnd(widths[i]) : s.padStart(widths[i]);
  const line = (r: string[]) =>
    r
      .map((s, i) => cell(s ?? '', i))
      .join('  ')
      .trimEnd();
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  return [line(headers), rule, ...rows.map(line)].join('\n');
}
