// Builds the configured model provider. The demo model needs nothing else; the AI SDK and its
// provider packages (~150 ms to load) are imported only when a real provider is configured, so
// the default install starts faster.
import { DemoModel } from './demo.js';
import type { ModelProvider } from './types.js';
import type { ModelProviderConfig } from './index.js';

export async function loadModelProvider(cfg: ModelProviderConfig): Promise<ModelProvider> {
  const provider = await build(cfg);
  // Every configured provider has a rate key (a 429's pause applies to it, limit or not).
  provider.rate = { key: rateKeyOf(cfg), limit: cfg.rate_limit ?? null };
  return provider;
}

/** The key a provider's calls are rate-limited and paused under: provider + base URL + model (docs/flow-control.md). */
function rateKeyOf(cfg: Pick<ModelProviderConfig, 'provider' | 'base_url' | 'model'>): string {
  return `${cfg.provider}|${cfg.base_url ?? ''}|${cfg.model ?? ''}`;
}

async function build(cfg: ModelProviderConfig): Promise<ModelProvider> {
  if (cfg.provider === 'demo') {
    return new DemoModel({
      model: cfg.model ?? 'demo',
      ...(cfg.max_output_tokens !== undefined ? { max_output_tokens: cfg.max_output_tokens } : {}),
      ...(cfg.temperature !== undefined ? { temperature: cfg.temperature } : {}),
      ...(cfg.demo ?? {}),
    });
  }
  const { createModelProvider } = await import('./index.js');
  return createModelProvider(cfg);
}
