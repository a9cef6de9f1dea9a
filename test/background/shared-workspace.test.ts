// Two instances on one store and one workspace root (src/background/run-workspace.ts): the
// instance that queued a run holds its queued step back (QUEUED_MIRROR_DELAY_MS); when the other
// instance claims, runs and ends the run meanwhile, that late step must not move run.json back to
// `queued` nor repeat the queued line. And a waiter there answers only once the files show the
// end (src/background/waiters.ts). No sleeps: the delay is ended by hurrying the mirror, as a
// waiter does, and the rows change when the test says so.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { BackgroundRunContext } from '../../machines/background-run.machine.js';
import { RunWorkspaces } from '../../src/background/run-workspace.js';
import type { BgRunRow, LifecycleRecord } from '../../src/background/types.js';
import { SettleWaiters } from '../../src/background/waiters.js';
import { silentLogger } from '../../src/telemetry/logger.js';

const RUN = 'bgrun_s1';
const WS = `background/default/t/${RUN}`;
const EVENTS = ['background_run_queued', 'background_run_claimed', 'background_run_started', 'background_run_completed'];
const STATUS = ['queued', 'running', 'running', 'completed'];

let root = '';
const made: RunWorkspaces[] = [];
afterEach(async () => {
  await Promise.all(made.splice(0).map((w) => w.drain()));
  if (root) rmSync(root, { recursive: true, force: true });
});

/** The run as the store holds it after `seq` lifecycle events, owned by `owner` once claimed. */
function rowAt(seq: number, owner: string | null): BgRunRow {
  const status = STATUS[seq - 1];
  return {
    run: {
      run_id: RUN,
      task_id: 't',
      agent_id: 'default',
      session_id: 's',
      status,
      attempt: seq > 1 ? 1 : 0,
      lease_owner: owner,
      lease_generation: seq > 1 ? 1 : 0,
      workspace_path: WS,
    },
    internal: { write_events_jsonl: true, write_run_json: true, trace_id: 'tr', span_id: 'sp' },
    event_seq: seq,
    outbox: [],
  } as unknown as BgRunRow;
}

const line = (row: BgRunRow, sequence: number): LifecycleRecord => ({
  sequence,
  event: EVENTS[sequence - 1] as LifecycleRecord['event'],
  timestamp: '2030-01-01T00:00:00.000Z',
  run_id: RUN,
  task_id: 't',
  agent_id: 'default',
  status: STATUS[sequence - 1] as LifecycleRecord['status'],
  attempt: row.run.attempt,
  worker_id: row.run.lease_owner ?? 'wA',
  lease_generation: row.run.lease_generation,
  data: {},
});

const ctxOf = (row: BgRunRow) => ({ run: row.run, internal: row.internal }) as unknown as BackgroundRunContext;

/** Instance `workerId` over the shared root, reading the shared row through `store`. */
function instance(workerId: string, store: { row: BgRunRow | null }): RunWorkspaces {
  const ws = new RunWorkspaces({
    config: { background: { workspace_root: root, workspace: { allow_shared_namespaces: false } } } as never,
    logger: silentLogger,
    // The stored lifecycle: what the repair of a run first loaded here appends.
    storedLifecycle: async () =>
      Array.from({ length: store.row?.event_seq ?? 0 }, (_, i) => {
        const l = line(store.row!, i + 1);
        return { sequence: l.sequence, event: { event_type: l.event, timestamp: l.timestamp, metadata: { ...l, lifecycle_timestamp: l.timestamp } } };
      }),
    shared: { row: async () => store.row, workerId },
  });
  made.push(ws);
  return ws;
}

const files = () => ({
  run: JSON.parse(readFileSync(join(root, WS, 'run.json'), 'utf8')) as { status: string },
  sequences: readFileSync(join(root, WS, 'events.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { sequence: number }).sequence),
});

describe('a shared workspace root', () => {
  it('a queued step held back on the instance that queued the run is dropped once the other instance ran and ended it', async () => {
    root = mkdtempSync(join(tmpdir(), 'agentd-shared-ws-'));
    const store: { row: BgRunRow | null } = { row: rowAt(1, null) };
    const a = instance('wA', store);
    const b = instance('wB', store);
    // A queues the run: its step waits QUEUED_MIRROR_DELAY_MS.
    const queued = store.row!;
    const aWrote = a.mirror(ctxOf(queued), [line(queued, 1)], true, false);
    // B loads it (its first load writes the line it finds missing), claims, runs and ends it.
    await b.repairWorkspace(queued);
    store.row = rowAt(3, 'wB');
    const started = store.row;
    store.row = rowAt(4, null);
    const ended = store.row;
    await b.mirror(ctxOf(started), [line(started, 2), line(started, 3)], true, false);
    await b.mirror(ctxOf(ended), [line(ended, 4)], true, true);
    expect(files()).toEqual({ run: expect.objectContaining({ status: 'completed' }), sequences: [1, 2, 3, 4] });
    // A's delay ends (a waiter hurries it): the run moved on, so nothing is written.
    a.hurryRun(queued.run);
    await aWrote;
    expect(files()).toEqual({ run: expect.objectContaining({ status: 'completed' }), sequences: [1, 2, 3, 4] });
    expect(await a.shows(ended)).toBe(true);
  });

  it('a queued step is written when the row is where the step left it, or when this instance claimed the run meanwhile', async () => {
    root = mkdtempSync(join(tmpdir(), 'agentd-shared-ws-'));
    const store: { row: BgRunRow | null } = { row: rowAt(1, null) };
    const a = instance('wA', store);
    const queued = store.row!;
    const first = a.mirror(ctxOf(queued), [line(queued, 1)], true, false);
    a.hurryMirror();
    await first;
    expect(files()).toEqual({ run: expect.objectContaining({ status: 'queued' }), sequences: [1] });

    rmSync(join(root, WS), { recursive: true, force: true });
    const a2 = instance('wA2', store);
    const again = a2.mirror(ctxOf(queued), [line(queued, 1)], true, false);
    store.row = rowAt(3, 'wA2'); // a2 claimed it; its own steps are on their way
    a2.hurryRun(queued.run);
    await again;
    expect(files().sequences).toEqual([1]);
  });

  it('a waiter on a shared store answers for a run another instance ended only once its files show the end', async () => {
    root = mkdtempSync(join(tmpdir(), 'agentd-shared-ws-'));
    const store: { row: BgRunRow | null } = { row: rowAt(1, null) };
    const a = instance('wA', store);
    const b = instance('wB', store);
    // B's first load of the run writes its folder (the queued line), then B claims, runs and
    // commits its end; its end's files are not written yet.
    await b.repairWorkspace(store.row!);
    store.row = rowAt(4, null);
    let polls = 0;
    let answeredAt = -1;
    const ready = { resolve: () => undefined as void };
    const polled = new Promise<void>((r) => (ready.resolve = r));
    const w = waiter(store, a, () => {
      if (++polls === 3) ready.resolve();
    });
    const answer = w.waitSettled(RUN, 60_000).then((run) => {
      answeredAt = polls;
      return run;
    });
    // The row says completed, but the files show `queued`: no answer yet.
    await Promise.race([polled, answer]);
    expect(answeredAt).toBe(-1);
    const ended = store.row;
    await b.mirror(
      ctxOf(ended),
      [2, 3, 4].map((n) => line(ended, n)),
      true,
      true,
    );
    expect((await answer)?.status).toBe('completed');
    expect(files()).toEqual({ run: expect.objectContaining({ status: 'completed' }), sequences: [1, 2, 3, 4] });
  });

  it('a waiter does not wait for files when its workspace root holds no folder of the run (a root not shared)', async () => {
    root = mkdtempSync(join(tmpdir(), 'agentd-shared-ws-'));
    const store: { row: BgRunRow | null } = { row: rowAt(4, null) };
    const a = instance('wA', store);
    // Polls an hour apart: only the first read can answer within the test.
    const run = await waiter(store, a, () => undefined, 3_600_000).waitSettled(RUN, 60_000);
    expect(run?.status).toBe('completed');
  });
});

/** A waiter as the engine wires it on a shared store, reading `store.row` (`onRead` at each read). */
function waiter(store: { row: BgRunRow | null }, ws: RunWorkspaces, onRead: () => void, pollMs = 5): SettleWaiters {
  return new SettleWaiters({
    getRow: async () => {
      onRead();
      return { id: RUN, seq: 1, version: 1, value: store.row! };
    },
    flushed: () => undefined,
    sharedPollMs: pollMs,
    mirrored: (row) => ws.shows(row),
    hurry: (row) => ws.hurryRun(row.run),
  });
}
