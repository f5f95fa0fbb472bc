/**
 * Presets: what a participant may do in a meeting. Every app starts with six defaults (group call
 * host and participant, webinar presenter and viewer, livestream host and viewer); callers may add
 * their own. A preset body is validated for the parts the join path and the client SDK honour
 * (waiting room, who admits, kick/mute rights, what media may be produced, chat, polls, plugins);
 * other fields the official client sends (ui design tokens…) are kept as given.
 */
import { z } from 'zod';

const Produce = z.enum(['ALLOWED', 'NOT_ALLOWED', 'CAN_REQUEST']);

/** The preset of the recorder's page in a meeting (recordings, meeting livestreams): a hidden participant. */
export const RECORDER_PRESET = 'outpost_recorder';

export const PermissionsSchema = z
  .object({
    accept_waiting_requests: z.boolean().optional(),
    kick_participant: z.boolean().optional(),
    disable_participant_audio: z.boolean().optional(),
    disable_participant_video: z.boolean().optional(),
    disable_participant_screensharing: z.boolean().optional(),
    pin_participant: z.boolean().optional(),
    can_edit_display_name: z.boolean().optional(),
    show_participant_list: z.boolean().optional(),
    hidden_participant: z.boolean().optional(),
    waiting_room_type: z.enum(['SKIP', 'ON_PRIVILEGED_USER_ENTRY', 'SKIP_ON_ACCEPT']).optional(),
    media: z
      .object({
        audio: z.object({ can_produce: Produce }).partial().optional(),
        video: z.object({ can_produce: Produce }).partial().optional(),
        screenshare: z.object({ can_produce: Produce }).partial().optional(),
      })
      .passthrough()
      .optional(),
    chat: z
      .object({
        public: z.object({ can_send: z.boolean(), text: z.boolean(), files: z.boolean() }).partial().optional(),
        private: z.object({ can_send: z.boolean(), can_receive: z.boolean(), text: z.boolean(), files: z.boolean() }).partial().optional(),
      })
      .passthrough()
      .optional(),
    polls: z.object({ can_create: z.boolean(), can_vote: z.boolean(), can_view: z.boolean() }).partial().optional(),
    plugins: z.object({ can_start: z.boolean(), can_close: z.boolean(), can_edit_config: z.boolean(), config: z.record(z.string(), z.unknown()) }).partial().optional(),
  })
  .passthrough();

export const ConfigSchema = z
  .object({
    view_type: z.enum(['GROUP_CALL', 'WEBINAR', 'AUDIO_ROOM', 'LIVESTREAM']).optional(),
    max_screenshare_count: z.number().int().min(0).max(100).optional(),
    max_video_streams: z.object({ desktop: z.number().int().min(0).max(100), mobile: z.number().int().min(0).max(100) }).partial().optional(),
    media: z.record(z.string(), z.unknown()).optional(),
    livestream_viewer_qualities: z.array(z.number().int()).nullable().optional(),
  })
  .passthrough();

export const PresetBody = z.object({
  name: z.string().min(1).max(255),
  config: ConfigSchema.optional(),
  permissions: PermissionsSchema.optional(),
  ui: z.record(z.string(), z.unknown()).optional(),
});

export type Permissions = z.output<typeof PermissionsSchema>;
export interface Preset {
  name: string;
  config: z.output<typeof ConfigSchema>;
  permissions: Permissions;
  ui: Record<string, unknown>;
}

const UI = {
  design_tokens: {
    border_radius: 'rounded',
    border_width: 'thin',
    spacing_base: 4,
    theme: 'dark',
    colors: {
      brand: { '300': '#844d1c', '400': '#9d5b22', '500': '#b56927', '600': '#d37c30', '700': '#d9904f' },
      background: { '600': '#222222', '700': '#1f1f1f', '800': '#1b1b1b', '900': '#181818', '1000': '#141414' },
      danger: '#FF2D2D',
      success: '#62A504',
      text: '#EEEEEE',
      text_on_brand: '#EEEEEE',
      video_bg: '#191919',
      warning: '#FFCD07',
    },
  },
};

function permissions(host: boolean, produce: boolean, waitlisted: boolean): Permissions {
  const media = produce ? 'ALLOWED' : 'NOT_ALLOWED';
  return {
    accept_waiting_requests: host,
    kick_participant: host,
    disable_participant_audio: host,
    disable_participant_video: host,
    disable_participant_screensharing: host,
    pin_participant: host,
    can_edit_display_name: true,
    show_participant_list: true,
    hidden_participant: false,
    waiting_room_type: waitlisted ? 'ON_PRIVILEGED_USER_ENTRY' : 'SKIP',
    media: { audio: { can_produce: media }, video: { can_produce: media }, screenshare: { can_produce: media } },
    chat: { public: { can_send: true, text: true, files: true }, private: { can_send: true, can_receive: true, text: true, files: true } },
    polls: { can_create: host, can_vote: true, can_view: true },
    plugins: { can_start: host, can_close: host, can_edit_config: host, config: {} },
  };
}

function preset(name: string, viewType: 'GROUP_CALL' | 'WEBINAR' | 'LIVESTREAM', host: boolean, produce: boolean, waitlisted: boolean): Preset {
  return {
    name,
    config: {
      view_type: viewType,
      max_screenshare_count: 1,
      max_video_streams: { desktop: viewType === 'GROUP_CALL' ? 9 : 1, mobile: viewType === 'GROUP_CALL' ? 4 : 1 },
      media: { video: { quality: 'vga', frame_rate: 30 }, screenshare: { quality: 'hd', frame_rate: 5 }, audio: { enable_stereo: false } },
      livestream_viewer_qualities: null,
    },
    permissions: permissions(host, produce, waitlisted),
    ui: UI,
  };
}

/**
 * The defaults every app gets. Non-host group call participants wait to be admitted while a host
 * is present (`ON_PRIVILEGED_USER_ENTRY`), as the platform's group call participant does.
 */
export const DEFAULT_PRESETS: Preset[] = [
  preset('group_call_host', 'GROUP_CALL', true, true, false),
  preset('group_call_participant', 'GROUP_CALL', false, true, true),
  preset('webinar_presenter', 'WEBINAR', true, true, false),
  preset('webinar_viewer', 'WEBINAR', false, false, false),
  preset('livestream_host', 'LIVESTREAM', true, true, false),
  preset('livestream_viewer', 'LIVESTREAM', false, false, false),
];

/** A caller's preset over the defaults of its view type, so every field the SDK reads is set. */
export function completePreset(body: z.output<typeof PresetBody>): Preset {
  const base = preset(body.name, body.config?.view_type === 'WEBINAR' || body.config?.view_type === 'LIVESTREAM' ? body.config.view_type : 'GROUP_CALL', false, true, false);
  return {
    name: body.name,
    config: { ...base.config, ...(body.config ?? {}) },
    permissions: { ...base.permissions, ...(body.permissions ?? {}) },
    ui: body.ui ?? base.ui,
  };
}
