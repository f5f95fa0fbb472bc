/** Types of Outpost's meeting client (`/realtime/kit/sdk.js`): the spec's client-side meeting object. */

export type Listener = (...args: any[]) => void;

export interface Emitter<E extends string = string> {
  on(event: E, fn: Listener): this;
  addListener(event: E, fn: Listener): this;
  once(event: E, fn: Listener): this;
  off(event: E, fn: Listener): this;
  removeListener(event: E, fn: Listener): this;
  removeAllListeners(event?: E): this;
}

export type Produce = 'ALLOWED' | 'NOT_ALLOWED' | 'CAN_REQUEST';

export interface PresetPermissions {
  accept_waiting_requests?: boolean;
  kick_participant?: boolean;
  disable_participant_audio?: boolean;
  pin_participant?: boolean;
  waiting_room_type?: 'SKIP' | 'ON_PRIVILEGED_USER_ENTRY' | 'SKIP_ON_ACCEPT';
  media?: { audio?: { can_produce?: Produce }; video?: { can_produce?: Produce }; screenshare?: { can_produce?: Produce } };
  chat?: { public?: { can_send?: boolean; text?: boolean; files?: boolean } };
  polls?: { can_create?: boolean; can_vote?: boolean; can_view?: boolean };
  plugins?: { can_start?: boolean; can_close?: boolean };
  [k: string]: unknown;
}

export interface ParticipantFields {
  /** Peer id: changes on every join. */
  id: string;
  /** Participant id: the same across joins. */
  userId: string;
  name: string;
  picture: string | null;
  customParticipantId: string;
  presetName: string;
  isHost: boolean;
  audioEnabled: boolean;
  videoEnabled: boolean;
  screenShareEnabled: boolean;
  audioTrack: MediaStreamTrack | undefined;
  videoTrack: MediaStreamTrack | undefined;
  screenShareTracks: { audio: MediaStreamTrack | undefined; video: MediaStreamTrack | undefined };
}

export type ParticipantEvent = 'audioUpdate' | 'videoUpdate' | 'screenShareUpdate' | 'pinned' | 'unpinned';

export interface Participant extends ParticipantFields, Emitter<ParticipantEvent> {
  isPinned: boolean;
  pin(): void;
  unpin(): void;
}

export type RoomState = 'init' | 'waitlisted' | 'joined' | 'left' | 'kicked' | 'rejected' | 'ended' | 'disconnected';

export type SelfEvent =
  | 'roomJoined'
  | 'roomLeft'
  | 'waitlisted'
  | 'audioUpdate'
  | 'videoUpdate'
  | 'screenShareUpdate'
  | 'deviceUpdate'
  | 'deviceListUpdate'
  | 'mediaPermissionUpdate';

export interface Self extends ParticipantFields, Emitter<SelfEvent> {
  roomJoined: boolean;
  roomState: RoomState;
  permissions: PresetPermissions;
  enableAudio(): Promise<void>;
  disableAudio(): Promise<void>;
  enableVideo(): Promise<void>;
  disableVideo(): Promise<void>;
  enableScreenShare(): Promise<void>;
  disableScreenShare(): Promise<void>;
  /** Before join() only. */
  setName(name: string): void;
  setDevice(device: MediaDeviceInfo): Promise<void>;
  getAllDevices(): Promise<MediaDeviceInfo[]>;
  getAudioDevices(): Promise<MediaDeviceInfo[]>;
  getVideoDevices(): Promise<MediaDeviceInfo[]>;
  getSpeakerDevices(): Promise<MediaDeviceInfo[]>;
  getCurrentDevices(): { audio?: MediaDeviceInfo; video?: MediaDeviceInfo; speaker?: MediaDeviceInfo };
}

export type MapEvent = 'participantJoined' | 'participantLeft' | 'participantUpdate' | 'audioUpdate' | 'videoUpdate' | 'screenShareUpdate' | 'participantPinned' | 'participantUnpinned';

export interface ParticipantMap<T = Participant> extends Emitter<MapEvent>, Iterable<T> {
  get(id: string): T | undefined;
  has(id: string): boolean;
  toArray(): T[];
  size(): number;
}

export interface Participants {
  joined: ParticipantMap;
  active: ParticipantMap;
  waitlisted: ParticipantMap;
  pinned: ParticipantMap;
  acceptWaitingRoomRequest(peerId: string): Promise<unknown>;
  rejectWaitingRoomRequest(peerId: string): Promise<unknown>;
  acceptAllWaitingRoomRequest(): Promise<unknown>;
}

export interface Meta {
  meetingId: string;
  meetingTitle: string;
  meetingStartedTimestamp: Date | undefined;
  sessionId: string | undefined;
}

export interface ChatMessage {
  id: string;
  type: 'text' | 'image';
  message?: string;
  /** Image messages: a data URL. */
  link?: string;
  userId: string;
  peerId: string;
  displayName: string;
  time: string;
}

export interface Chat extends Emitter<'chatUpdate'> {
  messages: ChatMessage[];
  sendTextMessage(text: string): Promise<ChatMessage>;
  sendImageMessage(file: Blob): Promise<ChatMessage>;
}

export interface Poll {
  id: string;
  question: string;
  anonymous: boolean;
  hideVotes: boolean;
  createdBy: string;
  /** userIds that have voted. */
  voted: string[];
  options: { text: string; count: number; votes: { id: string; name: string }[] }[];
}

export interface Polls extends Emitter<'pollsUpdate'> {
  items: Poll[];
  create(question: string, options: string[], anonymous?: boolean, hideVotes?: boolean): Promise<Poll>;
  vote(pollId: string, optionIndex: number): Promise<Poll>;
}

export interface Plugin extends Emitter<'enabled' | 'closed' | 'data'> {
  id: string;
  name: string;
  description: string;
  active: boolean;
  /** Data shared so far (the whiteboard: its strokes). */
  events: unknown[];
  activate(): Promise<unknown>;
  deactivate(): Promise<unknown>;
  sendData(data: unknown): Promise<unknown>;
}

export interface Plugins extends Emitter<'pluginActivated' | 'pluginDeactivated'> {
  all: ParticipantMap<Plugin>;
  active: ParticipantMap<Plugin>;
  activate(pluginId: string): Promise<unknown>;
  deactivate(pluginId?: string): Promise<unknown>;
}

export interface Meeting extends Emitter<'error'> {
  self: Self;
  participants: Participants;
  meta: Meta;
  chat: Chat;
  polls: Polls;
  plugins: Plugins;
  ai: AI;
  join(): Promise<void>;
  leave(): Promise<void>;
}

export interface InitOptions {
  authToken: string;
  /** Outpost's API origin; default: the page's origin. */
  baseURI?: string;
  defaults?: { audio?: boolean; video?: boolean };
  /** Extra RTCPeerConnection configuration (ICE servers, relay policy). */
  rtcConfig?: RTCConfiguration;
  statsIntervalMs?: number;
}

export default class RealtimeKitClient {
  static init(options: InitOptions): Promise<Meeting>;
}
export { RealtimeKitClient };
export function decodeToken(token: string): { meetingId: string; orgId: string; participantId: string; [k: string]: unknown };

/** One recognised utterance of a participant (final; partial results are not produced). */
export interface Transcript {
  id: string;
  peerId: string;
  userId: string;
  customParticipantId: string;
  name: string;
  transcript: string;
  isPartialTranscript: false;
  /** ISO 8601: when the utterance ended. */
  date: string;
  startTime: string;
  endTime: string;
}

/** `meeting.ai`: live transcripts, filled when the speaker's preset enables transcription. */
export interface AI extends Emitter<'transcript'> {
  transcripts: Transcript[];
}
