/**
 * What the media forwarder offers other areas: the engine (one instance per owner; the meeting
 * platform runs its own), its error type and the session description check. Areas import these
 * from here, never from engine.ts.
 */
export { Forwarder, SfuError, Session, checkSdp, CONNECT_WAIT_MS } from './engine.ts';
export type { ForwarderOptions, SessionDescription, TrackItem, TrackResult } from './engine.ts';
