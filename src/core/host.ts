/** The host name a request names in its Host header, the form every host match compares. */

/** Lower case, without the port, the brackets of an IPv6 literal, or a trailing dot. */
export function hostnameOf(header: string | undefined): string {
  const h = (header ?? '').trim().toLowerCase();
  const name = h.startsWith('[') ? h.slice(1, h.indexOf(']')) : h.replace(/:\d*$/, '');
  return name.replace(/\.$/, '');
}
