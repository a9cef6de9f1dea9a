// Unit test of the event outbox: events a row write did not store are appended behind it (and
// stay unacked until then); events it stored itself are only mirrored, in order. And the
// workspace repair the outbox's load runs (one per run at a time, retried after a failure).
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
