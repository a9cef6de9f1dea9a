// A run's model calls under its provider's rate limit (docs/flow-control.md, src/flow/rate-limiter.ts):
// each attempt takes its budget before it is sent (prompt estimate + max_output_tokens), waits
// while over the limit or while a provider's Retry-After pauses the key (event `model_throttled`,
// `throttled_until` on the run), and corrects the estimate with the usage the provider reported.
// A 429 with a retry time pauses the key for every run and instance. A model without a rate key
// (an injected test model) is used as it is.
import type { ModelCallError, ModelCallRequest, ModelCallResult, ModelProvider } from '../agent/model/types.js';
import type { ThrottleNotice } from '../flow/rate-limiter.js';
import type { RunHost } from './run-host.js';
import type { RunServiceDeps } from './run-types.js';
import { iso } from './run-types.js';

export function rateLimited(model: ModelProvider, live: RunHost, deps: RunServiceDeps, span: string): ModelProvider {
  const limiter = deps.rateLimiter;
  const rate = model.rate;
  if (!limiter || !rate) return model;
  let throttledSet = false;
  const onThrottled = (n: ThrottleNotice): void => {
    deps.metrics.modelThrottled(model.provider, model.model, n.reason);
    void live.emit({
      event_type: 'model_throttled',
      actor: { type: 'model', id: model.model, name: model.provider },
      span_id: span,
      parent_span_id: live.stepSpan,
      metadata: { wait_ms: n.waitMs, reason: n.reason, provider: model.provider, model: model.model },
    });
    throttledSet = true;
    void live.writer.update((r) => ({ ...r, throttled_until: iso(n.until) })).catch(() => undefined); // a fenced run stops anyway
  };
  return {
    provider: model.provider,
    model: model.model,
    estimateInputTokens: (messages, tools) => model.estimateInputTokens(messages, tools),
    async call(req: ModelCallRequest): Promise<ModelCallResult> {
      const estimate = model.estimateInputTokens(req.messages, req.tools) + (req.max_output_tokens ?? 0);
      const started = deps.clock.now();
      const correct = await limiter.admit(rate.key, rate.limit, estimate, { priority: live.priority, signal: req.signal, onThrottled });
      deps.metrics.modelRateWait(model.provider, model.model, (deps.clock.now() - started) / 1000);
      if (throttledSet) {
        throttledSet = false;
        void live.writer.update((r) => ({ ...r, throttled_until: null })).catch(() => undefined);
      }
      const result = await model.call(req);
      correct(result.usage.input_tokens + result.usage.output_tokens);
      return result;
    },
  };
}

/** A provider's 429 with a retry time: the key pauses for every run and instance. */
export function pauseOn429(model: ModelProvider, deps: RunServiceDeps, err: ModelCallError): void {
  if (!deps.rateLimiter || !model.rate || err.kind !== 'rate_limited' || err.retryAfterMs === undefined) return;
  void deps.rateLimiter.pause(model.rate.key, deps.clock.now() + err.retryAfterMs);
}
