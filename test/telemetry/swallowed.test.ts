// A swallowed error leaves a warn line with its ids and counts in
// agentd_swallowed_errors_total{site}; an expected refusal (a 4xx) does neither.
import { describe, expect, it } from 'vitest';
import { domainError } from '../../src/errors.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { bindSwallowedErrorLog, isRefusal, swallow, swallowedCount } from '../../src/telemetry/swallowed.js';

function capture() {
  const lines: Array<Record<string, unknown>> = [];
  bindSwallowedErrorLog(createLogger({ level: 'info', format: 'json', destination: { write: (l: string) => lines.push(JSON.parse(l)) } }));
  return lines;
}

describe('swallowed errors', () => {
  it('a failing scrape source of /metrics/prometheus is logged and counted, and the scrape still answers', async () => {
    const lines = capture();
    const metrics = new Metrics();
    metrics.setSources({
      runsWithStatus: () => Promise.reject(new Error('store down (password=hunter2)')),
      backgroundQueued: () => Promise.resolve(3),
    });
    const before = await swallowedCount('metrics.scrape_awaiting');
    const text = await metrics.prometheusText();
    expect(await swallowedCount('metrics.scrape_awaiting')).toBe(before + 2);
    expect(text).toMatch(/agentd_background_queue_depth 3/);
    // The families are collected together, so the count shows from the next scrape on.
    expect(await metrics.prometheusText()).toMatch(/agentd_swallowed_errors_total\{site="metrics\.scrape_awaiting"\} [1-9]/);
    const line = lines.find((l) => l.site === 'metrics.scrape_awaiting');
    expect(line).toMatchObject({ level: 'warn', msg: 'swallowed error at metrics.scrape_awaiting' });
    // The log goes through the redactor like every other line.
    expect(JSON.stringify(line)).not.toContain('hunter2');
  });

  it('reports a failure with its ids, and not an expected refusal', async () => {
    const lines = capture();
    const before = await swallowedCount('test.site');
    await Promise.reject(new Error('boom')).catch(swallow('test.site', { run_id: 'run_1' }, isRefusal));
    await Promise.reject(domainError('AGT_ERR_RUN_ENDED', ['run_2', 'success'])).catch(swallow('test.site', { run_id: 'run_2' }, isRefusal));
    expect(await swallowedCount('test.site')).toBe(before + 1);
    expect(lines.filter((l) => l.site === 'test.site').map((l) => l.run_id)).toEqual(['run_1']);
  });
});
