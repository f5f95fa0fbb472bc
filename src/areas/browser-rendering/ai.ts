/**
 * Prompt-based `/json` through an operator-configured OpenAI-compatible chat-completions endpoint
 * (`--browser-ai-url …/v1`, `--browser-ai-model`, `--browser-ai-key`). The page goes to the model
 * as Markdown with the caller's prompt; the model's JSON answer is the result.
 */
import { RenderError } from './render.ts';

export interface AiConfig {
  url?: string;
  model?: string;
  key?: string;
}

const MAX_PAGE_CHARS = 100_000;
export const AI_CODES = { none: 2010, failed: 2011 } as const;

export async function askModel(
  cfg: AiConfig,
  req: { prompt?: string; markdown: string; responseFormat?: Record<string, unknown>; customAi?: { model: string; authorization: string }[] },
  timeoutMs: number,
): Promise<unknown> {
  if (!cfg.url) {
    throw new RenderError(
      400,
      AI_CODES.none,
      'prompt: answering a prompt needs a model and this server has none configured (operator: set --browser-ai-url to an OpenAI-compatible endpoint); without prompt, /json extracts the fields of response_format or schema from the page\'s structured data',
    );
  }
  const custom = req.customAi?.[0];
  const model = custom?.model.replace(/^[^/]+\//, '') ?? cfg.model;
  if (!model) throw new RenderError(400, AI_CODES.none, 'no model named: give custom_ai[0].model or have the operator set --browser-ai-model');
  const auth = custom?.authorization ?? (cfg.key ? `Bearer ${cfg.key}` : undefined);
  const body = {
    model,
    messages: [
      { role: 'system', content: 'You extract data from a web page given as Markdown. Answer with one JSON object only.' },
      { role: 'user', content: `${req.prompt ?? 'Extract the data described by the response format.'}\n\nPage:\n${req.markdown.slice(0, MAX_PAGE_CHARS)}` },
    ],
    response_format: req.responseFormat ?? { type: 'json_object' },
  };
  let res: Response;
  try {
    res = await fetch(`${cfg.url.replace(/\/$/, '')}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(auth ? { authorization: auth.startsWith('Bearer ') ? auth : `Bearer ${auth}` } : {}) },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    throw new RenderError(502, AI_CODES.failed, `the model endpoint could not be reached: ${(err as Error).message}`);
  }
  const text = await res.text();
  if (!res.ok) throw new RenderError(502, AI_CODES.failed, `the model endpoint answered ${res.status}: ${text.slice(0, 300)}`);
  try {
    const parsed = JSON.parse(text) as { choices?: { message?: { content?: string } }[] };
    const content = parsed.choices?.[0]?.message?.content ?? '';
    const json = /```(?:json)?\s*([\s\S]*?)```/.exec(content)?.[1] ?? content;
    return JSON.parse(json);
  } catch {
    throw new RenderError(502, AI_CODES.failed, `the model did not answer with JSON: ${text.slice(0, 300)}`);
  }
}
