import { sessionMachine } from '../../machines/session.machine.js';
import type { ActorSystem } from './system.js';

/**
 * Runs of one session go one at a time, in arrival order. A session with one run and nobody
 * waiting (nearly every session) is only an entry in `solo`: spawning and stopping an actor for
 * it cost about 6 % of a short run's CPU. When a second run arrives while the first is active,
 * the session moves to a session actor (`session:<id>` under the root system) that queues in
 * arrival order; the actor lives until its queue is empty again, so idle sessions cost nothing.
 */
export class SessionGate {
  private readonly waiting = new Map<string, () => void>();
  /** session id -> the run holding it, for sessions without an actor. */
  private readonly solo = new Map<string, string>();
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
    let ref = this.system.get(`session:${sessionId}`);
    if (!ref) {
      const holder = this.solo.get(sessionId);
      if (holder === undefined) {
        this.solo.set(sessionId, runId);
        return Promise.resolve();
      }
      // Contention: the actor takes over, with the holder first (admitted at once; nobody waits on it).
      this.solo.delete(sessionId);
      ref = this.system.spawn(`session:${sessionId}`, this.logic, { input: { session_id: sessionId } });
      ref.send({ type: 'ENQUEUE', run_id: holder });
    }
    const actor = ref;
    return new Promise((resolve) => {
      this.waiting.set(runId, resolve);
      actor.send({ type: 'ENQUEUE', run_id: runId });
    });
  }

  /** The run holding the session in this process (the one running its turn), or null. */
  holder(sessionId: string): string | null {
    const solo = this.solo.get(sessionId);
    if (solo !== undefined) return solo;
    const ref = this.system.get(`session:${sessionId}`);
    return ref ? ((ref.getSnapshot() as { context: { active: string | null } }).context.active ?? null) : null;
  }

  release(sessionId: string, runId: string): void {
    if (this.solo.get(sessionId) === runId) {
      this.solo.delete(sessionId);
      return;
    }
    this.waiting.delete(runId);
    const ref = this.system.get(`session:${sessionId}`);
    if (!ref) return;
    ref.send({ type: 'RELEASE', run_id: runId });
    const snap = ref.getSnapshot();
    if (snap.value === 'idle') this.system.stop(`session:${sessionId}`);
  }
}
