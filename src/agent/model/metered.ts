import { toModelCallError } from './errors.js';
import type { ModelCallRequest, ModelCallResult, ModelProvider } from './types.js';
import { reportSwallowed } from '../../telemetry/swallowed.js';

/** Receives one observation per call: `errorKind` is null when the call succeeded. */
export type ModelCallObserver = (provider: string, model: string, seconds: number, errorKind: string | null) => void;

/**
 * Wraps a provider so every call (each retry attempt is its own call: withRetries sits on top)
 * is timed and its failure classified, for agentd_model_call_duration_seconds and
 * agentd_model_call_errors_total. The labels are the configured provider and model, never the
 * model name a response claims, so the series stay bounded.
 */
export function withCallMetrics(provider: ModelProvider, observe: ModelCallObserver, now: () => number = () => performance.now()): ModelProvider {
  return {
    provider: provider.provider,
    model: provider.model,
    ...(provider.temperature !== undefined ? { temperature: provider.temperature } : {}),
    estimateInputTokens: (messages, tools) => provider.estimateInputTokens(messages, tools),
    async call(req: ModelCallRequest): Promise<ModelCallResult> {
      const started = now();
      try {
        const result = await provider.call(req);
        safe(() => observe(provider.provider, provider.model, (now() - started) / 1000, null));
        return result;
      } catch (err) {
        safe(() => observe(provider.provider, provider.model, (now() - started) / 1000, toModelCallError(err, req.signal).kind));
        throw err;
      }
    },
  };
}

function safe(fn: () => void): void {
  try {
    fn();
  } catch (err) {
    // A metrics hook must never change the outcome of the call.
    reportSwallowed('model.metrics_hook', err);
  }
}
