// Unit test of the attempt timers on an injected clock and timers (no sleeping).
import { describe, expect, it } from 'vitest';
import type { BackgroundRunContext, BackgroundRunEvent } from '../../machines/background-run.machine.js';
import { ManualClock } from '../../src/clock.js';
import { LeaseClock } from '../../src/lease-clock.js';
import { AttemptTimers } from '../../src/background/attempt-timers.js';
import type { Handle, Timers } from '../../src/background/host-types.js';
import { newHandle } from '../../src/background/run-host.js';

/** Timers a test fires by hand: `advance(ms)` runs every timer due by then, in order. */
class FakeTimers implements Timers {
  private next = 1;
  readonly live = new Map<number, { at: number; fn: () => void; every: number | null }>();
  constructor(private readonly clock: ManualClock) {}
  setTimeout(fn: () => void, ms: number) {
    const id = this.next++;
    this.live.set(id, { at: this.clock.now() + ms, fn, every: null });
    return id;
  }
  setInterval(fn: () => void, ms: number) {
    const id = this.next++;
    this.live.set(id, { at: this.clock.now() + ms, fn, every: ms });
    return id;
  }
  clearTimeout(t: unknown) {
    this.live.delete(t as number);
  }
  clearInterval(t: unknown) {
    this.live.delete(t as number);
  }
  advance(ms: number) {
    const end = this.clock.now() + ms;
    for (;;) {
      const due = [...this.live.entries()].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      const [id, t] = due;
      this.clock.set(t.at);
      if (t.every === null) this.live.delete(id);
      else t.at += t.every;
      t.fn();
    }
    this.clock.set(end);
  }
}

function handle(id = 'bgrun_1'): Handle {
  return newHandle(id, { id, version: 1, seq: 1, value: {} as never } as Handle['row']);
}

function ctx(
  status: string,
  extra: { attempt?: number; timeout_seconds?: number | null; retry_at?: string | null; agent_run_id?: string | null } = {},
): BackgroundRunContext {
  return {
    run: { run_id: 'bgrun_1', status, attempt: extra.attempt ?? 1 },
    internal: { timeout_seconds: extra.timeout_seconds ?? null, retry_at: extra.retry_at ?? null, agent_run_id: extra.agent_run_id ?? 'run_a' },
  } as unknown as BackgroundRunContext;
}

function setup(opts: { closed?: boolean } = {}) {
  const clock = new ManualClock(Date.parse('2026-01-01T00:00:00Z'));
  const timers = new FakeTimers(clock);
  const sent: Array<{ runId: string; event: BackgroundRunEvent }> = [];
  const timeouts: string[] = [];
  const t = new AttemptTimers({
    clock,
    leases: new LeaseClock(clock),
    timers,
    leaseMs: 20_000,
    send: async (runId, event) => {
      sent.push({ runId, event });
    },
    onTimeout: (_h, agentRunId) => timeouts.push(agentRunId),
    closed: () => opts.closed ?? false,
  });
  return { clock, timers, sent, timeouts, t };
}

describe('attempt timers', () => {
  it('a held run heartbeats every quarter lease with a lease a full lease ahead; released, it stops', () => {
    const { timers, sent, t, clock } = setup();
    const h = handle();
    t.afterWrite(h, ctx('claimed'), true);
    t.afterWrite(h, ctx('claimed'), true); // once per run, not once per write
    timers.advance(5_000);
    expect(sent.map((s) => s.event.type)).toEqual(['HEARTBEAT']);
    const ev = sent[0].event as Extract<BackgroundRunEvent, { type: 'HEARTBEAT' }>;
    expect(Date.parse(ev.lease_expires_at) - clock.now()).toBe(20_000);
    timers.advance(10_000);
    expect(sent).toHaveLength(3);
    t.clearHandle(h);
    timers.advance(60_000);
    expect(sent).toHaveLength(3);
    expect(timers.live.size).toBe(0);
  });

  it('a backed-up chain skips heartbeats', () => {
    const { timers, sent, t } = setup();
    const h = handle();
    h.pending = 9;
    t.ensureHeartbeat(h);
    timers.advance(20_000);
    expect(sent).toHaveLength(0);
  });

  it('the attempt timeout fires once per attempt after timeout_seconds, and not once the run stops running', () => {
    const { timers, timeouts, t } = setup();
    const h = handle();
    t.afterWrite(h, ctx('running', { timeout_seconds: 30, attempt: 1 }), true);
    timers.advance(29_999);
    expect(timeouts).toEqual([]);
    timers.advance(1);
    expect(timeouts).toEqual(['run_a']);
    t.afterWrite(h, ctx('running', { timeout_seconds: 30, attempt: 2, agent_run_id: 'run_b' }), true);
    t.afterWrite(h, ctx('retrying', { retry_at: null }), false);
    timers.advance(60_000);
    expect(timeouts).toEqual(['run_a']);
  });

  it('a retry is due at retry_at, armed once, and cleared with its run; nothing is armed after close', () => {
    const { timers, sent, t } = setup();
    const h = handle();
    t.afterWrite(h, ctx('retrying', { retry_at: '2026-01-01T00:00:10.000Z' }), false);
    expect(t.hasRetry('bgrun_1')).toBe(true);
    timers.advance(9_999);
    expect(sent).toHaveLength(0);
    timers.advance(1);
    expect(sent.map((s) => [s.runId, s.event.type])).toEqual([['bgrun_1', 'RETRY_DUE']]);
    expect(t.hasRetry('bgrun_1')).toBe(false);
    t.armRetry('bgrun_2', Date.parse('2026-01-01T00:01:00Z'));
    t.clearRetry('bgrun_2');
    timers.advance(120_000);
    expect(sent).toHaveLength(1);
    const closed = setup({ closed: true });
    closed.t.armRetry('bgrun_3', 0);
    closed.t.ensureHeartbeat(handle());
    expect(closed.timers.live.size).toBe(0);
  });
});
