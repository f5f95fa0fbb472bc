/**
 * The platform's edge error pages: an HTML body naming the error code and the ray id, with the
 * status the platform uses for each failure.
 */
import type { ServerResponse } from 'node:http';

export interface EdgeErrorSpec {
  status: number;
  title: string;
  explanation: string;
}

export const EDGE_ERRORS = {
  1001: {
    status: 530,
    title: 'DNS resolution error',
    explanation:
      'The host name is not served by this edge: no active zone has a proxied record for it.',
  },
  1016: {
    status: 530,
    title: 'Origin DNS error',
    explanation: 'The origin host name could not be resolved.',
  },
  1020: {
    status: 403,
    title: 'Access denied',
    explanation: 'A firewall rule of this site blocked the request.',
  },
  1033: {
    status: 530,
    title: 'Tunnel error',
    explanation: 'The tunnel that serves this host name has no live connection.',
  },
  502: {
    status: 502,
    title: 'Bad gateway',
    explanation: 'The origin returned an invalid response or closed the connection.',
  },
  521: {
    status: 521,
    title: 'Web server is down',
    explanation: 'The origin refused the connection.',
  },
  522: {
    status: 522,
    title: 'Connection timed out',
    explanation: 'The origin did not accept the connection in time.',
  },
  524: {
    status: 524,
    title: 'A timeout occurred',
    explanation: 'The origin accepted the connection but did not answer in time.',
  },
} as const satisfies Record<number, EdgeErrorSpec>;

export type EdgeErrorCode = keyof typeof EDGE_ERRORS;

/** Text made safe to place in HTML (error pages of the edge and of scripts). */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function errorPage(
  code: EdgeErrorCode,
  rayId: string,
  host: string,
): { status: number; body: string } {
  const spec = EDGE_ERRORS[code];
  const label = code >= 1000 ? `Error ${code}` : `Error code ${code}`;
  const body = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>${label}: ${escapeHtml(spec.title)} | ${escapeHtml(host)}</title></head>
<body>
<h1>${label}</h1>
<h2>${escapeHtml(spec.title)}</h2>
<p>${escapeHtml(spec.explanation)}</p>
<p>Ray ID: <code>${rayId}</code> &bull; Host: ${escapeHtml(host)} &bull; Served by Outpost</p>
</body></html>
`;
  return { status: spec.status, body };
}

export function sendErrorPage(
  res: ServerResponse,
  code: EdgeErrorCode,
  rayId: string,
  host: string,
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const page = errorPage(code, rayId, host);
  res.writeHead(page.status, EDGE_ERRORS[code].title, {
    'content-type': 'text/html; charset=utf-8',
    'content-length': Buffer.byteLength(page.body),
    'cf-ray': `${rayId}-OUT`,
    'cache-control': 'private, max-age=0, no-store, no-cache, must-revalidate',
  });
  res.end(page.body);
}
