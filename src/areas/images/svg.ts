/**
 * SVG uploads are sanitised before they are stored: script and foreignObject elements, event
 * handler attributes (`on…`), `javascript:`/`data:text/html` links and external references in
 * `href`/`xlink:href` are removed, and DOCTYPE/entity declarations (which could expand or reach
 * files) are dropped. What remains is checked by parsing it as an image.
 */
export function sanitizeSvg(text: string): string {
  let s = text;
  s = s.replace(/<!DOCTYPE[^>[]*(\[[\s\S]*?\])?\s*>/gi, '');
  s = s.replace(/<!ENTITY[\s\S]*?>/gi, '');
  for (let i = 0; i < 5; i++) {
    const before = s;
    s = s.replace(/<(script|foreignObject|iframe|embed|object)\b[\s\S]*?<\/\1\s*>/gi, '');
    s = s.replace(/<(script|foreignObject|iframe|embed|object)\b[^>]*\/?>/gi, '');
    if (s === before) break;
  }
  s = s.replace(/\s(on[a-z]+)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)/gi, '');
  s = s.replace(/\s((?:xlink:)?href)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)/gi, (m, _name: string, value: string) => {
    const v = value.replace(/^["']|["']$/g, '').trim();
    return v.startsWith('#') || /^data:image\/(png|jpeg|gif|webp);/i.test(v) ? m : '';
  });
  return s;
}
