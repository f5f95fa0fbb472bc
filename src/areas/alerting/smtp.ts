/**
 * A minimal SMTP client for alert emails: plain SMTP to the configured relay (`smtp://host:port`),
 * EHLO, MAIL FROM, RCPT TO, DATA, QUIT, each reply checked. No authentication or STARTTLS: the
 * relay is expected to be a local MTA (postfix, a mail catcher) that forwards with its own policy.
 */
import net from 'node:net';

export async function sendMail(server: string, from: string, to: string, subject: string, text: string, timeoutMs = 10_000): Promise<void> {
  const url = new URL(server);
  if (url.protocol !== 'smtp:') throw new Error(`unsupported SMTP URL ${server}; use smtp://host:port`);
  const socket = net.connect({ host: url.hostname, port: Number(url.port || 25) });
  socket.setTimeout(timeoutMs, () => socket.destroy(new Error('SMTP server timed out')));
  let buffer = '';
  const waiters: ((line: string) => void)[] = [];
  const lines: string[] = [];
  let failure: Error | undefined;
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffer += chunk;
    let i: number;
    while ((i = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, i).replace(/\r$/, '');
      buffer = buffer.slice(i + 1);
      // Multi-line replies (`250-…`) end with the line whose fourth character is a space.
      if (/^\d{3}-/.test(line)) continue;
      const w = waiters.shift();
      if (w) w(line);
      else lines.push(line);
    }
  });
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('error', (err) => {
    failure = err;
    for (const w of waiters.splice(0)) w('');
  });
  const reply = (expect: number): Promise<void> =>
    new Promise((resolve, reject) => {
      const check = (line: string) => {
        if (failure) return reject(failure);
        if (!line.startsWith(String(expect))) return reject(new Error(`SMTP server answered: ${line || 'nothing'}`));
        resolve();
      };
      const ready = lines.shift();
      if (ready !== undefined) check(ready);
      else waiters.push(check);
    });
  const send = (line: string) => socket.write(`${line}\r\n`);
  try {
    await reply(220);
    send('EHLO outpost');
    await reply(250);
    send(`MAIL FROM:<${from}>`);
    await reply(250);
    send(`RCPT TO:<${to}>`);
    await reply(250);
    send('DATA');
    await reply(354);
    const body = text.replace(/\r?\n/g, '\r\n').replace(/^\./gm, '..');
    socket.write(
      `From: ${from}\r\nTo: ${to}\r\nSubject: ${subject.replace(/[\r\n]/g, ' ')}\r\nDate: ${new Date().toUTCString()}\r\n` +
        `Content-Type: text/plain; charset=utf-8\r\n\r\n${body}\r\n.\r\n`,
    );
    await reply(250);
    send('QUIT');
    await reply(221).catch(() => undefined);
  } finally {
    socket.end();
    await Promise.race([closed, new Promise((r) => setTimeout(r, 500))]);
    socket.destroy();
  }
}
