// Unit test of the event outbox's joinNextWrite: a run's last events wait for the next row write so
// they share its store round, and go out at once when released (no timing assertions).
import { describe, expect, it } from 'vitest';
import type { BackgroundRunContext } from '../../machines/background-run.machine.js';
import { EventOutbox } from '../../src/background/outbox.js';
import type { RunWorkspaces } from '../../src/background/run-workspace.js';
import type { TelemetryEmitter } from '../../src/runtime/emitter.js';
import type { Store } from '../../src/store/store.js';
import { silentLogger } from '../../src/telemetry/logger.js';

function outbox() {
  const appended: string[][] = [];
  const telemetry = {
    emitMany: async (events: Array<{ event_type: string }>) => {
      appended.push(events.map((e) => e.event_type));
      return [];
    },
  } as unknown as TelemetryEmitter;
  const workspaces = { mirror: async () => undefined } as unknown as RunWorkspaces;
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

describe('EventOutbox joinNextWrite', () => {
  it('holds a run\u2019s last events until the next row write is issued, then appends them in order', async () => {
    const { box, appended } = outbox();
    const c = ctx('bgrun_a', 'completed');
    const flushed = box.queueEmit(c, [box.lifecycleOf(c, { type: 'background_run_completed' }, 3, '2030-01-01T00:00:00.000Z')], {
      runJson: true,
      mirror: false,
      joinNextWrite: true,
    });
    await settle();
    expect(appended).toEqual([]);
    // Still in the run's unacked list: the next row write of the run would carry it in its outbox.
    expect(box.unacked('bgrun_a').map((l) => l.sequence)).toEqual([3]);

    box.releaseJoining();
    await flushed;
    expect(appended).toEqual([['background_run_completed']]);
    expect(box.unacked('bgrun_a')).toEqual([]);
  });

  it('appends at once without joinNextWrite, and flushAll releases held appends', async () => {
    const { box, appended } = outbox();
    const r = ctx('bgrun_b', 'running');
    await box.queueEmit(r, [box.lifecycleOf(r, { type: 'background_run_started' }, 2, '2030-01-01T00:00:00.000Z')], { runJson: true, mirror: false });
    expect(appended).toEqual([['background_run_started']]);

    const c = ctx('bgrun_c', 'completed');
    void box.queueEmit(c, [box.lifecycleOf(c, { type: 'background_run_completed' }, 3, '2030-01-01T00:00:00.000Z')], {
      runJson: true,
      mirror: false,
      joinNextWrite: true,
    });
    await settle();
    expect(appended).toHaveLength(1);
    await box.flushAll();
    expect(appended).toEqual([['background_run_started'], ['background_run_completed']]);
  });
});
