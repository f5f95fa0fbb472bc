/** Zone name rules: a registrable domain name, lowercase, without the trailing dot. */

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** Returns the normalised name, or a reason it is not a valid zone name. */
export function normaliseZoneName(input: string): { name: string } | { error: string } {
  const name = input.trim().toLowerCase().replace(/\.$/, '');
  if (name.length === 0) return { error: 'the name is empty' };
  if (name.length > 253) return { error: 'the name is longer than 253 characters' };
  const labels = name.split('.');
  if (labels.length < 2) return { error: 'a zone needs at least two labels, such as example.com' };
  for (const label of labels) {
    if (!LABEL.test(label)) return { error: `label "${label}" must be 1–63 letters, digits or hyphens, not starting or ending with a hyphen` };
  }
  const tld = labels[labels.length - 1];
  if (!/^[a-z]{2,63}$/.test(tld) && !tld.startsWith('xn--')) {
    return { error: `top-level label "${tld}" must be alphabetic` };
  }
  return { name };
}
