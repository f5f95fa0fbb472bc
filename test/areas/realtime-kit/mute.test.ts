/**
 * A host's mute is enforced at the media forwarder, not left to the muted client: two SDK clients
 * in Debian Chromium with a fake microphone; the speaker keeps sending audio RTP (its stats say
 * so) while the listener's inbound audio stops growing after a REST mute; unmuting oneself
 * resumes it without the pause counting as loss; after mute-all without allow_unmute the
 * speaker cannot unmute and nothing reaches the listener. Media and browsers only: SQLite pass.
 */
import { rmSync } from 'node:fs';
import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchMediaChromium } from '../../support/chromium.ts';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { addParticipant, createApp, createMeeting, until, type Fixture } from './support.ts';

const FLAGS = ['--disable-background-timer-throttling', '--disable-renderer-backgrounding', '--disable-backgrounding-occluded-windows'];

describe.skipIf(sqlitePassOnly('the mute test drives media and browsers, not storage'))('a host mute at the forwarder', () => {
  let t: TestServer;
  let f: Fixture;
  let browser: Browser;
  let profile: string;

  beforeAll(async () => {
    t = await startTestServer({ meetingsKeepAliveCap: 0 });
    f = await createApp(t, 'mute');
    ({ browser, profile } = await launchMediaChromium('outpost-rtk-mute-', FLAGS));
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await t?.stop();
  });

  async function join(token: string, audio: boolean): Promise<Page> {
    const page = await browser.newPage();
    page.on('pageerror', (err) => console.log('page error:', (err as Error).message));
    await page.goto(`${t.url}/healthz`);
    // A string: the test runner would rewrite a dynamic import inside a function.
    await page.evaluate(`(async () => {
      const { default: RealtimeKitClient } = await import('/realtime/kit/sdk.js');
      const meeting = await RealtimeKitClient.init({ authToken: ${JSON.stringify(token)}, defaults: { audio: ${audio}, video: false } });
      window.meeting = meeting;
      await meeting.join();
    })()`);
    return page;
  }

  /** The listener's inbound audio from everyone: packets received and lost (WebRTC stats). */
  const inbound = (page: Page) =>
    page.evaluate(async () => {
      const m = (window as any).meeting;
      let received = 0;
      let lost = 0;
      for (const sub of m._media.subs.values())
        (await sub.pc.getStats()).forEach((s: any) => {
          if (s.type === 'inbound-rtp' && s.kind === 'audio') {
            received += s.packetsReceived || 0;
            lost += s.packetsLost || 0;
          }
        });
      return { received, lost };
    });
  /** The speaker's outbound audio packets (WebRTC stats of its publishing connection). */
  const sent = (page: Page) =>
    page.evaluate(async () => {
      let n = 0;
      (await (window as any).meeting._media.pub.getStats()).forEach((s: any) => s.type === 'outbound-rtp' && s.kind === 'audio' && (n += s.packetsSent || 0));
      return n;
    });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /** Over `ms`: packets the speaker sent and the listener received. */
  async function window_(listener: Page, speaker: Page, ms: number): Promise<{ sent: number; received: number }> {
    const [r0, s0] = [await inbound(listener), await sent(speaker)];
    await sleep(ms);
    const [r1, s1] = [await inbound(listener), await sent(speaker)];
    return { sent: s1 - s0, received: r1.received - r0.received };
  }

  it('mute stops forwarding while the speaker sends; unmuting oneself resumes; mute-all without allow_unmute holds', async () => {
    const meetingId = await createMeeting(t, f);
    const listenerP = await addParticipant(t, f, meetingId, 'listener', 'group_call_host');
    const speakerP = await addParticipant(t, f, meetingId, 'speaker', 'group_call_host');
    const listener = await join(listenerP.token, false);
    const speaker = await join(speakerP.token, true);

    // Spec events, each checked to fire after the state it reports has changed.
    await speaker.evaluate(() => {
      const m = (window as any).meeting;
      (window as any).seen = [];
      m.self.on('audioUpdate', (e: any) => (window as any).seen.push(['audioUpdate', e.audioEnabled, m.self.audioEnabled]));
      m.self.on('deviceUpdate', (e: any) => (window as any).seen.push(['deviceUpdate', e.device.kind]));
    });
    await listener.evaluate(() => {
      const m = (window as any).meeting;
      (window as any).seen = [];
      m.chat.on('chatUpdate', (e: any) => (window as any).seen.push(['chatUpdate', e.message.message, m.chat.messages.includes(e.message)]));
      m.participants.joined.on('participantLeft', (p: any) => (window as any).seen.push(['participantLeft', p.userId, m.participants.joined.has(p.id)]));
    });
    await until(async () => (await inbound(listener)).received > 25, 20_000, 'the listener to receive the speaker audio');
    const before = await window_(listener, speaker, 1000);
    expect(before.received).toBeGreaterThan(20);

    const mute = await t.call('POST', `${f.base}/meetings/${meetingId}/active-session/mute`, { participant_ids: [speakerP.id] });
    expect(mute.status).toBe(200);
    await speaker.waitForFunction(() => (window as any).meeting.self.audioEnabled === false, { timeout: 5000 });
    await sleep(300); // packets already in flight
    const muted = await window_(listener, speaker, 1500);
    // The muted client still sends (a disabled track sends silence): the forwarder holds it back.
    expect(muted.sent).toBeGreaterThan(20);
    expect(muted.received).toBe(0);

    const lostBefore = (await inbound(listener)).lost;
    await speaker.evaluate(() => (window as any).meeting.self.enableAudio());
    await until(async () => (await window_(listener, speaker, 500)).received > 10, 10_000, 'audio to resume after the speaker unmuted');
    // The held-back stretch is not seen as loss: the numbering continues.
    expect((await inbound(listener)).lost - lostBefore).toBeLessThan(5);

    const all = await t.call('POST', `${f.base}/meetings/${meetingId}/active-session/mute-all`, { allow_unmute: false });
    expect(all.body.data).toMatchObject({ action: 'mute-all', muted_participants_count: 2 });
    await speaker.waitForFunction(() => (window as any).meeting.self.audioEnabled === false, { timeout: 5000 });
    const refused = await speaker.evaluate(() =>
      (window as any).meeting.self.enableAudio().then(
        () => 'enabled',
        (e: Error) => e.message,
      ),
    );
    expect(refused).toMatch(/does not allow unmuting/);
    await sleep(300);
    const locked = await window_(listener, speaker, 1500);
    expect(locked.received).toBe(0);

    // Switching the microphone while held keeps it held (the new track is the same published one).
    await speaker.evaluate(async () => {
      const m = (window as any).meeting;
      await m.self.setDevice((await m.self.getAudioDevices())[0]);
      await m.chat.sendTextMessage('still here');
    });
    expect((await window_(listener, speaker, 1000)).received).toBe(0);
    expect(await speaker.evaluate(() => (window as any).seen)).toEqual([
      ['audioUpdate', false, false],
      ['audioUpdate', true, true],
      ['audioUpdate', false, false],
      ['deviceUpdate', 'audioinput'],
    ]);
    await speaker.evaluate(() => (window as any).meeting.leave());
    await listener.waitForFunction(() => (window as any).seen.length === 2, { timeout: 5000 });
    expect(await listener.evaluate(() => (window as any).seen)).toEqual([
      ['chatUpdate', 'still here', true],
      ['participantLeft', speakerP.id, false],
    ]);

    await Promise.all([listener.close(), speaker.close()]);
  }, 90_000);
});
