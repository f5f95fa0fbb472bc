/**
 * A small YAML subset, enough for connector configuration files: block mappings and block
 * sequences by indentation, `- key: value` items, plain, single- and double-quoted scalars
 * (booleans, null, numbers), flow sequences of scalars (`[a, "b"]`) and `#` comments.
 * Anchors, multi-line strings, flow mappings and multiple documents are refused with the line
 * number. A file starting with `{` is read as JSON.
 */

export class YamlError extends Error {}

interface Line {
  indent: number;
  text: string;
  no: number;
}

function stripComment(raw: string): string {
  let quote: string | undefined;
  for (let i = 0; i < raw.length; i++) {
    const ch = raw[i];
    if (quote) {
      if (ch === quote) quote = undefined;
      else if (ch === '\\' && quote === '"') i++;
      continue;
    }
    if (ch === '"' || ch === "'") quote = ch;
    else if (ch === '#' && (i === 0 || /\s/.test(raw[i - 1]))) return raw.slice(0, i);
  }
  return raw;
}

function scalar(text: string, no: number): unknown {
  const s = text.trim();
  if (s === '' || s === '~' || s === 'null' || s === 'Null' || s === 'NULL') return null;
  if (s.startsWith('"')) {
    if (!s.endsWith('"') || s.length < 2)
      throw new YamlError(`line ${no}: unterminated double-quoted string`);
    try {
      return JSON.parse(s) as unknown;
    } catch {
      throw new YamlError(`line ${no}: invalid double-quoted string`);
    }
  }
  if (s.startsWith("'")) {
    if (!s.endsWith("'") || s.length < 2)
      throw new YamlError(`line ${no}: unterminated single-quoted string`);
    return s.slice(1, -1).replace(/''/g, "'");
  }
  if (s.startsWith('[')) {
    if (!s.endsWith(']')) throw new YamlError(`line ${no}: unterminated flow sequence`);
    const inner = s.slice(1, -1).trim();
    if (inner === '') return [];
    return splitFlow(inner).map((item) => scalar(item, no));
  }
  if (
    s.startsWith('{') ||
    s.startsWith('&') ||
    s.startsWith('*') ||
    s.startsWith('|') ||
    s.startsWith('>') ||
    s.startsWith('!')
  ) {
    throw new YamlError(
      `line ${no}: this YAML form is not supported (flow mappings, anchors, block scalars, tags)`,
    );
  }
  if (/^(true|True|TRUE|yes|Yes|on|On)$/.test(s)) return true;
  if (/^(false|False|FALSE|no|No|off|Off)$/.test(s)) return false;
  if (/^[-+]?\d+$/.test(s)) return Number(s);
  if (/^[-+]?(\d+\.\d*|\.\d+)([eE][-+]?\d+)?$/.test(s)) return Number(s);
  return s;
}

function splitFlow(inner: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quote: string | undefined;
  for (const ch of inner) {
    if (quote) {
      if (ch === quote) quote = undefined;
      cur += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      cur += ch;
    } else if (ch === ',') {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  out.push(cur);
  return out.map((s) => s.trim());
}

/** Splits `key: value` (value may be empty); undefined if the line is not a mapping entry. */
function keyValue(text: string): { key: string; rest: string } | undefined {
  const m = /^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^'"][^:]*?)\s*:(?:\s+(.*)|$)/.exec(text);
  if (!m) return undefined;
  const rawKey = m[1];
  const key =
    rawKey.startsWith('"') || rawKey.startsWith("'") ? String(scalar(rawKey, 0)) : rawKey.trim();
  return { key, rest: m[2] ?? '' };
}

export function parseYaml(source: string): unknown {
  if (source.trimStart().startsWith('{')) return JSON.parse(source) as unknown;
  const lines: Line[] = [];
  source.split(/\r?\n/).forEach((raw, i) => {
    if (raw.includes('\t') && /^\s*\t/.test(raw))
      throw new YamlError(`line ${i + 1}: tabs cannot indent YAML`);
    const text = stripComment(raw).replace(/\s+$/, '');
    if (text.trim() === '' || text.trim() === '---') return;
    if (text.trim() === '...') return;
    const indent = text.length - text.trimStart().length;
    lines.push({ indent, text: text.trimStart(), no: i + 1 });
  });
  let pos = 0;

  function block(indent: number): unknown {
    const first = lines[pos];
    if (first.text.startsWith('- ') || first.text === '-') return sequence(indent);
    return mapping(indent);
  }

  function sequence(indent: number): unknown[] {
    const out: unknown[] = [];
    while (
      pos < lines.length &&
      lines[pos].indent === indent &&
      (lines[pos].text.startsWith('- ') || lines[pos].text === '-')
    ) {
      const line = lines[pos];
      const after = line.text === '-' ? '' : line.text.slice(2);
      const innerIndent = indent + 2 + (after.length - after.trimStart().length);
      const content = after.trim();
      if (content === '') {
        pos++;
        out.push(
          pos < lines.length && lines[pos].indent > indent ? block(lines[pos].indent) : null,
        );
        continue;
      }
      const kv = keyValue(content);
      if (kv && !content.startsWith('"') && !content.startsWith("'") && !content.startsWith('[')) {
        // `- key: value` starts a mapping whose further keys sit at the column after "- ".
        lines[pos] = { indent: innerIndent, text: content, no: line.no };
        out.push(mapping(innerIndent));
      } else {
        out.push(scalar(content, line.no));
        pos++;
      }
    }
    if (pos < lines.length && lines[pos].indent > indent) {
      throw new YamlError(`line ${lines[pos].no}: unexpected indentation`);
    }
    return out;
  }

  function mapping(indent: number): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    while (pos < lines.length && lines[pos].indent === indent) {
      const line = lines[pos];
      if (line.text.startsWith('- '))
        throw new YamlError(`line ${line.no}: a sequence item where a key was expected`);
      const kv = keyValue(line.text);
      if (!kv) throw new YamlError(`line ${line.no}: expected "key: value"`);
      pos++;
      if (kv.rest.trim() !== '') {
        out[kv.key] = scalar(kv.rest, line.no);
        continue;
      }
      const next = lines[pos];
      if (next && next.indent > indent) out[kv.key] = block(next.indent);
      // A sequence may sit at the same indentation as its key.
      else if (next && next.indent === indent && (next.text.startsWith('- ') || next.text === '-'))
        out[kv.key] = sequence(indent);
      else out[kv.key] = null;
    }
    if (pos < lines.length && lines[pos].indent > indent) {
      throw new YamlError(`line ${lines[pos].no}: unexpected indentation`);
    }
    return out;
  }

  if (lines.length === 0) return {};
  const root = block(lines[0].indent);
  if (pos < lines.length) throw new YamlError(`line ${lines[pos].no}: unexpected content`);
  return root;
}
