import { describe, expect, it } from 'vitest';
import { casUpdate, CasExhaustedError } from '../../src/store/cas.js';
import { MemoryStore } from '../../src/store/memory.js';
import { StoreError } from '../../src/store/store.js';

const noSleep = { sleep: async () => {}, random: () => 0.5 };

describe('casUpdate', () => {
  it('retries a lost compare-and-set with a fresh read and writes on the new version', async () => {
    const store = new MemoryStore();
    await store.open();
    await store.createRecord('sessions', 's1', { n: 0 });
    let raced = false;
    const result = await casUpdate(async () => {
      const cur = (await store.getRecord<{ n: number }>('sessions', 's1'))!;
      if (!raced) {
        // Another writer gets in between our read and our write.
        raced = true;
        await store.updateRecord('sessions', 's1', { n: 10 }, cur.version);
      }
      return store.updateRecord('sessions', 's1', { n: cur.value.n + 1 }, cur.version);
    }, noSleep);
    expect(result.value).toEqual({ n: 11 });
    expect((await store.getRecord('sessions', 's1'))!.value).toEqual({ n: 11 });
  });

  it('gives up after the bound with a typed error, backing off between attempts', async () => {
    const pauses: number[] = [];
    let calls = 0;
    const failing = casUpdate(
      async () => {
        calls++;
        throw new StoreError('stale_version', 'moved');
      },
      { attempts: 4, baseDelayMs: 8, maxDelayMs: 20, sleep: async (ms) => void pauses.push(ms), random: () => 0.999 },
    );
    await expect(failing).rejects.toBeInstanceOf(CasExhaustedError);
    expect(calls).toBe(4);
    // Jittered below a doubling cap: 8, 16, then capped at 20.
    expect(pauses.map((p) => Math.round(p / 0.999))).toEqual([8, 16, 20]);
  });

  it('throws other errors at once', async () => {
    let calls = 0;
    const err = new Error('boom');
    await expect(
      casUpdate(async () => {
        calls++;
        throw err;
      }, noSleep),
    ).rejects.toBe(err);
    expect(calls).toBe(1);
  });

  it('retries the codes it is told to', async () => {
    let calls = 0;
    const out = await casUpdate(
      async () => {
        if (++calls < 3) throw new StoreError('conflict', 'exists');
        return 'ok';
      },
      { ...noSleep, retryOn: ['stale_version', 'conflict'] },
    );
    expect(out).toBe('ok');
    expect(calls).toBe(3);
  });
});
