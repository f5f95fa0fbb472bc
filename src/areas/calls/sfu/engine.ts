/**
 * The forwarder: one werift peer connection per session, published tracks keyed by
 * (session, trackName), pulled tracks fed from them. RTP is forwarded as received (no
 * transcoding): each subscriber's sender rewrites SSRC, payload type, sequence numbers and
 * timestamps for its own SRTP context and keeps a history for NACK retransmission. PLI and FIR
 * from subscribers become PLIs to the publisher (per simulcast layer). Simulcast: each subscriber
 * gets one layer, chosen and switched at keyframes as layers.ts describes. Video publishers get a
 * REMB from their subscribers' receiver reports (bandwidth.ts). Data channels are one-way fan-outs: a publisher's
 * `local` channel feeds every `remote` channel pulled from it.
 */
import { randomUUID } from 'node:crypto';
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtcpPayloadSpecificFeedback,
  RtcpRrPacket,
  RtcpSrPacket,
  RtpPacket,
  type RTCDtlsTransport,
  useAbsSendTime,
  ReceiverEstimatedMaxBitrate,
  useNACK,
  usePLI,
  useFIR,
  useREMB,
  useRepairedRtpStreamId,
  useSdesMid,
  useSdesRTPStreamId,
  type RTCDataChannel,
  type RTCRtpTransceiver,
  type RtcpPacket,
} from 'werift';
import { hexId } from '../../../core/ids.ts';
import { LossEstimator, publisherBudget } from './bandwidth.ts';
import { chooseLayer, OutputStream, vp8Fields, type LayerPrefs } from './layers.ts';

/** FMT of a Full Intra Request in a payload-specific feedback packet (RFC 5104). */
const FIR_FMT = 4;
const GATHER_TIMEOUT_MS = 3_000;
/** Operations wait this long for a peer connection to reach `connected` (platform figure). */
export const CONNECT_WAIT_MS = 5_000;
const KEYFRAME_MIN_INTERVAL_MS = 300;
/** Negotiated data channel ids handed out start here, clear of in-band ids browsers pick. */
const FIRST_CHANNEL_ID = 100;
const MAX_CHANNEL_ID = 1023;

export class SfuError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface SessionDescription {
  type: 'offer' | 'answer';
  sdp: string;
}

export interface ForwarderOptions {
  /** IPv4 address the peer connections gather candidates on (loopback by default). */
  address?: string;
  /** Silence after which a published track is collected (platform: 30 s). */
  trackIdleMs: number;
  /** How long operations wait for a peer connection to reach `connected` (platform: 5 s). */
  connectWaitMs?: number;
  log: (level: 'info' | 'warn' | 'debug', msg: string, fields?: Record<string, unknown>) => void;
}

interface Published {
  kind: 'audio' | 'video';
  trackName: string;
  mid: string;
  session: Session;
  transceiver: RTCRtpTransceiver;
  status: 'active' | 'inactive';
  /** Held back from every subscriber (a host muted the publisher); packets are still received. */
  paused: boolean;
  subscribers: Set<Pulled>;
  /** Publisher tracks (one per simulcast layer) already feeding subscribers. */
  attached: WeakSet<MediaStreamTrack>;
  lastPacketAt: number;
  /** Last keyframe request per layer (rid, or '' for a track without layers). */
  keyframeRequests: Map<string, number>;
  /** Simulcast layers: when each rid last carried a packet. */
  layerSeen: Map<string, number>;
  /** Simulcast layers: the SSRC of each rid (werift's per-rid tracks do not carry it). */
  layerSsrc: Map<string, number>;
  lastRembAt: number;
  /** The bit rate last told to the publisher (REMB). */
  lastRembBps: number;
}

interface Pulled {
  trackName: string;
  sessionId: string;
  mid: string;
  session: Session;
  transceiver: RTCRtpTransceiver;
  source?: Published;
  status: 'active' | 'inactive';
  /** Simulcast layer being forwarded to this subscriber (undefined: none yet, or no layers). */
  current?: string;
  prefs: LayerPrefs;
  /** This subscriber's numbering across layer switches. */
  out: OutputStream;
  /** Loss-based bandwidth estimate from this subscriber's receiver reports. */
  bwe: LossEstimator;
}

interface Channel {
  location: 'local' | 'remote';
  dataChannelName: string;
  id: number;
  sessionId?: string;
  dc: RTCDataChannel;
  status: 'active' | 'inactive';
  subscribers: Set<Channel>;
  source?: Channel;
}

export interface TrackItem {
  location: 'local' | 'remote';
  trackName?: string;
  mid?: string;
  sessionId?: string;
  kind?: string;
  bidirectionalMediaStream?: boolean;
  simulcast?: { preferredRid?: string; priorityOrdering?: string; ridNotAvailable?: string };
}

export type TrackResult = Record<string, unknown>;

export class Session {
  readonly id = hexId();
  pc?: RTCPeerConnection;
  readonly published = new Map<string, Published>();
  readonly pulled = new Map<string, Pulled>();
  readonly channels: Channel[] = [];
  nextChannelId = FIRST_CHANNEL_ID;
  closed = false;
  readonly createdAt = Date.now();
  /** Calls in the current one-second window, for the per-session rate limit. */
  window = { start: 0, calls: 0 };
  private queue: Promise<unknown> = Promise.resolve();

  constructor(readonly appId: string) {}

  /** Runs operations on this session one at a time (SDP state must not interleave). */
  serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }
}

const codecs = {
  audio: [new RTCRtpCodecParameters({ mimeType: 'audio/opus', clockRate: 48_000, channels: 2, rtcpFeedback: [useNACK()] })],
  video: [new RTCRtpCodecParameters({ mimeType: 'video/VP8', clockRate: 90_000, rtcpFeedback: [useNACK(), usePLI(), useFIR(), useREMB()] })],
};
const headerExtensions = {
  audio: [useSdesMid()],
  video: [useSdesMid(), useSdesRTPStreamId(), useRepairedRtpStreamId(), useAbsSendTime()],
};
/**
 * Video publishers are told the bandwidth they may use (REMB) once a second, and at once when it
 * drops: the ceiling until subscribers report, then what their receiver reports allow
 * (bandwidth.ts). A browser starts near 300 kbit/s and, without feedback, keeps its higher
 * simulcast layers off; the ceiling in its first seconds lets it start all layers at once.
 */
const REMB_INTERVAL_MS = 1_000;

/** A description must look like SDP before werift sees it. */
export function checkSdp(desc: { type?: unknown; sdp?: unknown } | undefined, want: 'offer' | 'answer' | 'any'): SessionDescription {
  if (!desc || typeof desc.sdp !== 'string' || !/^v=0\r?\n/.test(desc.sdp) || !/\r?\nm=/.test(desc.sdp)) {
    throw new SfuError(400, 'invalid_session_description', 'sessionDescription.sdp must be an SDP document (v=0 … with at least one m= line)');
  }
  if (desc.type !== 'offer' && desc.type !== 'answer') {
    throw new SfuError(400, 'invalid_session_description', "sessionDescription.type must be 'offer' or 'answer'");
  }
  if (want !== 'any' && desc.type !== want) {
    throw new SfuError(400, 'invalid_session_description', `sessionDescription.type must be '${want}' here, got '${desc.type}'`);
  }
  return { type: desc.type, sdp: desc.sdp };
}

export class Forwarder {
  private readonly apps = new Map<string, Map<string, Session>>();
  /** Sessions closed recently: their ids answer 410 instead of 404. */
  private readonly gone = new Set<string>();
  private sweepTimer: NodeJS.Timeout;

  private readonly connectWaitMs: number;

  constructor(private readonly opts: ForwarderOptions) {
    this.connectWaitMs = opts.connectWaitMs ?? CONNECT_WAIT_MS;
    // Sweep often enough that a short idle time (tests) is honoured within a fraction of it.
    this.sweepTimer = setInterval(() => this.sweep(), Math.max(100, Math.min(2_000, Math.floor(opts.trackIdleMs / 4))));
    this.sweepTimer.unref();
  }

  /**
   * Waits up to the connect wait for the session's peer connection to be `connected`; a session
   * that is still negotiating after it is 425 session_error (the platform's "not yet connected").
   */
  async waitConnected(s: Session, what: string): Promise<void> {
    const pc = s.pc;
    if (!pc) throw new SfuError(425, 'session_error', `session ${s.id} has no peer connection yet: ${what} needs one (negotiate first)`);
    if (pc.connectionState === 'connected') return;
    const ok = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => done(false), this.connectWaitMs);
      const sub = pc.connectionStateChange.subscribe((st) => {
        if (st === 'connected') done(true);
        else if (st === 'failed' || st === 'closed') done(false);
      });
      function done(v: boolean) {
        clearTimeout(timer);
        sub.unSubscribe();
        resolve(v);
      }
    });
    if (!ok) throw new SfuError(425, 'session_error', `session ${s.id} is not connected (${pc.connectionState}) after ${this.connectWaitMs} ms: ${what} needs a connected peer connection`);
  }

  get sessionCount(): number {
    let n = 0;
    for (const s of this.apps.values()) n += s.size;
    return n;
  }

  newSession(appId: string): Session {
    const s = new Session(appId);
    let sessions = this.apps.get(appId);
    if (!sessions) this.apps.set(appId, (sessions = new Map()));
    sessions.set(s.id, s);
    return s;
  }

  session(appId: string, sessionId: string): Session {
    const s = this.apps.get(appId)?.get(sessionId);
    if (s) return s;
    if (this.gone.has(`${appId}/${sessionId}`)) throw new SfuError(410, 'session_error', `session ${sessionId} is closed`);
    throw new SfuError(404, 'session_error', `session ${sessionId} does not exist in app ${appId}`);
  }

  // --- peer connection plumbing ----------------------------------------------------------------

  private ensurePc(s: Session): RTCPeerConnection {
    if (s.pc) return s.pc;
    const address = this.opts.address;
    const pc = new RTCPeerConnection({
      codecs,
      headerExtensions,
      iceLite: true,
      iceServers: [],
      iceUseIpv6: false,
      bundlePolicy: 'max-bundle',
      ...(address
        ? {
            iceInterfaceAddresses: { udp4: address },
            iceAdditionalHostAddresses: [address],
            iceFilterCandidatePair: (p) => p.localCandidate.host === address,
          }
        : {}),
    });
    const watched = new WeakSet<RTCDtlsTransport>();
    pc.onTrack.subscribe((track) => {
      const t = pc.getTransceivers().find((x) => x.receiver.tracks.includes(track));
      const pub = t && [...s.published.values()].find((p) => p.transceiver === t && p.status === 'active');
      if (pub) this.attach(pub);
    });
    pc.connectionStateChange.subscribe((state) => {
      this.opts.log('debug', 'sfu peer connection state', { session: s.id, state });
      if (state === 'connected') {
        for (const transport of pc.dtlsTransports) {
          if (watched.has(transport)) continue;
          watched.add(transport);
          this.watchRtcp(s, transport);
        }
        for (const p of s.pulled.values()) if (p.source) this.requestKeyframe(p.source);
      }
    });
    pc.onDataChannel.subscribe(() => undefined);
    s.pc = pc;
    return pc;
  }

  private async gathered(pc: RTCPeerConnection): Promise<void> {
    if (pc.iceGatheringState === 'complete') return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, GATHER_TIMEOUT_MS);
      const sub = pc.iceGatheringStateChange.subscribe((st) => st === 'complete' && done());
      function done() {
        clearTimeout(timer);
        sub.unSubscribe();
        resolve();
      }
    });
  }

  /**
   * Our description as sent: candidates only on the configured address, and no trickle option
   * (candidates are all in the description; the SFU does not trickle).
   */
  private localSdp(pc: RTCPeerConnection, type: 'offer' | 'answer'): SessionDescription {
    const sdp = pc.localDescription?.sdp;
    if (!sdp) throw new SfuError(500, 'internal_error', 'no local description after negotiation');
    const address = this.opts.address;
    const lines = sdp.split(/\r\n/).filter((line) => {
      if (line === 'a=ice-options:trickle') return false;
      if (address && line.startsWith('a=candidate:')) return line.split(' ')[4] === address;
      return true;
    });
    return { type, sdp: lines.join('\r\n') };
  }

  private async applyOffer(s: Session, offer: SessionDescription): Promise<RTCPeerConnection> {
    const pc = this.ensurePc(s);
    if (pc.signalingState === 'have-local-offer') {
      throw new SfuError(400, 'invalid_session_description', 'the SFU has an offer pending for this session: answer it with PUT renegotiate first');
    }
    try {
      await pc.setRemoteDescription(offer);
    } catch (err) {
      throw new SfuError(400, 'invalid_session_description', `the offer could not be applied: ${(err as Error).message}`);
    }
    noteRemoteDirections(pc);
    return pc;
  }

  private async answer(s: Session): Promise<SessionDescription> {
    const pc = s.pc!;
    const answer = await pc.createAnswer();
    // The SFU answers as the DTLS server: the client, which knows when its ICE checks succeed,
    // starts the handshake (a lite agent that starts it early can lose its first flight).
    await pc.setLocalDescription({ type: 'answer', sdp: answer.sdp.replace(/\r\na=setup:active/g, '\r\na=setup:passive') });
    await this.gathered(pc);
    return this.localSdp(pc, 'answer');
  }

  private async offer(s: Session): Promise<SessionDescription> {
    const pc = this.ensurePc(s);
    await pc.setLocalDescription(await pc.createOffer());
    await this.gathered(pc);
    return this.localSdp(pc, 'offer');
  }

  // --- operations ----------------------------------------------------------------------------

  /** `sessions/new` with an offer (data-channel-only clients): the answer. */
  async connect(s: Session, offer: SessionDescription): Promise<SessionDescription> {
    await this.applyOffer(s, offer);
    return this.answer(s);
  }

  async addTracks(
    s: Session,
    items: TrackItem[],
    offer: SessionDescription | undefined,
    autoDiscover: boolean,
  ): Promise<{ requiresImmediateRenegotiation: boolean; sessionDescription?: SessionDescription; tracks: TrackResult[] }> {
    const results: TrackResult[] = [];
    // Pulling from a publisher that is still connecting (a pull right after its push) waits for it.
    const waited = new Set<Session>();
    for (const item of items) {
      if (item.location !== 'remote' || !item.sessionId || !item.trackName) continue;
      const owner = this.apps.get(s.appId)?.get(item.sessionId);
      if (!owner || waited.has(owner) || owner.published.get(item.trackName)?.status !== 'active') continue;
      waited.add(owner);
      await this.waitConnected(owner, `pulling ${item.trackName} from it`);
    }
    let pc: RTCPeerConnection | undefined;
    if (offer) pc = await this.applyOffer(s, offer);
    const claimed = new Set([...s.published.values()].filter((p) => p.status === 'active').map((p) => p.mid));
    for (const p of s.pulled.values()) claimed.add(p.mid);
    let needOffer = false;

    for (const item of items) {
      if (item.location === 'local') {
        results.push(this.publish(s, item, pc, claimed));
      } else {
        const r = this.subscribe(s, item, pc, claimed);
        if (r.added && !offer) needOffer = true;
        results.push(r.result);
      }
    }
    if (offer && autoDiscover) {
      for (const t of pc!.getTransceivers()) {
        if (!t.mid || claimed.has(t.mid) || !/send/.test(remoteDirection(t))) continue;
        results.push(this.publish(s, { location: 'local', trackName: randomUUID(), mid: t.mid }, pc, claimed));
      }
    }
    if (offer) return { requiresImmediateRenegotiation: false, sessionDescription: await this.answer(s), tracks: results };
    if (!needOffer) return { requiresImmediateRenegotiation: false, tracks: results };
    const sessionDescription = await this.offer(s);
    // mids are assigned by createOffer: fill them in now.
    for (const r of results) {
      const pulled = r._pulled as Pulled | undefined;
      if (!pulled) continue;
      pulled.mid = pulled.transceiver.mid ?? '';
      s.pulled.set(pulled.mid, pulled);
      r.mid = pulled.mid;
      delete r._pulled;
    }
    return { requiresImmediateRenegotiation: true, sessionDescription, tracks: results };
  }

  private publish(s: Session, item: TrackItem, pc: RTCPeerConnection | undefined, claimed: Set<string>): TrackResult {
    const out: TrackResult = { location: 'local', trackName: item.trackName, ...(item.mid !== undefined ? { mid: item.mid } : {}) };
    if (!item.trackName) return { ...out, errorCode: 'invalid_params', errorDescription: 'a local track needs a trackName' };
    if (!pc) return { ...out, errorCode: 'invalid_session_description', errorDescription: 'publishing a local track needs sessionDescription: an offer with its m-line' };
    const existing = s.published.get(item.trackName);
    if (existing?.status === 'active') return { ...out, errorCode: 'repeated_local_track_error', errorDescription: `track ${item.trackName} is already published in this session` };
    const receiving = pc.getTransceivers().filter((t) => t.mid && /send/.test(remoteDirection(t)));
    let t: RTCRtpTransceiver | undefined;
    if (item.mid !== undefined) {
      const mid = item.mid.startsWith('#') ? s.published.get(item.mid.slice(1))?.mid : item.mid;
      t = receiving.find((x) => x.mid === mid);
      if (!t) return { ...out, errorCode: 'not_found_track_error', errorDescription: `the offer has no sending m-line with mid ${item.mid}` };
    } else {
      t = receiving.find((x) => !claimed.has(x.mid!));
      if (!t) return { ...out, errorCode: 'empty_track_error', errorDescription: 'the offer has no sending m-line left for this track' };
    }
    claimed.add(t.mid!);
    const pub: Published = {
      kind: t.kind === 'audio' ? 'audio' : 'video',
      trackName: item.trackName,
      mid: t.mid!,
      session: s,
      transceiver: t,
      status: 'active',
      paused: false,
      subscribers: new Set(),
      attached: new WeakSet(),
      lastPacketAt: Date.now(),
      keyframeRequests: new Map(),
      layerSeen: new Map(),
      layerSsrc: new Map(),
      lastRembAt: 0,
      lastRembBps: 0,
    };
    s.published.set(item.trackName, pub);
    this.attach(pub);
    return { location: 'local', trackName: item.trackName, mid: t.mid };
  }

  private subscribe(
    s: Session,
    item: TrackItem,
    pc: RTCPeerConnection | undefined,
    claimed: Set<string>,
  ): { added: boolean; result: TrackResult } {
    const out: TrackResult = { location: 'remote', sessionId: item.sessionId, trackName: item.trackName };
    if (!item.sessionId || !item.trackName) {
      return { added: false, result: { ...out, errorCode: 'invalid_params', errorDescription: 'a remote track needs sessionId and trackName' } };
    }
    const owner = this.apps.get(s.appId)?.get(item.sessionId);
    const source = owner?.published.get(item.trackName);
    if (!source || source.status !== 'active') {
      return { added: false, result: { ...out, errorCode: 'not_found_track_error', errorDescription: `session ${item.sessionId} publishes no active track named ${item.trackName}` } };
    }
    let t: RTCRtpTransceiver;
    if (pc && item.mid !== undefined) {
      // The client offered a receiving m-line for this track.
      const found = pc.getTransceivers().find((x) => x.mid === item.mid && /recv/.test(remoteDirection(x)));
      if (!found || claimed.has(item.mid)) {
        return { added: false, result: { ...out, errorCode: 'not_found_track_error', errorDescription: `the offer has no free receiving m-line with mid ${item.mid}` } };
      }
      t = found;
      t.setDirection(item.bidirectionalMediaStream ? 'sendrecv' : 'sendonly');
      claimed.add(item.mid);
    } else if (pc) {
      return { added: false, result: { ...out, errorCode: 'invalid_params', errorDescription: 'with an offer, a remote track must name the mid of its receiving m-line' } };
    } else {
      const conn = this.ensurePc(s);
      t = conn.addTransceiver(source.kind, { direction: item.bidirectionalMediaStream ? 'sendrecv' : 'sendonly' });
    }
    const pulled: Pulled = {
      trackName: item.trackName,
      sessionId: item.sessionId,
      mid: t.mid ?? '',
      session: s,
      transceiver: t,
      source,
      status: 'active',
      prefs: layerPrefs(item.simulcast),
      out: new OutputStream(source.kind === 'audio' ? 48_000 : 90_000),
      bwe: new LossEstimator(Date.now()),
    };
    this.link(pulled, source);
    if (t.mid) s.pulled.set(t.mid, pulled);
    const result: TrackResult = { location: 'remote', sessionId: item.sessionId, trackName: item.trackName, mid: t.mid };
    if (!t.mid) result._pulled = pulled;
    return { added: true, result };
  }

  private link(pulled: Pulled, source: Published): void {
    source.subscribers.add(pulled);
    pulled.source = source;
    const sender = pulled.transceiver.sender;
    sender.onPictureLossIndication.subscribe(() => pulled.source && this.requestKeyframe(pulled.source, pulled.current));
    this.requestKeyframe(source, chooseLayer(source.layerSeen, pulled.prefs, Date.now()));
  }

  /** Subscribes the forwarder to every layer of a published track (idempotent). */
  private attach(pub: Published): void {
    for (const track of pub.transceiver.receiver.tracks) {
      if (pub.attached.has(track)) continue;
      pub.attached.add(track);
      track.onReceiveRtp.subscribe((rtp: RtpPacket) => this.forward(pub, track, rtp));
    }
  }

  /**
   * One packet of a published track to its subscribers. With simulcast, each subscriber gets the
   * layer `chooseLayer` names; a change of layer waits for a keyframe of the new one (asked for
   * with a PLI) while the old layer keeps flowing, so the picture never freezes on a switch.
   */
  private forward(pub: Published, track: MediaStreamTrack, rtp: RtpPacket): void {
    const now = Date.now();
    pub.lastPacketAt = now;
    const rid = track.rid;
    if (rid !== undefined) {
      pub.layerSeen.set(rid, now);
      if (pub.layerSsrc.get(rid) !== rtp.header.ssrc) {
        pub.layerSsrc.set(rid, rtp.header.ssrc);
        pub.lastRembAt = 0;
      }
    }
    if (pub.kind === 'video' && now - pub.lastRembAt >= REMB_INTERVAL_MS) {
      pub.lastRembAt = now;
      pub.lastRembBps = this.budget(pub);
      this.sendRemb(pub, rtp.header.ssrc, pub.lastRembBps);
    }
    if (pub.status !== 'active' || pub.paused || pub.subscribers.size === 0) return;
    // Extension ids are per peer connection: the subscriber's sender writes its own (mid,
    // abs-send-time, transport-cc); the publisher's ids would mean other things on its side.
    rtp.header.extensions = [];
    const buf = rtp.serialize();
    const vp8 = pub.kind === 'video' ? vp8Fields(rtp.payload) : undefined;
    for (const sub of pub.subscribers) {
      if (sub.status !== 'active') continue;
      if (rid !== undefined) {
        const target = chooseLayer(pub.layerSeen, sub.prefs, now);
        if (target === undefined) continue;
        if (rid !== target) {
          // Keep the current layer flowing until the target's keyframe arrives.
          if (rid !== sub.current) continue;
          this.requestKeyframe(pub, target);
        } else if (rid !== sub.current) {
          if (!vp8?.keyframe) {
            this.requestKeyframe(pub, target);
            continue;
          }
          this.opts.log('debug', 'sfu simulcast layer switch', { session: sub.session.id, mid: sub.mid, from: sub.current, to: rid });
          sub.current = rid;
        }
      }
      const pkt = RtpPacket.deSerialize(buf);
      sub.out.rewrite(pkt, vp8, now);
      sub.bwe.sent(buf.length);
      sub.transceiver.sender.sendRtp(pkt).catch(() => undefined);
    }
  }

  /**
   * Stops (or resumes) forwarding a published track to all its subscribers while the publisher
   * keeps sending — how a host's mute is enforced, whatever the publishing client does. On resume
   * each subscriber's numbering continues from its last packet (the pause is not seen as loss)
   * and a video track is asked for a keyframe. False when the session publishes no such track.
   */
  pauseTrack(s: Session, trackName: string, paused: boolean): boolean {
    const pub = s.published.get(trackName);
    if (!pub || pub.status !== 'active') return false;
    if (pub.paused === paused) return true;
    pub.paused = paused;
    if (!paused) {
      for (const sub of pub.subscribers) sub.out.restart();
      this.requestKeyframe(pub);
    }
    this.opts.log('debug', paused ? 'sfu track paused' : 'sfu track resumed', { session: s.id, trackName });
    return true;
  }

  /** Whether a published track is held back by `pauseTrack`. */
  isPaused(s: Session, trackName: string): boolean {
    return s.published.get(trackName)?.paused === true;
  }

  /** What a video publisher may send, from its active subscribers' estimates. */
  private budget(pub: Published): number {
    const active = [...pub.subscribers].filter((p) => p.status === 'active').map((p) => p.bwe);
    return publisherBudget(active, pub.layerSsrc.size > 1);
  }

  /**
   * RTCP a session's peer sends, read at the transport: receiver reports (also those inside
   * sender reports, which werift hands to no sender) feed the estimate of the pulled track they
   * describe; a FIR names its stream in its body, not in the header werift routes by, so it is
   * matched here and becomes a keyframe request (a PLI) to the publisher.
   */
  private watchRtcp(s: Session, transport: RTCDtlsTransport): void {
    const pulledBySsrc = (ssrc: number) => [...s.pulled.values()].find((p) => p.transceiver.sender.ssrc === ssrc && p.status === 'active');
    transport.onRtcp.subscribe((pkt: RtcpPacket) => {
      if (pkt.type === RtcpRrPacket.type || pkt.type === RtcpSrPacket.type) {
        for (const report of (pkt as RtcpRrPacket).reports) {
          const pulled = pulledBySsrc(report.ssrc);
          if (!pulled?.source || pulled.source.kind !== 'video') continue;
          pulled.bwe.report(report.fractionLost, Date.now());
          const pub = pulled.source;
          // A lower figure is passed on with the next packet instead of within the second.
          if (this.budget(pub) < pub.lastRembBps) pub.lastRembAt = 0;
        }
      } else if (pkt.type === RtcpPayloadSpecificFeedback.type && (pkt as RtcpPayloadSpecificFeedback).feedback?.count === FIR_FMT) {
        for (const entry of ((pkt as RtcpPayloadSpecificFeedback).feedback as unknown as { fir?: { ssrc: number }[] }).fir ?? []) {
          const pulled = pulledBySsrc(entry.ssrc);
          if (pulled?.source) this.requestKeyframe(pulled.source, pulled.current);
        }
      }
    });
  }

  private sendRemb(pub: Published, ssrc: number, bps: number): void {
    const receiver = pub.transceiver.receiver;
    const ssrcs = new Set<number>([ssrc, ...pub.layerSsrc.values()]);
    let exp = 0;
    while (bps / 2 ** exp >= 2 ** 18) exp++;
    const feedback = new ReceiverEstimatedMaxBitrate({
      senderSsrc: receiver.rtcpSsrc,
      mediaSsrc: 0,
      ssrcNum: ssrcs.size,
      ssrcFeedbacks: [...ssrcs],
      brExp: exp,
      brMantissa: Math.floor(bps / 2 ** exp),
    });
    receiver.dtlsTransport.sendRtcp([new RtcpPayloadSpecificFeedback({ feedback })]).catch(() => undefined);
  }

  /** Asks the publisher for a keyframe of one layer (all layers when `rid` is undefined), rate-limited per layer. */
  requestKeyframe(pub: Published, rid?: string): void {
    if (pub.kind !== 'video') return;
    const now = Date.now();
    const key = rid ?? '';
    if (now - (pub.keyframeRequests.get(key) ?? 0) < KEYFRAME_MIN_INTERVAL_MS) return;
    pub.keyframeRequests.set(key, now);
    const receiver = pub.transceiver.receiver;
    const ssrcs = new Set<number>();
    if (rid !== undefined && pub.layerSsrc.has(rid)) ssrcs.add(pub.layerSsrc.get(rid)!);
    else if (rid === undefined) {
      for (const ssrc of pub.layerSsrc.values()) ssrcs.add(ssrc);
      for (const track of receiver.tracks) if (track.ssrc !== undefined) ssrcs.add(track.ssrc);
    }
    for (const ssrc of ssrcs) receiver.sendRtcpPLI(ssrc).catch(() => undefined);
  }

  async renegotiate(s: Session, desc: SessionDescription): Promise<{ sessionDescription?: SessionDescription }> {
    if (desc.type === 'offer') {
      await this.applyOffer(s, desc);
      return { sessionDescription: await this.answer(s) };
    }
    const pc = s.pc;
    if (!pc || pc.signalingState !== 'have-local-offer') {
      throw new SfuError(400, 'invalid_session_description', 'there is no SFU offer to answer in this session: renegotiate takes an answer only after a response with requiresImmediateRenegotiation');
    }
    try {
      await pc.setRemoteDescription(desc);
    } catch (err) {
      throw new SfuError(400, 'invalid_session_description', `the answer could not be applied: ${(err as Error).message}`);
    }
    noteRemoteDirections(pc);
    for (const p of s.pulled.values()) if (p.source) setTimeout(() => p.source && this.requestKeyframe(p.source), 500).unref();
    return {};
  }

  async closeTracks(
    s: Session,
    items: Array<{ mid?: string; trackName?: string }>,
    offer: SessionDescription | undefined,
    force: boolean,
  ): Promise<{ requiresImmediateRenegotiation: boolean; sessionDescription?: SessionDescription; tracks: TrackResult[] }> {
    const results: TrackResult[] = [];
    const closed: RTCRtpTransceiver[] = [];
    for (const item of items) {
      const ref: TrackResult = item.mid !== undefined ? { mid: item.mid } : { trackName: item.trackName };
      const pub = [...s.published.values()].find((p) => p.status === 'active' && (item.mid !== undefined ? p.mid === item.mid : p.trackName === item.trackName));
      const pulled = pub ? undefined : [...s.pulled.values()].find((p) => p.status === 'active' && (item.mid !== undefined ? p.mid === item.mid : p.trackName === item.trackName));
      if (!pub && !pulled) {
        results.push({ ...ref, errorCode: 'close_track_error', errorDescription: "Track doesn't exist or was already closed" });
        continue;
      }
      if (pub) {
        this.unpublish(pub);
        closed.push(pub.transceiver);
        results.push({ mid: pub.mid, trackName: pub.trackName });
      } else if (pulled) {
        this.unlink(pulled);
        closed.push(pulled.transceiver);
        results.push({ mid: pulled.mid, trackName: pulled.trackName });
      }
    }
    if (offer) {
      await this.applyOffer(s, offer);
      return { requiresImmediateRenegotiation: false, sessionDescription: await this.answer(s), tracks: results };
    }
    if (force || closed.length === 0 || !s.pc) return { requiresImmediateRenegotiation: false, tracks: results };
    for (const t of closed) t.setDirection('inactive');
    return { requiresImmediateRenegotiation: true, sessionDescription: await this.offer(s), tracks: results };
  }

  private unpublish(pub: Published): void {
    pub.status = 'inactive';
    for (const sub of pub.subscribers) sub.source = undefined;
    pub.subscribers.clear();
  }

  private unlink(pulled: Pulled): void {
    pulled.status = 'inactive';
    pulled.source?.subscribers.delete(pulled);
    pulled.source = undefined;
  }

  /**
   * Simulcast: changes the layer preferences of pulled tracks. A track is named by its receiving
   * `mid`; when the item also names `sessionId` and `trackName` (as the platform's own simulcast
   * example does, with the publisher's mid), those pick the pulled track.
   */
  updateTracks(s: Session, items: TrackItem[]): TrackResult[] {
    return items.map((item) => {
      const active = [...s.pulled.values()].filter((p) => p.status === 'active');
      const pulled =
        (item.sessionId && item.trackName ? active.find((p) => p.sessionId === item.sessionId && p.trackName === item.trackName) : undefined) ??
        (item.mid !== undefined ? active.find((p) => p.mid === item.mid) : undefined);
      if (!pulled || item.location !== 'remote') {
        return { ...item, errorCode: 'update_track_error', errorDescription: `no active pulled track with mid ${item.mid ?? '(none)'}${item.trackName ? ` or trackName ${item.trackName}` : ''} in this session` };
      }
      if (item.simulcast) {
        pulled.prefs = layerPrefs(item.simulcast);
        // The forwarding loop switches at the new layer's next keyframe: ask for it now.
        if (pulled.source) this.requestKeyframe(pulled.source, chooseLayer(pulled.source.layerSeen, pulled.prefs, Date.now()));
      }
      return {
        location: 'remote',
        mid: pulled.mid,
        sessionId: pulled.sessionId,
        trackName: pulled.trackName,
        ...(pulled.prefs.preferredRid !== undefined ? { simulcast: { preferredRid: pulled.prefs.preferredRid } } : {}),
      };
    });
  }

  state(s: Session): { sessionId: string; tracks: TrackResult[]; dataChannels: TrackResult[] } {
    const tracks: TrackResult[] = [
      ...[...s.published.values()].map((p) => ({ location: 'local', mid: p.mid, trackName: p.trackName, status: p.status })),
      ...[...s.pulled.values()].map((p) => ({ location: 'remote', mid: p.mid, sessionId: p.sessionId, trackName: p.trackName, status: p.status })),
    ];
    const dataChannels = s.channels.map((c) => ({
      location: c.location,
      ...(c.sessionId ? { sessionId: c.sessionId } : {}),
      dataChannelName: c.dataChannelName,
      id: c.id,
      status: c.status === 'inactive' ? 'inactive' : c.dc.readyState === 'open' ? 'active' : 'initializing',
    }));
    return { sessionId: s.id, tracks, dataChannels };
  }

  // --- data channels ---------------------------------------------------------------------------

  /** Opens the session's data channel transport: answer a client offer, or offer one. */
  async establish(s: Session, offer: SessionDescription | undefined): Promise<{ requiresImmediateRenegotiation: boolean; sessionDescription: SessionDescription }> {
    if (offer) return { requiresImmediateRenegotiation: false, sessionDescription: await this.connect(s, offer) };
    const pc = this.ensurePc(s);
    if (!pc.sctpTransport) pc.createDataChannel('sfu-transport', { negotiated: true, id: MAX_CHANNEL_ID });
    return { requiresImmediateRenegotiation: true, sessionDescription: await this.offer(s) };
  }

  /**
   * `datachannels/new` as the media host runs it: channels open over DTLS, and a client that saw
   * its ICE connect may call before the handshake ended, so this waits for `connected` first.
   */
  async openDataChannels(
    s: Session,
    items: Array<{ location: 'local' | 'remote'; dataChannelName: string; sessionId?: string }>,
  ): Promise<TrackResult[]> {
    if (s.pc?.sctpTransport) await this.waitConnected(s, 'opening data channels');
    return this.newDataChannels(s, items);
  }

  newDataChannels(
    s: Session,
    items: Array<{ location: 'local' | 'remote'; dataChannelName: string; sessionId?: string }>,
  ): TrackResult[] {
    const pc = s.pc;
    if (!pc?.sctpTransport) {
      throw new SfuError(400, 'session_error', 'this session has no data channel transport yet: create it with sessions/new {sessionDescription: offer} (the offer carrying an application m-line) or datachannels/establish');
    }
    return items.map((item) => {
      const ref: TrackResult = { location: item.location, dataChannelName: item.dataChannelName, ...(item.sessionId ? { sessionId: item.sessionId } : {}) };
      if (s.nextChannelId >= MAX_CHANNEL_ID) return { ...ref, errorCode: 'invalid_params', errorDescription: 'no data channel ids left in this session' };
      let source: Channel | undefined;
      if (item.location === 'local') {
        if (s.channels.some((c) => c.location === 'local' && c.status === 'active' && c.dataChannelName === item.dataChannelName)) {
          return { ...ref, errorCode: 'repeated_local_track_error', errorDescription: `data channel ${item.dataChannelName} is already published in this session` };
        }
      } else {
        const owner = item.sessionId ? this.apps.get(s.appId)?.get(item.sessionId) : undefined;
        source = owner?.channels.find((c) => c.location === 'local' && c.status === 'active' && c.dataChannelName === item.dataChannelName);
        if (!source) return { ...ref, errorCode: 'not_found_track_error', errorDescription: `session ${item.sessionId ?? '(none)'} publishes no data channel named ${item.dataChannelName}` };
      }
      const id = s.nextChannelId++;
      const dc = pc.createDataChannel(item.dataChannelName, { negotiated: true, id });
      const ch: Channel = { location: item.location, dataChannelName: item.dataChannelName, id, sessionId: item.sessionId, dc, status: 'active', subscribers: new Set(), source };
      if (source) source.subscribers.add(ch);
      else {
        dc.onMessage.subscribe((data) => {
          for (const sub of ch.subscribers) if (sub.status === 'active' && sub.dc.readyState === 'open') sub.dc.send(data);
        });
      }
      s.channels.push(ch);
      return { ...ref, id };
    });
  }

  closeDataChannels(s: Session, items: Array<{ id?: number; dataChannelName?: string }>): TrackResult[] {
    return items.map((item) => {
      const ch = s.channels.find((c) => c.status === 'active' && (item.id !== undefined ? c.id === item.id : c.dataChannelName === item.dataChannelName));
      if (!ch) return { ...item, errorCode: 'close_track_error', errorDescription: "Data channel doesn't exist or was already closed" };
      ch.status = 'inactive';
      ch.source?.subscribers.delete(ch);
      for (const sub of ch.subscribers) sub.source = undefined;
      ch.subscribers.clear();
      try {
        ch.dc.close();
      } catch {
        // already closed by the peer
      }
      return { location: ch.location, dataChannelName: ch.dataChannelName, id: ch.id };
    });
  }

  // --- lifecycle -------------------------------------------------------------------------------

  async closeSession(s: Session): Promise<void> {
    if (s.closed) return;
    s.closed = true;
    for (const p of s.published.values()) this.unpublish(p);
    for (const p of s.pulled.values()) this.unlink(p);
    for (const c of s.channels) if (c.status === 'active') this.closeDataChannels(s, [{ id: c.id }]);
    this.apps.get(s.appId)?.delete(s.id);
    this.gone.add(`${s.appId}/${s.id}`);
    await s.pc?.close().catch(() => undefined);
  }

  async closeApp(appId: string): Promise<void> {
    for (const s of [...(this.apps.get(appId)?.values() ?? [])]) await this.closeSession(s);
    this.apps.delete(appId);
  }

  async close(): Promise<void> {
    clearInterval(this.sweepTimer);
    for (const appId of [...this.apps.keys()]) await this.closeApp(appId);
  }

  /** Collects silent tracks and dead or never-connected sessions. */
  private sweep(): void {
    const now = Date.now();
    for (const sessions of this.apps.values()) {
      for (const s of sessions.values()) {
        const state = s.pc?.connectionState;
        if (state === 'failed' || state === 'closed' || (!s.pc && now - s.createdAt > 10 * 60_000)) {
          this.opts.log('info', 'sfu session collected', { session: s.id, state: state ?? 'never negotiated' });
          void this.closeSession(s);
          continue;
        }
        if (state !== 'connected') continue;
        for (const p of s.published.values()) {
          if (p.status === 'active' && now - p.lastPacketAt > this.opts.trackIdleMs) {
            this.opts.log('info', 'sfu track collected after silence', { session: s.id, trackName: p.trackName });
            this.unpublish(p);
          }
        }
      }
    }
  }
}

/** The direction the remote side declared for this transceiver's m-line ("sendonly": we receive). */
function remoteDirection(t: RTCRtpTransceiver): string {
  return remoteDirections.get(t) ?? 'inactive';
}

const remoteDirections = new WeakMap<RTCRtpTransceiver, string>();

/** Records, per transceiver, the direction attribute of its m-line in the applied remote description. */
function noteRemoteDirections(pc: RTCPeerConnection): void {
  const sdp = pc.remoteDescription?.sdp ?? '';
  const byMid = new Map<string, string>();
  for (const section of sdp.split(/\r?\nm=/).slice(1)) {
    const mid = /\na=mid:(\S+)/.exec(section)?.[1];
    const dir = /\na=(sendrecv|sendonly|recvonly|inactive)\b/.exec(section)?.[1] ?? 'sendrecv';
    if (mid) byMid.set(mid, /^\S+ 0 /.test(section) ? 'inactive' : dir);
  }
  for (const t of pc.getTransceivers()) if (t.mid && byMid.has(t.mid)) remoteDirections.set(t, byMid.get(t.mid)!);
}

function layerPrefs(sim: TrackItem['simulcast']): LayerPrefs {
  return { preferredRid: sim?.preferredRid, ridNotAvailable: sim?.ridNotAvailable === 'none' ? 'none' : 'asciibetical' };
}
