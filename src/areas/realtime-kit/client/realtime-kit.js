/**
 * Outpost's meeting client: the spec's client-side meeting object over Outpost's signalling
 * WebSocket and media forwarder. Served by Outpost at `/realtime/kit/sdk.js`; types in
 * `realtime-kit.d.ts`.
 *
 *   import RealtimeKitClient from '/realtime/kit/sdk.js';
 *   const meeting = await RealtimeKitClient.init({ authToken, defaults: { audio: true, video: true } });
 *   meeting.self.on('roomJoined', () => …);
 *   await meeting.join();
 *
 * Media: one publishing peer connection per participant (audio, video; screen share on a second
 * one) and one subscribing peer connection per remote participant, each a forwarder session the
 * server owns. State changes are applied first, then the event is emitted.
 */

class Emitter {
  constructor() {
    this._listeners = new Map();
  }
  on(event, fn) {
    if (!this._listeners.has(event)) this._listeners.set(event, new Set());
    this._listeners.get(event).add(fn);
    return this;
  }
  addListener(event, fn) {
    return this.on(event, fn);
  }
  once(event, fn) {
    const wrap = (...args) => {
      this.off(event, wrap);
      fn(...args);
    };
    return this.on(event, wrap);
  }
  off(event, fn) {
    this._listeners.get(event)?.delete(fn);
    return this;
  }
  removeListener(event, fn) {
    return this.off(event, fn);
  }
  removeAllListeners(event) {
    if (event) this._listeners.delete(event);
    else this._listeners.clear();
    return this;
  }
  emit(event, ...args) {
    for (const fn of [...(this._listeners.get(event) ?? [])]) {
      try {
        fn(...args);
      } catch (err) {
        console.error(`listener of ${event} failed`, err);
      }
    }
  }
}

/** A live map of participants: `get(id)`, `toArray()`, `size()`, and events. */
class ParticipantMap extends Emitter {
  constructor() {
    super();
    this._items = new Map();
  }
  get(id) {
    return this._items.get(id);
  }
  has(id) {
    return this._items.has(id);
  }
  toArray() {
    return [...this._items.values()];
  }
  size() {
    return this._items.size;
  }
  [Symbol.iterator]() {
    return this._items.values();
  }
  _set(p, event) {
    this._items.set(p.id, p);
    if (event) this.emit(event, p);
  }
  _delete(id, event) {
    const p = this._items.get(id);
    if (!p) return;
    this._items.delete(id);
    if (event) this.emit(event, p);
  }
}

function applyInfo(target, info) {
  target.id = info.id;
  target.userId = info.userId;
  target.name = info.name;
  target.picture = info.picture ?? null;
  target.customParticipantId = info.customParticipantId;
  target.presetName = info.presetName;
  target.isHost = !!info.isHost;
}

class Participant extends Emitter {
  constructor(meeting, info) {
    super();
    this._meeting = meeting;
    applyInfo(this, info);
    this.audioEnabled = !!info.audioEnabled;
    this.videoEnabled = !!info.videoEnabled;
    this.screenShareEnabled = !!info.screenShareEnabled;
    this.audioTrack = undefined;
    this.videoTrack = undefined;
    this.screenShareTracks = { audio: undefined, video: undefined };
    this.isPinned = false;
    this._tracks = info.tracks ?? {};
  }
  pin() {
    this.isPinned = true;
    this._meeting.participants.pinned._set(this, 'participantPinned');
    this.emit('pinned', this);
  }
  unpin() {
    this.isPinned = false;
    this._meeting.participants.pinned._delete(this.id, 'participantUnpinned');
    this.emit('unpinned', this);
  }
}

class Self extends Emitter {
  constructor(meeting, info, permissions, defaults) {
    super();
    this._meeting = meeting;
    applyInfo(this, info);
    this.permissions = permissions;
    this.audioEnabled = false;
    this.videoEnabled = false;
    this.screenShareEnabled = false;
    this.audioTrack = undefined;
    this.videoTrack = undefined;
    this.screenShareTracks = { audio: undefined, video: undefined };
    this.roomJoined = false;
    this.roomState = 'init';
    this._wantAudio = defaults.audio !== false && this._may('audio');
    this._wantVideo = defaults.video !== false && this._may('video');
    this._devices = { audio: undefined, video: undefined, speaker: undefined };
    if (typeof navigator !== 'undefined' && navigator.mediaDevices?.addEventListener) {
      navigator.mediaDevices.addEventListener('devicechange', async () => this.emit('deviceListUpdate', { devices: await this.getAllDevices() }));
    }
  }

  _may(kind) {
    return this.permissions?.media?.[kind]?.can_produce === 'ALLOWED';
  }

  /** Before joining only, as the spec says. */
  setName(name) {
    if (this.roomJoined) throw new Error('setName works before join() only');
    if (typeof name !== 'string' || !name.trim()) throw new Error('name must be a non-empty string');
    this.name = name.trim();
  }

  async _capture(kind) {
    const device = this._devices[kind];
    const constraints = kind === 'audio' ? { audio: device ? { deviceId: { exact: device.deviceId } } : true } : { video: { width: 640, height: 360, ...(device ? { deviceId: { exact: device.deviceId } } : {}) } };
    const stream = await navigator.mediaDevices.getUserMedia(constraints);
    return kind === 'audio' ? stream.getAudioTracks()[0] : stream.getVideoTracks()[0];
  }

  async enableAudio() {
    if (!this._may('audio')) throw new Error('this preset may not produce audio');
    if (this.roomJoined) await this._meeting._request({ t: 'media', audioEnabled: true });
    this._wantAudio = true;
    if (!this.audioTrack || this.audioTrack.readyState === 'ended') this.audioTrack = await this._capture('audio');
    this.audioTrack.enabled = true;
    await this._meeting._media.replace('audio', this.audioTrack);
    this.audioEnabled = true;
    this.emit('audioUpdate', { audioEnabled: true, audioTrack: this.audioTrack });
  }

  async disableAudio(fromServer = false) {
    this._wantAudio = false;
    if (this.audioTrack) this.audioTrack.enabled = false;
    this.audioEnabled = false;
    if (this.roomJoined && !fromServer) await this._meeting._request({ t: 'media', audioEnabled: false });
    this.emit('audioUpdate', { audioEnabled: false, audioTrack: this.audioTrack });
  }

  async enableVideo() {
    if (!this._may('video')) throw new Error('this preset may not produce video');
    this._wantVideo = true;
    if (!this.videoTrack || this.videoTrack.readyState === 'ended') this.videoTrack = await this._capture('video');
    await this._meeting._media.replace('video', this.videoTrack);
    this.videoEnabled = true;
    if (this.roomJoined) await this._meeting._request({ t: 'media', videoEnabled: true });
    this.emit('videoUpdate', { videoEnabled: true, videoTrack: this.videoTrack });
  }

  async disableVideo() {
    this._wantVideo = false;
    await this._meeting._media.replace('video', null);
    this.videoTrack?.stop();
    this.videoTrack = undefined;
    this.videoEnabled = false;
    if (this.roomJoined) await this._meeting._request({ t: 'media', videoEnabled: false });
    this.emit('videoUpdate', { videoEnabled: false, videoTrack: undefined });
  }

  async enableScreenShare() {
    if (!this._may('screenshare')) throw new Error('this preset may not share its screen');
    if (!this.roomJoined) throw new Error('join the meeting before sharing a screen');
    const stream = await navigator.mediaDevices.getDisplayMedia({ video: true, audio: false });
    const track = stream.getVideoTracks()[0];
    track.addEventListener('ended', () => void this.disableScreenShare());
    await this._meeting._media.publishScreen(track);
    this.screenShareTracks = { audio: undefined, video: track };
    this.screenShareEnabled = true;
    await this._meeting._request({ t: 'media', screenShareEnabled: true });
    this.emit('screenShareUpdate', { screenShareEnabled: true, screenShareTracks: this.screenShareTracks });
  }

  async disableScreenShare() {
    if (!this.screenShareEnabled) return;
    this.screenShareTracks.video?.stop();
    await this._meeting._media.stopScreen();
    this.screenShareTracks = { audio: undefined, video: undefined };
    this.screenShareEnabled = false;
    if (this.roomJoined) await this._meeting._request({ t: 'media', screenShareEnabled: false });
    this.emit('screenShareUpdate', { screenShareEnabled: false, screenShareTracks: this.screenShareTracks });
  }

  async getAllDevices() {
    if (!navigator.mediaDevices?.enumerateDevices) return [];
    return navigator.mediaDevices.enumerateDevices();
  }
  async getAudioDevices() {
    return (await this.getAllDevices()).filter((d) => d.kind === 'audioinput');
  }
  async getVideoDevices() {
    return (await this.getAllDevices()).filter((d) => d.kind === 'videoinput');
  }
  async getSpeakerDevices() {
    return (await this.getAllDevices()).filter((d) => d.kind === 'audiooutput');
  }
  getCurrentDevices() {
    return { ...this._devices };
  }

  /** Switches the microphone, camera or speaker to `device` (one of getAllDevices()). */
  async setDevice(device) {
    if (!device || typeof device.kind !== 'string') throw new Error('setDevice takes a device from getAllDevices()');
    const kind = device.kind === 'audioinput' ? 'audio' : device.kind === 'videoinput' ? 'video' : 'speaker';
    this._devices[kind] = device;
    if (kind === 'audio' && this.audioEnabled) {
      this.audioTrack?.stop();
      this.audioTrack = await this._capture('audio');
      await this._meeting._media.replace('audio', this.audioTrack);
    } else if (kind === 'video' && this.videoEnabled) {
      this.videoTrack?.stop();
      this.videoTrack = await this._capture('video');
      await this._meeting._media.replace('video', this.videoTrack);
    }
    this.emit('deviceUpdate', { device });
  }
}

class Chat extends Emitter {
  constructor(meeting) {
    super();
    this._meeting = meeting;
    this.messages = [];
  }
  async sendTextMessage(text) {
    const reply = await this._meeting._request({ t: 'chat', kind: 'text', text });
    return reply;
  }
  /** `file`: a Blob or File holding a png, jpeg, gif or webp image. */
  async sendImageMessage(file) {
    const data = await new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
    return this._meeting._request({ t: 'chat', kind: 'image', data });
  }
  _add(message) {
    if (this.messages.some((m) => m.id === message.id)) return;
    this.messages.push(message);
    this.emit('chatUpdate', { message, messages: this.messages });
  }
}

class Polls extends Emitter {
  constructor(meeting) {
    super();
    this._meeting = meeting;
    this.items = [];
  }
  async create(question, options, anonymous = false, hideVotes = false) {
    return this._meeting._request({ t: 'poll.create', question, options, anonymous, hideVotes });
  }
  async vote(pollId, optionIndex) {
    return this._meeting._request({ t: 'poll.vote', pollId, index: optionIndex });
  }
  _upsert(poll, created) {
    const i = this.items.findIndex((p) => p.id === poll.id);
    if (i >= 0) this.items[i] = poll;
    else this.items.push(poll);
    this.emit('pollsUpdate', { polls: this.items, newPoll: created && i < 0, poll });
  }
}

class Plugin extends Emitter {
  constructor(plugins, desc) {
    super();
    this._plugins = plugins;
    this.id = desc.id;
    this.name = desc.name;
    this.description = desc.description;
    this.active = false;
    this.events = [];
  }
  activate() {
    return this._plugins.activate(this.id);
  }
  deactivate() {
    return this._plugins.deactivate(this.id);
  }
  /** Shares `data` with every participant (the whiteboard sends strokes). */
  sendData(data) {
    this.events.push(data);
    return this._plugins._meeting._request({ t: 'plugin.data', pluginId: this.id, data });
  }
}

class Plugins extends Emitter {
  constructor(meeting) {
    super();
    this._meeting = meeting;
    this.all = new ParticipantMap();
    this.active = new ParticipantMap();
  }
  async activate(pluginId) {
    return this._meeting._request({ t: 'plugin.activate', pluginId });
  }
  async deactivate(pluginId) {
    const id = pluginId ?? this.active.toArray()[0]?.id;
    return this._meeting._request({ t: 'plugin.deactivate', pluginId: id });
  }
  _state(id, active, events) {
    const p = this.all.get(id);
    if (!p) return;
    if (events) p.events = [...events];
    if (p.active === active) return;
    p.active = active;
    if (active) {
      this.active._set(p);
      this.emit('pluginActivated', p);
      p.emit('enabled', p);
    } else {
      p.events = [];
      this.active._delete(p.id);
      this.emit('pluginDeactivated', p);
      p.emit('closed', p);
    }
  }
}

/** The peer connections: publishing, screen share, and one subscription per remote peer. */
class Media {
  constructor(meeting) {
    this._m = meeting;
    this.pub = undefined;
    this.senders = {};
    this.screen = undefined;
    this.subs = new Map();
    this.queue = Promise.resolve();
  }
  serial(fn) {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch((err) => console.warn('media operation failed', err));
    return next;
  }
  rtcConfig() {
    return { bundlePolicy: 'max-bundle', ...(this._m._options.rtcConfig ?? {}) };
  }
  async replace(kind, track) {
    const sender = this.senders[kind];
    if (sender) await sender.replaceTrack(track);
  }
  async publish() {
    const self = this._m.self;
    const kinds = ['audio', 'video'].filter((k) => self._may(k));
    if (!kinds.length) return;
    if (self._wantAudio && !self.audioTrack) self.audioTrack = await self._capture('audio').catch(() => undefined);
    if (self._wantVideo && !self.videoTrack) self.videoTrack = await self._capture('video').catch(() => undefined);
    const pc = new RTCPeerConnection(this.rtcConfig());
    this.pub = pc;
    const tracks = [];
    for (const kind of kinds) {
      const track = kind === 'audio' ? (self._wantAudio ? self.audioTrack : undefined) : self._wantVideo ? self.videoTrack : undefined;
      const tx = pc.addTransceiver(track ?? kind, { direction: 'sendonly' });
      this.senders[kind] = tx.sender;
      tracks.push({ kind, tx });
    }
    const { sessionId } = await this._m._request({ t: 'sfu', op: 'session' });
    await pc.setLocalDescription(await pc.createOffer());
    const r = await this._m._request({ t: 'sfu', op: 'publish', sessionId, offer: { type: 'offer', sdp: pc.localDescription.sdp }, tracks: tracks.map((t) => ({ kind: t.kind, mid: t.tx.mid })) });
    await pc.setRemoteDescription(r.sessionDescription);
    self.audioEnabled = !!(self._wantAudio && self.audioTrack);
    self.videoEnabled = !!(self._wantVideo && self.videoTrack);
    await this._m._request({ t: 'media', audioEnabled: self.audioEnabled, videoEnabled: self.videoEnabled });
    self.emit('audioUpdate', { audioEnabled: self.audioEnabled, audioTrack: self.audioTrack });
    self.emit('videoUpdate', { videoEnabled: self.videoEnabled, videoTrack: self.videoTrack });
  }
  async publishScreen(track) {
    const pc = new RTCPeerConnection(this.rtcConfig());
    const tx = pc.addTransceiver(track, { direction: 'sendonly' });
    const { sessionId } = await this._m._request({ t: 'sfu', op: 'session' });
    await pc.setLocalDescription(await pc.createOffer());
    const r = await this._m._request({ t: 'sfu', op: 'publish', sessionId, offer: { type: 'offer', sdp: pc.localDescription.sdp }, tracks: [{ kind: 'screenshare', mid: tx.mid }] });
    await pc.setRemoteDescription(r.sessionDescription);
    this.screen = { pc, sessionId };
  }
  async stopScreen() {
    if (!this.screen) return;
    const { pc, sessionId } = this.screen;
    this.screen = undefined;
    pc.close();
    await this._m._request({ t: 'sfu', op: 'close', sessionId }).catch(() => undefined);
  }
  /** (Re)subscribes to a remote peer's published tracks when they changed. */
  subscribe(p) {
    return this.serial(async () => {
      const kinds = Object.keys(p._tracks).sort();
      const key = kinds.map((k) => `${k}:${p._tracks[k].sessionId}/${p._tracks[k].trackName}`).join(',');
      const cur = this.subs.get(p.id);
      if (cur && cur.key === key) return;
      if (cur) await this.drop(p.id, false);
      if (!kinds.length || !this._m.participants.joined.has(p.id)) return;
      const pc = new RTCPeerConnection(this.rtcConfig());
      const sub = { key, pc, sessionId: undefined, kinds: new Map() };
      this.subs.set(p.id, sub);
      pc.ontrack = (e) => {
        const kind = sub.kinds.get(e.transceiver.mid);
        if (kind === 'audio') {
          p.audioTrack = e.track;
          p.emit('audioUpdate', { audioEnabled: p.audioEnabled, audioTrack: e.track });
        } else if (kind === 'video') {
          p.videoTrack = e.track;
          p.emit('videoUpdate', { videoEnabled: p.videoEnabled, videoTrack: e.track });
          this._m.participants.joined.emit('videoUpdate', p);
        } else if (kind === 'screenshare') {
          p.screenShareTracks = { audio: undefined, video: e.track };
          p.emit('screenShareUpdate', { screenShareEnabled: p.screenShareEnabled, screenShareTracks: p.screenShareTracks });
          this._m.participants.joined.emit('screenShareUpdate', p);
        }
      };
      const { sessionId } = await this._m._request({ t: 'sfu', op: 'session' });
      sub.sessionId = sessionId;
      const r = await this._m._request({ t: 'sfu', op: 'subscribe', sessionId, tracks: kinds.map((kind) => ({ peerId: p.id, kind })) });
      r.tracks.forEach((t, i) => sub.kinds.set(t.mid, kinds[i]));
      await pc.setRemoteDescription(r.sessionDescription);
      await pc.setLocalDescription(await pc.createAnswer());
      await this._m._request({ t: 'sfu', op: 'renegotiate', sessionId, answer: { type: 'answer', sdp: pc.localDescription.sdp } });
    });
  }
  async drop(peerId, tellServer = true) {
    const sub = this.subs.get(peerId);
    if (!sub) return;
    this.subs.delete(peerId);
    sub.pc.close();
    if (tellServer && sub.sessionId) await this._m._request({ t: 'sfu', op: 'close', sessionId: sub.sessionId }).catch(() => undefined);
  }
  close() {
    this.pub?.close();
    this.screen?.pc.close();
    for (const s of this.subs.values()) s.pc.close();
    this.subs.clear();
    this.pub = undefined;
    this.screen = undefined;
  }
  /** A summary of this client's WebRTC stats, reported to the server as call statistics. */
  async stats() {
    const out = { sent: { audio: 0, video: 0 }, received: { audio: { packets: 0, lost: 0 }, video: { packets: 0, lost: 0, framesDecoded: 0 } }, rtt: undefined };
    const pcs = [this.pub, ...[...this.subs.values()].map((s) => s.pc)].filter(Boolean);
    for (const pc of pcs) {
      const report = await pc.getStats();
      report.forEach((s) => {
        if (s.type === 'outbound-rtp' && (s.kind === 'audio' || s.kind === 'video')) out.sent[s.kind] += s.packetsSent || 0;
        if (s.type === 'inbound-rtp' && (s.kind === 'audio' || s.kind === 'video')) {
          out.received[s.kind].packets += s.packetsReceived || 0;
          out.received[s.kind].lost += s.packetsLost || 0;
          if (s.kind === 'video') out.received.video.framesDecoded += s.framesDecoded || 0;
        }
        if (s.type === 'candidate-pair' && s.nominated && s.currentRoundTripTime !== undefined) out.rtt = s.currentRoundTripTime;
      });
    }
    return out;
  }
}

function decodeToken(token) {
  const part = String(token).split('.')[1];
  if (!part) throw new Error('authToken is not a JWT');
  const json = JSON.parse(atob(part.replace(/-/g, '+').replace(/_/g, '/')));
  if (!json.meetingId) throw new Error('authToken lacks meetingId (a V1 auth token?)');
  if (!json.orgId || !json.participantId) throw new Error('authToken lacks orgId or participantId');
  return json;
}

/**
 * `meeting.ai`: live transcripts of participants whose preset enables transcription. Each entry is
 * `{id, peerId, userId, customParticipantId, name, transcript, isPartialTranscript, date,
 * startTime, endTime}`; `transcript` is emitted after the entry was appended.
 */
class AI extends Emitter {
  constructor() {
    super();
    this.transcripts = [];
  }

  _add(entry) {
    this.transcripts.push(entry);
    if (this.transcripts.length > 1000) this.transcripts.splice(0, this.transcripts.length - 1000);
    this.emit('transcript', entry);
  }
}

class Meeting extends Emitter {
  constructor(options, hello, ws) {
    super();
    this._options = options;
    this._ws = ws;
    this._pending = new Map();
    this._seq = 0;
    this.self = new Self(this, hello.self, hello.permissions, options.defaults ?? {});
    this.participants = { joined: new ParticipantMap(), active: new ParticipantMap(), waitlisted: new ParticipantMap(), pinned: new ParticipantMap() };
    this.participants.acceptWaitingRoomRequest = (id) => this._request({ t: 'waitlist.accept', peerId: id });
    this.participants.rejectWaitingRoomRequest = (id) => this._request({ t: 'waitlist.reject', peerId: id });
    this.participants.acceptAllWaitingRoomRequest = () => Promise.all(this.participants.waitlisted.toArray().map((p) => this.participants.acceptWaitingRoomRequest(p.id)));
    this.meta = { meetingId: hello.meta.meetingId, meetingTitle: hello.meta.meetingTitle, meetingStartedTimestamp: undefined, sessionId: undefined };
    this.chat = new Chat(this);
    this.polls = new Polls(this);
    this.plugins = new Plugins(this);
    for (const d of hello.plugins ?? []) this.plugins.all._set(new Plugin(this.plugins, d));
    this.ai = new AI();
    this._media = new Media(this);
    this._joinWaiters = [];
    ws.addEventListener('message', (e) => this._onMessage(JSON.parse(e.data)));
    ws.addEventListener('close', (e) => this._onClose(e));
  }

  _request(msg) {
    if (this._ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error('the meeting connection is closed'));
    const id = ++this._seq;
    return new Promise((resolve, reject) => {
      this._pending.set(id, { resolve, reject });
      this._ws.send(JSON.stringify({ ...msg, id }));
    });
  }

  /** Joins (or waits in the waitlist until admitted); resolves once `roomJoined` was emitted. */
  join() {
    if (this.self.roomJoined) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this._joinWaiters.push({ resolve, reject });
      if (this._joinWaiters.length > 1) return;
      this._request({ t: 'join', name: this.self.name }).then(
        (r) => {
          if (r && r.state === 'waitlisted') {
            this.self.roomState = 'waitlisted';
            this.self.emit('waitlisted');
          }
        },
        (err) => this._settleJoin(err),
      );
    });
  }

  _settleJoin(err) {
    const waiters = this._joinWaiters;
    this._joinWaiters = [];
    for (const w of waiters) {
      if (err) w.reject(err);
      else w.resolve();
    }
  }

  async leave() {
    if (this.self.roomJoined) await this._request({ t: 'leave' }).catch(() => undefined);
    this._end('left');
  }

  _end(state) {
    if (this.self.roomState === state) return;
    const wasJoined = this.self.roomJoined;
    this._media.close();
    clearInterval(this._statsTimer);
    this.self.roomJoined = false;
    this.self.roomState = state;
    this.self.audioTrack?.stop();
    this.self.videoTrack?.stop();
    if (this._ws.readyState === WebSocket.OPEN) this._ws.close();
    if (wasJoined || state !== 'left') this.self.emit('roomLeft', { state });
    this._settleJoin(state === 'left' ? undefined : new Error(`the meeting was ${state}`));
  }

  _peer(info) {
    let p = this.participants.joined.get(info.id);
    if (!p) p = new Participant(this, info);
    return p;
  }

  _updatePeer(info) {
    const p = this.participants.joined.get(info.id);
    if (!p) return;
    applyInfo(p, info);
    const audio = !!info.audioEnabled;
    const video = !!info.videoEnabled;
    const screen = !!info.screenShareEnabled;
    p._tracks = info.tracks ?? {};
    if (p.audioEnabled !== audio) {
      p.audioEnabled = audio;
      p.emit('audioUpdate', { audioEnabled: audio, audioTrack: p.audioTrack });
      this.participants.joined.emit('audioUpdate', p);
    }
    if (p.videoEnabled !== video) {
      p.videoEnabled = video;
      this._syncActive(p);
      p.emit('videoUpdate', { videoEnabled: video, videoTrack: p.videoTrack });
      this.participants.joined.emit('videoUpdate', p);
    }
    if (p.screenShareEnabled !== screen) {
      p.screenShareEnabled = screen;
      p.emit('screenShareUpdate', { screenShareEnabled: screen, screenShareTracks: p.screenShareTracks });
      this.participants.joined.emit('screenShareUpdate', p);
    }
    this.participants.joined.emit('participantUpdate', p);
    void this._media.subscribe(p);
  }

  /** `active`: the joined participants shown on the stage (all of them, up to the preset's limit). */
  _syncActive(p) {
    if (this.participants.joined.has(p.id)) this.participants.active._set(p, this.participants.active.has(p.id) ? undefined : 'participantJoined');
    else this.participants.active._delete(p.id, 'participantLeft');
  }

  async _onJoined(msg) {
    applyInfo(this.self, msg.self);
    this.meta.meetingStartedTimestamp = new Date(msg.meta.meetingStartedTimestamp);
    this.meta.sessionId = msg.meta.sessionId;
    for (const info of msg.peers) {
      const p = this._peer(info);
      this.participants.joined._set(p);
      this._syncActive(p);
    }
    for (const info of msg.waitlisted ?? []) this.participants.waitlisted._set(new Participant(this, info));
    for (const m of msg.chat ?? []) this.chat.messages.push(m);
    for (const poll of msg.polls ?? []) this.polls.items.push(poll);
    for (const pl of msg.plugins ?? []) this.plugins._state(pl.id, pl.active, pl.events);
    this.self.roomJoined = true;
    this.self.roomState = 'joined';
    try {
      await this._media.publish();
    } catch (err) {
      console.warn('publishing media failed', err);
    }
    for (const p of this.participants.joined) void this._media.subscribe(p);
    this._statsTimer = setInterval(async () => {
      if (!this.self.roomJoined) return;
      this._request({ t: 'stats', stats: await this._media.stats() }).catch(() => undefined);
    }, this._options.statsIntervalMs ?? 5000);
    this.self.emit('roomJoined', { reconnected: false });
    this._settleJoin();
  }

  _onMessage(msg) {
    if (msg.t === 'reply') {
      const p = this._pending.get(msg.id);
      if (!p) return;
      this._pending.delete(msg.id);
      if (msg.ok) p.resolve(msg.data);
      else p.reject(Object.assign(new Error(msg.error.message), { code: msg.error.code }));
      return;
    }
    switch (msg.t) {
      case 'joined':
        void this._onJoined(msg);
        break;
      case 'peerJoined': {
        const p = this._peer(msg.peer);
        this.participants.joined._set(p, 'participantJoined');
        this._syncActive(p);
        void this._media.subscribe(p);
        break;
      }
      case 'peerLeft': {
        const p = this.participants.joined.get(msg.peerId);
        if (!p) break;
        void this._media.drop(p.id);
        this.participants.joined._delete(p.id, 'participantLeft');
        this.participants.active._delete(p.id, 'participantLeft');
        this.participants.pinned._delete(p.id, 'participantUnpinned');
        break;
      }
      case 'peerUpdate':
        if (msg.peer.id === this.self.id) {
          applyInfo(this.self, msg.peer);
          break;
        }
        this._updatePeer(msg.peer);
        break;
      case 'waitlistUpdate':
        if (msg.added) this.participants.waitlisted._set(new Participant(this, msg.added), 'participantJoined');
        if (msg.removed) this.participants.waitlisted._delete(msg.removed, 'participantLeft');
        break;
      case 'chat':
        this.chat._add(msg.message);
        break;
      case 'transcript':
        this.ai._add(msg.transcript);
        break;
      case 'poll':
        this.polls._upsert(msg.poll, msg.created);
        break;
      case 'plugin': {
        const plugin = this.plugins.all.get(msg.pluginId);
        if (!plugin) break;
        if ('active' in msg) this.plugins._state(msg.pluginId, msg.active);
        else {
          plugin.events.push(msg.data);
          plugin.emit('data', msg.data, msg.from);
        }
        break;
      }
      case 'muted':
        void this.self.disableAudio(true);
        this.self.emit('mediaPermissionUpdate', { kind: 'audio', allowUnmute: msg.allowUnmute });
        break;
      case 'kicked':
        this._end('kicked');
        break;
      case 'rejected':
        this._end('rejected');
        break;
      case 'ended':
        this._end('ended');
        break;
      case 'error':
        this.emit('error', Object.assign(new Error(msg.message), { code: msg.code }));
        break;
    }
  }

  _onClose() {
    for (const p of this._pending.values()) p.reject(new Error('the meeting connection closed'));
    this._pending.clear();
    if (this.self.roomState === 'joined' || this.self.roomState === 'waitlisted' || this.self.roomState === 'init') this._end('disconnected');
  }
}

export default class RealtimeKitClient {
  /**
   * Connects with a participant token. `baseURI`: the Outpost API origin (default: this page's).
   * `defaults`: `{audio, video}` — what to publish on join (both true by default).
   */
  static async init(options) {
    if (!options || typeof options.authToken !== 'string') throw new Error('init needs { authToken }');
    decodeToken(options.authToken);
    const origin = options.baseURI ? String(options.baseURI).replace(/\/+$/, '') : location.origin;
    const url = `${origin.replace(/^http/, 'ws')}/realtime/kit/socket?authToken=${encodeURIComponent(options.authToken)}`;
    const ws = new WebSocket(url);
    const hello = await new Promise((resolve, reject) => {
      const onMessage = (e) => {
        const msg = JSON.parse(e.data);
        if (msg.t !== 'hello') return;
        ws.removeEventListener('message', onMessage);
        resolve(msg);
      };
      ws.addEventListener('message', onMessage);
      ws.addEventListener('close', () => reject(new Error('the meeting refused the token or is unreachable')), { once: true });
    });
    return new Meeting(options, hello, ws);
  }
}

export { RealtimeKitClient, decodeToken };
