// Model-based check: random concurrent command groups run against MemoryStore (the model) and
// LevelStore must give identical answers, error codes, seqs and cursors included. The groups are
// issued without awaiting in between, so LevelStore's group commit validates many jobs per round.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LevelStore } from '../../src/store/level.js';
import { MemoryStore } from '../../src/store/memory.js';
import { StoreError, type EventQuery, type RecordKind, type Store, type WriteOp } from '../../src/store/store.js';

const kinds: RecordKind[] = ['runs', 'sessions'];
const idArb = fc.constantFrom('a', 'b', 'a\u0000', '');
const kindArb = fc.constantFrom(...kinds);
const ixArb = fc.option(fc.record({ status: fc.option(fc.constantFrom('x', 'y', 'x\u0000y'), { nil: null }) }), { nil: undefined });
const versionArb = fc.integer({ min: 1, max: 3 });
const opArb: fc.Arbitrary<WriteOp> = fc.oneof(
  fc.record({ op: fc.constant('create' as const), kind: kindArb, id: idArb, value: fc.integer(), indexes: ixArb }),
  fc.record({
    op: fc.constant('update' as const),
    kind: kindArb,
    id: idArb,
    value: fc.integer(),
    expectedVersion: fc.option(versionArb, { nil: null }),
    indexes: ixArb,
  }),
  fc.record({ op: fc.constant('delete' as const), kind: kindArb, id: idArb, expectedVersion: fc.option(versionArb, { nil: undefined }) }),
);
type Cmd =
  | { t: 'commit'; ops: WriteOp[] }
  | { t: 'append'; events: Array<{ run_id: string; event_type: string; session_id?: string }> }
  | { t: 'deleteBefore'; at: number };
const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 5, arbitrary: fc.array(opArb, { minLength: 1, maxLength: 4 }).map((ops) => ({ t: 'commit' as const, ops })) },
  {
    weight: 3,
    arbitrary: fc
      .array(fc.record({ run_id: fc.constantFrom('r1', 'r2', 'r3'), event_type: fc.constantFrom('s', 't'), session_id: fc.constantFrom('s1', 's2') }), {
        minLength: 1,
        maxLength: 3,
      })
      .map((events) => ({ t: 'append' as const, events })),
  },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 40 }).map((at) => ({ t: 'deleteBefore' as const, at })) },
);

let clock = 0;
async function exec(store: Store, cmd: Cmd): Promise<unknown> {
  try {
    if (cmd.t === 'commit') return await store.commit(cmd.ops);
    if (cmd.t === 'append') {
      return await store.appendEvents(
        cmd.events.map((e, i) => ({ ...e, event_id: `e${i}`, timestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, clock++)).toISOString() })),
      );
    }
    return await store.deleteEventsBefore(new Date(Date.UTC(2026, 0, 1, 0, 0, cmd.at)).toISOString());
  } catch (e) {
    if (e instanceof StoreError) return { error: e.code };
    throw e;
  }
}

async function snapshot(store: Store): Promise<unknown> {
  const out: Record<string, unknown> = {};
  for (const kind of kinds) {
    out[`${kind}:list`] = await store.listRecords(kind, { limit: 1000 });
    out[`${kind}:rev`] = await store.listRecords(kind, { limit: 2, reverse: true });
    out[`${kind}:count`] = await store.countRecords(kind);
    for (const v of ['x', 'y', 'x\u0000y']) {
      out[`${kind}:${v}`] = await store.listRecords(kind, { index: { name: 'status', value: v } });
      out[`${kind}:${v}:count`] = await store.countRecords(kind, { name: 'status', value: v });
    }
  }
  const queries: EventQuery[] = [
    {},
    { filters: { run_id: 'r1' } },
    { filters: { run_id: ['r1', 'r3'], event_type: 't' } },
    { filters: { session_id: 's2', event_type: ['s', 't'] }, limit: 2 },
  ];
  for (const [i, q] of queries.entries()) out[`events:${i}`] = await store.readEvents(q);
  out.last = await store.lastEventCursor();
  return out;
}

describe('LevelStore matches the MemoryStore model', () => {
  it('on random concurrent command groups', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(cmdArb, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 6 }), async (groups) => {
        const dir = await mkdtemp(join(tmpdir(), 'agentd-store-model-'));
        const level = new LevelStore({ path: dir });
        const memory = new MemoryStore();
        await level.open();
        await memory.open();
        try {
          for (const group of groups) {
            const start = clock;
            const want = await Promise.all(group.map((c) => exec(memory, c)));
            clock = start; // same timestamps for both
            const got = await Promise.all(group.map((c) => exec(level, c)));
            expect(got).toEqual(want);
          }
          expect(await snapshot(level)).toEqual(await snapshot(memory));
        } finally {
          await level.close();
          await rm(dir, { recursive: true, force: true });
        }
      }),
      { numRuns: 50 },
    );
  });
});
