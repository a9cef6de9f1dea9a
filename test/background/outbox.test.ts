// Unit test of the event outbox: events a row write did not store are appended behind it (and
// stay unacked until then); events it stored itself are only mirrored, in order. And the
// workspace repair the outbox's load runs (one per run at a time, retried after a failure).
import { createHook } from 'node:async_hooks';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { BackgroundRunContext } from '../../machines/background-run.machine.js';
import { EventOutbox } from '../../src/background/outbox.js';
import { RunWorkspaces } from '../../src/background/run-workspace.js';
import type { TelemetryEmitter } from '../../src/runtime/emitter.js';
import type { Store } from '../../src/store/store.js';
import { silentLogger } from '../../src/telemetry/logger.js';

function outbox(onMirror: (lifecycle: Array<{ event: string }>) => void = () => undefined) {
  const appended: string[][] = [];
  const telemetry = {
    emitMany: async (events: Array<{ event_type: string }>) => {
      appended.push(events.map((e) => e.event_type));
      return [];
    },
  } as unknown as TelemetryEmitter;
  const workspaces = { mirror: async (_c: unknown, lifecycle: Array<{ event: string }>) => onMirror(lifecycle) } as unknown as RunWorkspaces;
  const box = new EventOutbox({
    store: {} as Store,
    telemetry,
    workerId: 'w1',
    workspaces: () => workspaces,
    logger: silentLogger,
    onAppendFailed: () => undefined,
  });
  return { box, appended };
}

const ctx = (runId: string, status: 'completed' | 'running') =>
  ({
    run: { run_id: runId, task_id: 't', agent_id: 'default', session_id: 's', status, attempt: 1, lease_owner: 'w1', lease_generation: 1, error: null },
    internal: { trace_id: 'tr', span_id: 'sp' },
  }) as unknown as BackgroundRunContext;

/** Lets every pending promise continuation run (the outbox chain is a few microtasks deep). */
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('EventOutbox', () => {
  it('appends events a write did not store, and keeps them unacked until the log has them', async () => {
    const { box, appended } = outbox();
    const r = ctx('bgrun_b', 'running');
    const flushed = box.queueEmit(r, [box.lifecycleOf(r, { type: 'background_run_queued' }, 1, '2030-01-01T00:00:00.000Z')], { runJson: true, mirror: false });
    expect(box.unacked('bgrun_b').map((l) => l.sequence)).toEqual([1]);
    await flushed;
    expect(appended).toEqual([['background_run_queued']]);
    expect(box.unacked('bgrun_b')).toEqual([]);
  });

  it('appends nothing for events the row write stored itself, and mirrors them in order behind earlier appends', async () => {
    const mirrored: string[][] = [];
    const { box, appended } = outbox((lifecycle) => mirrored.push(lifecycle.map((l) => l.event)));
    const r = ctx('bgrun_a', 'running');
    void box.queueEmit(r, [box.lifecycleOf(r, { type: 'background_run_queued' }, 1, '2030-01-01T00:00:00.000Z')], { runJson: true, mirror: true });
    const c = ctx('bgrun_a', 'completed');
    const flushed = box.queueEmit(c, [box.lifecycleOf(c, { type: 'background_run_completed' }, 2, '2030-01-01T00:00:00.000Z')], {
      runJson: true,
      mirror: true,
      stored: true,
    });
    // Already in the log (written with the row): never in the unacked list the next row write carries.
    expect(box.unacked('bgrun_a').map((l) => l.sequence)).toEqual([1]);
    await flushed;
    expect(appended).toEqual([['background_run_queued']]);
    expect(mirrored).toEqual([['background_run_queued'], ['background_run_completed']]);
    await settle();
    expect(box.has('bgrun_a')).toBe(false);
  });
});

describe('EventOutbox, events stored with the row (LevelDB: every row write of a drained run)', () => {
  it("hands the mirror step to the workspace lane at once, one promise besides the lane's, and answers with the lane's promise", async () => {
    const issued: string[] = [];
    let written!: () => void;
    const lane = new Promise<void>((r) => (written = r));
    const box = new EventOutbox({
      store: {} as Store,
      telemetry: {} as TelemetryEmitter,
      workerId: 'w1',
      workspaces: () => ({ mirror: (_c: unknown, l: Array<{ event: string }>) => (issued.push(...l.map((x) => x.event)), lane) }) as unknown as RunWorkspaces,
      logger: silentLogger,
      onAppendFailed: () => undefined,
    });
    const r = ctx('bgrun_c', 'running');
    const line = box.lifecycleOf(r, { type: 'background_run_started' }, 2, '2030-01-01T00:00:00.000Z');
    let promises = 0;
    const hook = createHook({ init: (_id, type) => void (type === 'PROMISE' && promises++) });
    hook.enable();
    let flushed: Promise<unknown>;
    try {
      flushed = box.queueEmit(r, [line], { runJson: true, mirror: true, stored: true });
    } finally {
      hook.disable();
    }
    // Issued before any microtask ran (nothing of the run was on its way to order it behind).
    expect(issued).toEqual(['background_run_started']);
    expect(flushed).toBe(lane);
    // The chain took six (then, its async step, catch, then, finally and its own): one now, to drop the run's state once written.
    expect(promises).toBe(1);
    expect(box.flushed('bgrun_c')).toBe(lane);
    written();
    await settle();
    expect(box.has('bgrun_c')).toBe(false);
  });

  it('a stored step behind an append on its way waits for it: lines reach the lane in order', async () => {
    const mirrored: string[][] = [];
    let appendDone!: () => void;
    const appending = new Promise<void>((r) => (appendDone = r));
    const box = new EventOutbox({
      store: {} as Store,
      telemetry: { emitMany: () => appending.then(() => []) } as unknown as TelemetryEmitter,
      workerId: 'w1',
      workspaces: () => ({ mirror: async (_c: unknown, l: Array<{ event: string }>) => void mirrored.push(l.map((x) => x.event)) }) as unknown as RunWorkspaces,
      logger: silentLogger,
      onAppendFailed: () => undefined,
    });
    const r = ctx('bgrun_d', 'running');
    void box.queueEmit(r, [box.lifecycleOf(r, { type: 'background_run_queued' }, 1, '2030-01-01T00:00:00.000Z')], { runJson: true, mirror: true });
    const c = ctx('bgrun_d', 'completed');
    const flushed = box.queueEmit(c, [box.lifecycleOf(c, { type: 'background_run_completed' }, 2, '2030-01-01T00:00:00.000Z')], {
      runJson: true,
      mirror: true,
      stored: true,
    });
    await settle();
    expect(mirrored).toEqual([]);
    appendDone();
    await flushed;
    expect(mirrored).toEqual([['background_run_queued'], ['background_run_completed']]);
  });
});

describe('RunWorkspaces.repairWorkspace', () => {
  it('shares one repair among callers, and a repair that failed is tried again by the next caller', async () => {
    const root = mkdtempSync(join(tmpdir(), 'agentd-repair-'));
    let reads = 0;
    const lifecycle = [1, 2].map((sequence) => ({
      sequence,
      event: { event_type: 'background_run_queued', timestamp: 't', metadata: { run_id: 'r1', status: 'queued' } },
    }));
    const ws = new RunWorkspaces({
      config: { background: { workspace_root: root, workspace: { allow_shared_namespaces: false } } } as never,
      logger: silentLogger,
      storedLifecycle: async () => {
        if (++reads === 1) throw new Error('store read failed');
        return lifecycle;
      },
    });
    const row = {
      run: { run_id: 'r1', task_id: 't', agent_id: 'default', status: 'completed', workspace_path: 'background/default/t/r1' },
      internal: { write_events_jsonl: true, write_run_json: true },
      event_seq: 2,
    } as never;
    await expect(ws.repairWorkspace(row)).rejects.toThrow('store read failed');
    // Two callers at once: one repair (one read), both wait for it.
    await Promise.all([ws.repairWorkspace(row), ws.repairWorkspace(row)]);
    expect(reads).toBe(2);
    const lines = readFileSync(join(root, 'background/default/t/r1/events.jsonl'), 'utf8').trim().split('\n');
    expect(lines.map((l) => JSON.parse(l).sequence)).toEqual([1, 2]);
    rmSync(root, { recursive: true, force: true });
  });
});
