/**
 * The meeting page in Debian Chromium with fake camera and microphone: three participants join
 * through the page served by Outpost; the third waits until the host admits it; every page
 * decodes the other two participants' video (WebRTC stats of its subscriptions); a chat message
 * and a poll go round; a shared screen is decoded beside the camera; a REST kick ends one
 * participant's meeting live; the SDK's screenShareUpdate, videoUpdate and participantLeft events
 * arrive in order with the state already changed. Each lifecycle screen is captured and checked
 * for its key elements. Media and browsers do not touch storage: SQLite pass only.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { launchMediaChromium } from '../../support/chromium.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqlitePassOnly, startTestServer, type TestServer } from '../../support/server.ts';
import { addParticipant, createApp, createMeeting, type Fixture } from './support.ts';

/** Three pages are open at once and only one is in front: keep the others running at full speed; screen share takes the whole (virtual) screen without a picker. */
const EXTRA_FLAGS = [
  '--disable-background-timer-throttling',
  '--disable-renderer-backgrounding',
  '--disable-backgrounding-occluded-windows',
  '--auto-select-desktop-capture-source=Entire screen',
];


describe.skipIf(sqlitePassOnly('the meeting page test drives media and browsers, not storage'))('meeting page in Chromium', () => {
  let t: TestServer;
  let f: Fixture;
  let browser: Browser;
  let profile: string;
  let shots: string;

  beforeAll(async () => {
    t = await startTestServer({ meetingsKeepAliveCap: 0 });
    f = await createApp(t, 'page');
    shots = mkdtempSync(join(tmpdir(), 'outpost-rtk-screens-'));
    ({ browser, profile } = await launchMediaChromium('outpost-rtk-chromium-', EXTRA_FLAGS));
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await t?.stop();
  });

  async function open(token: string): Promise<Page> {
    const page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 800 });
    page.on('pageerror', (err) => console.log('page error:', (err as Error).message));
    await page.goto(`${t.url}/realtime/kit/meeting?authToken=${encodeURIComponent(token)}`);
    return page;
  }

  const onScreen = (page: Page, screen: string, ms = 20_000) => page.waitForFunction((s) => document.body.dataset.screen === s, { timeout: ms, polling: 100 }, screen);

  async function shoot(page: Page, name: string): Promise<void> {
    // A tab in the background never produces a frame to capture.
    await page.bringToFront();
    const png = await Promise.race([
      page.screenshot({ type: 'png' }),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`screenshot ${name} took over 15 s`)), 15_000)),
    ]);
    expect(png.byteLength).toBeGreaterThan(2000);
    writeFileSync(join(shots, `${name}.png`), png);
  }

  /** Input events reach only the tab in front (a background tab never renders the frame they wait for). */
  async function press(page: Page, selector: string): Promise<void> {
    await page.bringToFront();
    await page.click(selector);
  }
  async function typeInto(page: Page, selector: string, text: string): Promise<void> {
    await page.bringToFront();
    await page.type(selector, text);
  }

  /** Frames decoded from each remote participant, by userId, from the page's subscription stats. */
  const decoded = (page: Page) =>
    page.evaluate(async () => {
      const m = (window as any).meeting;
      const out: Record<string, number> = {};
      for (const p of m.participants.joined.toArray()) {
        const sub = m._media.subs.get(p.id);
        let frames = 0;
        if (sub) (await sub.pc.getStats()).forEach((s: any) => s.type === 'inbound-rtp' && s.kind === 'video' && (frames += s.framesDecoded || 0));
        out[p.userId] = frames;
      }
      return out;
    });

  async function framesFromAll(page: Page, userIds: string[], ms = 40_000): Promise<Record<string, number>> {
    const end = Date.now() + ms;
    let last: Record<string, number> = {};
    while (Date.now() < end) {
      last = await decoded(page);
      step(`frames ${JSON.stringify(last)}`);
      if (userIds.every((u) => (last[u] ?? 0) > 5)) return last;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`frames decoded stayed at ${JSON.stringify(last)}`);
  }

  const t0 = Date.now();
  const step = (name: string) => {
    if (process.env.OUTPOST_TEST_VERBOSE) console.log(`${((Date.now() - t0) / 1000).toFixed(1)}s ${name}`);
  };

  it('three join (one admitted from the waitlist), see each other, chat, poll, screen share, and a REST kick', async () => {
    const meetingId = await createMeeting(t, f, { title: 'Page meeting' });
    const host = await addParticipant(t, f, meetingId, 'host', 'group_call_host', 'Hana');
    const presenter = await addParticipant(t, f, meetingId, 'presenter', 'webinar_presenter', 'Pia');
    const guest = await addParticipant(t, f, meetingId, 'guest', 'group_call_participant', 'Gus');

    step('Initialization');
    // Initialization: a token that is not a JWT stays on the first screen with the reason.
    const bad = await open('not-a-token');
    await bad.waitForFunction(() => document.getElementById('init-error')!.textContent!.length > 0, { timeout: 10_000, polling: 100 });
    expect(await bad.$eval('body', (b) => b.dataset.screen ?? 'initialization')).toBe('initialization');
    expect(await bad.$eval('#init-error', (e) => e.textContent)).toContain('JWT');
    await shoot(bad, 'initialization');
    await bad.close();

    step('Join intent');
    // Join intent with a live camera preview.
    const a = await open(host.token);
    await onScreen(a, 'join-intent');
    await a.waitForFunction(() => (document.getElementById('preview') as HTMLVideoElement).videoWidth > 0, { timeout: 15_000, polling: 100 });
    expect(await a.$eval('#setup-title', (e) => e.textContent)).toBe('Page meeting');
    expect(await a.$eval('#name', (e) => (e as HTMLInputElement).value)).toBe('Hana');
    await shoot(a, 'join-intent');
    await press(a, '#join');
    await onScreen(a, 'meeting');

    const b = await open(presenter.token);
    await onScreen(b, 'join-intent');
    await press(b, '#join');
    await onScreen(b, 'meeting');

    // The SDK's object carries every name of the spec's client-side meeting object.
    const missing = await a.evaluate(() => {
      const m = (window as any).meeting;
      const want: Record<string, [unknown, string[]]> = {
        self: [m.self, ['id', 'userId', 'name', 'audioEnabled', 'videoEnabled', 'screenShareEnabled', 'audioTrack', 'videoTrack', 'screenShareTracks', 'roomJoined', 'roomState',
          'enableAudio', 'disableAudio', 'enableVideo', 'disableVideo', 'enableScreenShare', 'disableScreenShare', 'setName', 'setDevice', 'getAllDevices', 'getAudioDevices', 'getVideoDevices', 'getSpeakerDevices']],
        'participants.joined': [m.participants.joined, ['toArray', 'size', 'get']],
        'participants.active': [m.participants.active, ['toArray', 'size', 'get']],
        'participants.waitlisted': [m.participants.waitlisted, ['toArray', 'size', 'get']],
        'participants.pinned': [m.participants.pinned, ['toArray', 'size', 'get']],
        meta: [m.meta, ['meetingId', 'meetingTitle', 'meetingStartedTimestamp']],
        chat: [m.chat, ['messages', 'sendTextMessage', 'sendImageMessage']],
        polls: [m.polls, ['items', 'create', 'vote']],
        plugins: [m.plugins, ['all', 'activate', 'deactivate']],
        ai: [m.ai, ['transcripts']],
        meeting: [m, ['join', 'leave']],
      };
      const out: string[] = [];
      for (const [where, [obj, names]] of Object.entries(want)) for (const n of names) if (!(n in (obj as object))) out.push(`${where}.${n}`);
      return { out, joined: m.self.roomJoined, state: m.self.roomState, started: m.meta.meetingStartedTimestamp instanceof Date };
    });
    expect(missing).toEqual({ out: [], joined: true, state: 'joined', started: true });

    step('The guest waits');
    // The guest waits; the host admits it from the participants panel.
    const c = await open(guest.token);
    await onScreen(c, 'join-intent');
    await press(c, '#join');
    step('guest clicked join');
    await onScreen(c, 'waitlist');
    step('guest waits');
    await shoot(c, 'waitlist');
    step('waitlist captured');
    await a.waitForSelector('#waiting li.waiting button.admit', { timeout: 10_000 });
    step('admit button shown');
    await press(a, '#waiting li.waiting button.admit');
    step('admit clicked');
    await onScreen(c, 'meeting');
    step('guest in');

    step('Everyone decodes');
    // Everyone decodes everyone else's video.
    const [fa, fb, fc] = await Promise.all([framesFromAll(a, [presenter.id, guest.id]), framesFromAll(b, [host.id, guest.id]), framesFromAll(c, [host.id, presenter.id])]);
    expect(Object.keys(fa).sort()).toEqual([presenter.id, guest.id].sort());
    expect(Object.keys(fb).sort()).toEqual([host.id, guest.id].sort());
    expect(Object.keys(fc).sort()).toEqual([host.id, presenter.id].sort());
    expect(await a.$$eval('#grid .tile', (tiles) => tiles.length)).toBe(3);

    step('Chat typed');
    // Chat typed into one page appears on the others.
    await typeInto(b, '#chat-input', 'hello from Pia');
    await press(b, '#chat-form button');
    for (const p of [a, c]) await p.waitForFunction(() => [...document.querySelectorAll('#messages .msg')].some((m) => m.textContent === 'Pia: hello from Pia'), { timeout: 10_000, polling: 100 });
    // Oversized chat is refused with the reason shown (once the first send has been answered).
    await b.waitForFunction(() => (document.getElementById('chat-input') as HTMLInputElement).value === '', { timeout: 10_000, polling: 100 });
    await b.evaluate(() => ((document.getElementById('chat-input') as HTMLInputElement).value = 'x'.repeat(4001)));
    await press(b, '#chat-form button');
    await b.waitForFunction(() => document.getElementById('chat-error')!.textContent!.includes('4000'), { timeout: 10_000, polling: 100 });

    // An image message (a canvas drawn in the page) shows as an image on the other pages.
    await c.evaluate(async () => {
      const canvas = document.createElement('canvas');
      canvas.width = 8;
      canvas.height = 8;
      canvas.getContext('2d')!.fillRect(0, 0, 8, 8);
      const blob = await new Promise<Blob>((r) => canvas.toBlob((b) => r(b!), 'image/png'));
      await (window as any).meeting.chat.sendImageMessage(blob);
    });
    await a.waitForFunction(() => [...document.querySelectorAll('#messages .msg img')].some((i) => (i as HTMLImageElement).naturalWidth === 8), { timeout: 10_000, polling: 100 });

    // The whiteboard plugin: the host opens it and draws; the guest's board shows the stroke.
    await press(a, '#toggle-whiteboard');
    await c.waitForFunction(() => document.getElementById('whiteboard')!.classList.contains('on'), { timeout: 10_000, polling: 100 });
    await a.evaluate(() => (window as any).meeting.plugins.all.get('whiteboard').sendData({ x0: 10, y0: 10, x1: 200, y1: 100 }));
    await c.waitForFunction(() => (window as any).meeting.plugins.all.get('whiteboard').events.length === 1, { timeout: 10_000, polling: 100 });
    expect(await c.evaluate(() => (window as any).meeting.plugins.active.toArray().map((p: any) => p.id))).toEqual(['whiteboard']);

    step('A poll asked');
    // A poll asked by the host, answered by the guest, counted on the host's page.
    expect(await c.$eval('#poll-form', (e) => (e as HTMLElement).style.display)).toBe('none');
    await typeInto(a, '#poll-question', 'Ship it?');
    await typeInto(a, '#poll-options', 'yes, no');
    await press(a, '#poll-form button');
    await c.waitForSelector('.poll button.vote[data-index="0"]', { timeout: 10_000 });
    await press(c, '.poll button.vote[data-index="0"]');
    await a.waitForSelector('.poll button.vote[data-index="0"][data-count="1"]', { timeout: 10_000 });
    await shoot(a, 'meeting');

    step('screen share');
    // Events of the spec, each seen with the state already changed: on the sharer's `self`, on the
    // guest's `participants.joined` for the sharer, and (below) for a kick and a camera toggle.
    const listen = `(() => {
      const m = window.meeting;
      window.seenEvents = [];
      const push = (...e) => window.seenEvents.push(e);
      m.self.on('screenShareUpdate', (e) => push('self.screenShareUpdate', e.screenShareEnabled, m.self.screenShareEnabled));
      m.self.on('videoUpdate', (e) => push('self.videoUpdate', e.videoEnabled, m.self.videoEnabled));
      m.participants.joined.on('screenShareUpdate', (p) => push('joined.screenShareUpdate', p.userId, p.screenShareEnabled));
      m.participants.joined.on('videoUpdate', (p) => push('joined.videoUpdate', p.userId, p.videoEnabled));
      m.participants.joined.on('participantLeft', (p) => push('joined.participantLeft', p.userId, m.participants.joined.get(p.id) === undefined));
    })()`;
    await a.evaluate(listen);
    await c.evaluate(listen);
    // Screen share: the host shares; the guest receives and decodes it beside the camera.
    await press(a, '#toggle-screen');
    await a.waitForFunction(() => (window as any).meeting.self.screenShareEnabled === true, { timeout: 10_000, polling: 100 });
    const screen = await c.waitForFunction(
      async (hostId: string) => {
        const m = (window as any).meeting;
        const p = m.participants.joined.toArray().find((x: any) => x.userId === hostId);
        if (!p?.screenShareEnabled || !p.screenShareTracks.video) return false;
        const sub = m._media.subs.get(p.id);
        const decoded: number[] = [];
        (await sub.pc.getStats()).forEach((s: any) => s.type === 'inbound-rtp' && s.kind === 'video' && decoded.push(s.framesDecoded || 0));
        return decoded.length === 2 && decoded.every((n) => n > 0) ? decoded : false;
      },
      { timeout: 20_000, polling: 250 },
      host.id,
    );
    expect(((await screen.jsonValue()) as number[]).length).toBe(2);

    step('A REST kick');
    // A REST kick ends the presenter's meeting at once; the others lose its tile.
    const kick = await t.call('POST', `${f.base}/meetings/${meetingId}/active-session/kick`, { participant_ids: [presenter.id], custom_participant_ids: [] });
    expect(kick.status).toBe(200);
    await onScreen(b, 'ended', 10_000);
    expect(await b.$eval('body', (e) => e.dataset.endedState)).toBe('kicked');
    expect(await b.$eval('#ended-reason', (e) => e.textContent)).toContain('removed');
    await shoot(b, 'ended');
    for (const p of [a, c]) await p.waitForFunction(() => document.querySelectorAll('#grid .tile').length === 2, { timeout: 10_000, polling: 100 });
    expect(await a.evaluate(() => (window as any).meeting.participants.joined.size())).toBe(1);

    // The host turns its camera off: its own videoUpdate, and the guest's for the host.
    await a.evaluate(() => (window as any).meeting.self.disableVideo());
    const seen = (p: Page) => p.evaluate(() => (window as any).seenEvents as unknown[][]);
    await c.waitForFunction((id: string) => (window as any).seenEvents.some((e: unknown[]) => e[0] === 'joined.videoUpdate' && e[1] === id), { timeout: 10_000, polling: 100 }, host.id);
    expect(await seen(a)).toEqual([
      ['self.screenShareUpdate', true, true],
      ['joined.participantLeft', presenter.id, true],
      ['self.videoUpdate', false, false],
    ]);
    // A remote participant's events may repeat when a new track arrives (the subscription is
    // renewed when the participant's tracks change); each must carry the state at that moment.
    const atC = await seen(c);
    const order = [
      ['joined.screenShareUpdate', host.id, true],
      ['joined.participantLeft', presenter.id, true],
      ['joined.videoUpdate', host.id, false],
    ].map((want) => atC.findIndex((e) => JSON.stringify(e) === JSON.stringify(want)));
    expect(order.every((i, k) => i >= 0 && (k === 0 || i > order[k - 1]!)), JSON.stringify(atC)).toBe(true);
    expect(atC.filter((e) => e[0] === 'joined.screenShareUpdate').every((e) => e[2] === true)).toBe(true);
    expect(atC.slice(order[2]! + 1)).toEqual([]);

    const session = await t.call('GET', `${f.base}/meetings/${meetingId}/active-session`);
    expect(session.body.data).toMatchObject({ live_participants: 2, max_concurrent_participants: 3 });
    console.log(`meeting screenshots in ${shots}`);
    await Promise.all([a.close(), b.close(), c.close()]);
  }, 150_000);
});
