// Metrics units: label bounds, the model call wrapper, OTLP and lease/recovery counters, and
// promtool on the text of a fresh registry with every family moved.
import { describe, expect, it } from 'vitest';
import { Metrics, UNMATCHED_ROUTE } from '../../src/telemetry/metrics.js';
import { withCallMetrics } from '../../src/agent/model/metered.js';
import { ModelCallError, type ModelProvider } from '../../src/agent/model/types.js';
import { findPromtool, promtoolCheck, samples } from '../helpers/prometheus.js';

const fakeProvider = (fail: ModelCallError | null): ModelProvider => ({
  provider: 'p',
  model: 'm',
  estimateInputTokens: () => 1,
  async call() {
    if (fail) throw fail;
    return {
      text: 'ok',
      tool_calls: [],
      finish_reason: 'stop',
      usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 },
      model: 'claimed-by-response',
    } as never;
  },
});

describe('Metrics', () => {
  it('labels unmatched routes with one fixed value and counts every family', async () => {
    const m = new Metrics();
    m.httpRequest('GET', null, 404, 0.001);
    m.httpRequest('GET', '/runs/:run_id', 200, 0.002);
    m.leaseLost('run');
    m.leaseLost('background');
    m.recovered('run', 'interrupted');
    m.recovered('background', 'lapsed_lease');
    m.otlpEvent({ type: 'exported', span_count: 7 });
    m.otlpEvent({ type: 'failed', trace_ids: ['a', 'b'] });
    m.otlpEvent({ type: 'dropped', reason: 'queue_full' });
    m.toolCall('echo', 'success', 0.01);
    m.toolCall('x', 'denied', null);
    m.setSources({ runsWithStatus: async (s) => (s === 'awaiting_approval' ? 3 : 1), backgroundQueued: async () => 5, workspaceBacklog: () => 7 });
    const text = await m.prometheusText();
    const all = samples(text);
    expect(all.get(`agentd_http_requests_total{method="GET",route="${UNMATCHED_ROUTE}",status="404"}`)).toBe(1);
    expect(all.get('agentd_lease_losses_total{kind="run"}')).toBe(1);
    expect(all.get('agentd_recoveries_total{kind="background",cause="lapsed_lease"}')).toBe(1);
    expect(all.get('agentd_otlp_spans_exported_total')).toBe(7);
    expect(all.get('agentd_otlp_traces_failed_total')).toBe(2);
    expect(all.get('agentd_otlp_traces_dropped_total{reason="queue_full"}')).toBe(1);
    expect(all.get('agentd_tool_call_duration_seconds_count{tool="x"}')).toBeUndefined();
    expect(all.get('agentd_runs_awaiting{reason="approval"}')).toBe(3);
    expect(all.get('agentd_background_queue_depth')).toBe(5);
    expect(all.get('agentd_background_workspace_backlog')).toBe(7);
    const promtool = findPromtool();
    if (!promtool) process.stderr.write('test/runtime/metrics.test.ts: promtool not found (apt-get install -y prometheus): the promtool check is skipped\n');
    if (promtool) {
      const check = promtoolCheck(promtool, text);
      expect(check.output).toBe('');
      expect(check.status).toBe(0);
    }
  });

  it('times model calls by the configured provider and model, and classifies failures', async () => {
    const seen: Array<[string, string, string | null]> = [];
    const observe = (p: string, mo: string, _s: number, kind: string | null) => void seen.push([p, mo, kind]);
    await withCallMetrics(fakeProvider(null), observe).call({ messages: [], tools: [] });
    await expect(withCallMetrics(fakeProvider(new ModelCallError('rate_limited', '429')), observe).call({ messages: [], tools: [] })).rejects.toThrow('429');
    await expect(
      withCallMetrics(
        {
          ...fakeProvider(null),
          call: async () => {
            throw new Error('socket hang up');
          },
        },
        observe,
      ).call({ messages: [], tools: [] }),
    ).rejects.toThrow();
    expect(seen[0]).toEqual(['p', 'm', null]);
    expect(seen[1]).toEqual(['p', 'm', 'rate_limited']);
    expect(typeof seen[2][2]).toBe('string');
    // An observer that throws never changes the call's outcome.
    const r = await withCallMetrics(fakeProvider(null), () => {
      throw new Error('x');
    }).call({ messages: [], tools: [] });
    expect(r.text).toBe('ok');
  });
});
