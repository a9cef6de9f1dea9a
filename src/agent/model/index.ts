import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { AiSdkProvider } from './ai-sdk.js';
import { DemoModel, type DemoModelOptions } from './demo.js';
import type { ModelProvider } from './types.js';
import { Redactor } from '../../telemetry/redact.js';
import { ChatCompletionsStream } from './chat-completions-stream.js';
import { createModelHttpAgents, createNodeFetch } from './node-fetch.js';

export * from './types.js';
export { AiSdkProvider, toModelMessages, toToolSet } from './ai-sdk.js';
export { DemoModel, type DemoModelOptions } from './demo.js';
export { withRetries, retryDelayMs } from './retry.js';
export { toModelCallError, parseRetryAfterMs } from './errors.js';

export type ModelProviderKind = 'demo' | 'openai-compatible' | 'openai' | 'anthropic';

export interface ModelProviderConfig {
  provider: ModelProviderKind;
  base_url?: string;
  model?: string;
  /** The key itself (config.ts resolves `api_key_env`); never logged. */
  api_key?: string;
  max_output_tokens?: number;
  temperature?: number;
  /** Demo model only: wait between streamed chunks. */
  demo?: Pick<DemoModelOptions, 'chunkDelayMs'>;
  /** The provider's rate limit (docs/flow-control.md). */
  rate_limit?: { requests_per_minute?: number; tokens_per_minute?: number } | null;
}

export const DEFAULT_MODELS: Readonly<Record<ModelProviderKind, string | undefined>> = {
  demo: 'demo',
  openai: 'gpt-4o-mini',
  anthropic: 'claude-sonnet-4-5',
  // An OpenAI-compatible server has no model everyone shares: it must be named.
  'openai-compatible': undefined,
};

/**
 * Builds the configured provider. It makes single calls and does not retry: wrap it with
 * withRetries() where retries (and one model_error event per failure) are wanted.
 */
export function createModelProvider(cfg: ModelProviderConfig): ModelProvider {
  const settings = {
    ...(cfg.max_output_tokens !== undefined ? { max_output_tokens: cfg.max_output_tokens } : {}),
    ...(cfg.temperature !== undefined ? { temperature: cfg.temperature } : {}),
  };
  // Error messages leave the provider without the key (or any credential-shaped text) in them.
  const redactor = new Redactor(cfg.api_key ? [cfg.api_key] : []);
  // The providers' HTTP client: node:http with keep-alive instead of the built-in fetch (node-fetch.ts),
  // its sockets shared with our own Chat Completions streaming client.
  const agents = createModelHttpAgents();
  const fetch = createNodeFetch({}, agents);
  switch (cfg.provider) {
    case 'demo':
      return new DemoModel({ model: cfg.model ?? 'demo', ...settings, ...(cfg.demo ?? {}) });
    case 'openai-compatible': {
      // eslint-disable-next-line no-restricted-syntax -- a model config problem: agent-registry.ts answers it as 422/409, at start-up the CLI prints it
      if (!cfg.base_url) throw new Error('model.base_url is required for provider "openai-compatible"');
      // eslint-disable-next-line no-restricted-syntax -- a model config problem: agent-registry.ts answers it as 422/409, at start-up the CLI prints it
      if (!cfg.model) throw new Error('model.model is required for provider "openai-compatible"');
      const p = createOpenAICompatible({
        name: 'openai-compatible',
        baseURL: cfg.base_url,
        ...(cfg.api_key ? { apiKey: cfg.api_key } : {}),
        fetch,
        // Without it the stream carries no usage chunk and budgets would only see estimates.
        includeUsage: true,
      });
      return new AiSdkProvider({
        provider: cfg.provider,
        model: cfg.model,
        languageModel: p.chatModel(cfg.model),
        // Streaming calls (every run step) through our own SSE client, not the SDK's web streams.
        chatStream: new ChatCompletionsStream({ baseURL: cfg.base_url, ...(cfg.api_key ? { apiKey: cfg.api_key } : {}), agents }),
        inlineSystemMessages: true,
        redactor,
        ...settings,
      });
    }
    case 'openai': {
      const model = cfg.model ?? (DEFAULT_MODELS.openai as string);
      const p = createOpenAI({
        ...(cfg.base_url ? { baseURL: cfg.base_url } : {}),
        ...(cfg.api_key ? { apiKey: cfg.api_key } : {}),
        fetch,
      });
      // Chat Completions rather than the SDK's default Responses API: our history is stateless
      // JSON with no provider item ids, which is exactly what Chat Completions takes.
      return new AiSdkProvider({ provider: cfg.provider, model, languageModel: p.chat(model), inlineSystemMessages: true, redactor, ...settings });
    }
    case 'anthropic': {
      const model = cfg.model ?? (DEFAULT_MODELS.anthropic as string);
      const p = createAnthropic({
        ...(cfg.base_url ? { baseURL: cfg.base_url } : {}),
        ...(cfg.api_key ? { apiKey: cfg.api_key } : {}),
        fetch,
      });
      return new AiSdkProvider({ provider: cfg.provider, model, languageModel: p(model), inlineSystemMessages: false, redactor, ...settings });
    }
    default: {
      const never: never = cfg.provider;
      // eslint-disable-next-line no-restricted-syntax -- unreachable: the config schema admits only the providers above
      throw new Error(`unknown model provider: ${String(never)}`);
    }
  }
}
