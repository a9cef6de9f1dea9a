// The model-provider rate limiter at the point where agentd admits a call (src/flow/rate-limiter.ts),
// on an injected clock: a fake sleep moves the clock, so no test waits on wall time.
import { describe, expect, it } from 'vitest';
import { gcraLimit, gcraTake } from '../../machines/policies/flow.js';
import { ManualClock } from '../../src/clock.js';
import { RateLimiter } from '../../src/flow/rate-limiter.js';
import { MemoryStore } from '../../src/store/memory.js';

/** A limiter whose sleeps advance the manual clock at once (in order of wake-up). */
function rig() {
  const clock = new ManualClock(Date.parse('2026-01-01T00:00:00Z'));
  const admitted: number[] = [];
  const limiter = new RateLimiter(new MemoryStore(), clock, {
    sleep: async (ms) => {
      clock.advance(ms);
    },
    onAdmit: () => admitted.push(clock.now()),
  });
  return { clock, limiter, admitted };
}

/** The most admissions any sliding window of `windowMs` (half-open) holds. */
function maxInWindow(times: number[], windowMs: number): number {
  const t = [...times].sort((a, b) => a - b);
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < t.length; hi++) {
    while (t[hi]! - t[lo]! >= windowMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

describe('GCRA', () => {
  it('at 600/min lets calls go 100 ms apart and never 11 in a 1 s window', () => {
    const limit = gcraLimit(600);
    let tat = 0;
    const times: number[] = [];
    let now = 0;
    while (times.length < 200) {
      const d = gcraTake(tat, now, 1, limit);
      if (d.ok) {
        tat = d.tat;
        times.push(now);
      } else now += d.waitMs;
    }
    expect(maxInWindow(times, 1000)).toBe(10);
    expect(times[199]! - times[0]!).toBe(19_900);
  });

  it('a cost larger than a minute of tokens still goes once the bucket is empty, and the next waits for it', () => {
    const limit = gcraLimit(1000);
    const first = gcraTake(0, 0, 5000, limit);
    expect(first.ok).toBe(true);
    const second = gcraTake(first.ok ? first.tat : 0, 0, 1, limit);
    expect(second).toEqual({ ok: false, waitMs: 300_000 });
  });
});

describe('RateLimiter', () => {
  it('a burst of 200 calls at 600 requests/min: no 1 s window (sliding) admits more than 10, none fails', async () => {
    const { limiter, admitted } = rig();
    const calls = Array.from({ length: 200 }, () => limiter.admit('openai|x|m', { requests_per_minute: 600 }, 10));
    await Promise.all(calls);
    expect(admitted).toHaveLength(200);
    expect(maxInWindow(admitted, 1000)).toBeLessThanOrEqual(10);
  });

  it('tokens per minute: a call takes its estimate first and the reported usage corrects it', async () => {
    const { limiter, admitted, clock } = rig();
    const t0 = clock.now();
    const correct = await limiter.admit('k', { tokens_per_minute: 6000 }, 1000); // 1000 tokens = 10 s of budget
    correct(100); // it used only 100: 9 s of the budget come back
    await limiter.admit('k', { tokens_per_minute: 6000 }, 1000);
    expect(admitted.map((t) => t - t0)).toEqual([0, 1000]);
  });

  it('higher priority gets the next budget; equal priorities are FIFO', async () => {
    const { limiter } = rig();
    const order: string[] = [];
    await limiter.admit('p', { requests_per_minute: 60 }, 1);
    const go = (name: string, priority: number) => limiter.admit('p', { requests_per_minute: 60 }, 1, { priority }).then(() => order.push(name));
    await Promise.all([go('low 1', 0), go('low 2', 0), go('high', 10)]);
    expect(order).toEqual(['high', 'low 1', 'low 2']);
  });

  it('a pause (a provider 429 with Retry-After) holds every call on the key, limit or not, and says why', async () => {
    const { limiter, clock, admitted } = rig();
    const t0 = clock.now();
    await limiter.pause('nolimit', t0 + 2000);
    const notices: string[] = [];
    await limiter.admit('nolimit', null, 5, { onThrottled: (n) => notices.push(`${n.reason}:${n.waitMs}`) });
    expect(notices).toEqual(['retry_after:2000']);
    expect(admitted.at(-1)! - t0).toBe(2000);
    // A limited key too.
    await limiter.pause('limited', clock.now() + 2000);
    const before = clock.now();
    await limiter.admit('limited', { requests_per_minute: 6000 }, 5);
    expect(clock.now() - before).toBe(2000);
  });

  it('a waiting call whose run is aborted leaves the queue with the abort', async () => {
    const { limiter } = rig();
    await limiter.admit('a', { requests_per_minute: 1 }, 1);
    const ac = new AbortController();
    ac.abort(new Error('run timed out'));
    await expect(limiter.admit('a', { requests_per_minute: 1 }, 1, { signal: ac.signal })).rejects.toThrow();
  });
});
