import type { AnyActorRef } from 'xstate';
import { sessionMachine } from '../../machines/session.machine.js';
import type { ActorSystem } from './system.js';

/**
 * Runs of one session go one at a time, in arrival order, through a session actor
 * (`session:<id>` under the root system). The actor lives only while the session has a run
 * active or queued, so idle sessions cost nothing.
 */
export class SessionGate {
  private readonly waiting = new Map<string, () => void>();
  private readonly logic;

  constructor(private readonly system: ActorSystem) {
    this.logic = sessionMachine.provide({
      actions: {
        admit: (_args, params) => {
          const go = this.waiting.get(params.run_id);
          this.waiting.delete(params.run_id);
          go?.();
        },
      },
    });
  }

  /** Resolves when it is this run's turn in its session. */
  acquire(sessionId: string, runId: string): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.set(runId, resolve);
      this.actorFor(sessionId).send({ type: 'ENQUEUE', run_id: runId });
    });
  }

  release(sessionId: string, runId: string): void {
    this.waiting.delete(runId);
    const ref = this.system.get(`session:${sessionId}`);
    if (!ref) return;
    ref.send({ type: 'RELEASE', run_id: runId });
    const snap = ref.getSnapshot();
    if (snap.value === 'idle') this.system.stop(`session:${sessionId}`);
  }

  private actorFor(sessionId: string): AnyActorRef {
    return this.system.get(`session:${sessionId}`) ?? this.system.spawn(`session:${sessionId}`, this.logic, { input: { session_id: sessionId } });
  }
}
