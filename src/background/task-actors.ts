// The task machines: one actor per enabled task (`task:<id>`) under its own supervisor group
// (`group:tasks`, a child of the root). Not directly under the root: xstate copies a parent's
// children map on every spawn and stop, so 10,000 cron tasks there made every run's spawn and
// stop cost O(tasks), the main cost of every background run; the group is sharded, so spawning
// every task's actor at start-up (and stopping them at shutdown) is not O(tasks²) either. The
// actor decides; its `dispatch` and `drop` effects are collected as data while an event is sent
// (decide) and carried out by the scheduler (scheduler.ts); a drop is only logged.
import { taskMachine, type DispatchParams, type DropParams, type TaskEvent } from '../../machines/task.machine.js';
import type { ActorSystem, SupervisorGroup } from '../runtime/system.js';
import type { AppLogger } from '../telemetry/logger.js';
import type { ScheduleRow, TaskRow } from './types.js';

const actorId = (taskId: string) => `task:${taskId}`;
type TaskEffect = { type: 'dispatch'; params: DispatchParams } | { type: 'drop'; params: DropParams };

/**
 * A spawn or stop copies one shard's children: 10,000 tasks leave ~40 per shard, 100,000 ~400.
 * Measured (10,000 cron tasks, start / SIGTERM to exit): 64 shards 1.5 / 0.4 s, 256 1.4 / 0.34 s,
 * 1,024 1.6 / 1.7 s (stopping many shard supervisors costs too). Shards are made on first use.
 */
const TASK_GROUP_SHARDS = 256;

export class TaskActors {
  private readonly group: SupervisorGroup;
  /** Effects of the event being sent to a task actor (see decide). */
  private effects: TaskEffect[] = [];
  private readonly logic = taskMachine.provide({
    actions: {
      dispatch: (_args, params) => void this.effects.push({ type: 'dispatch', params }),
      drop: (_args, params) => void this.effects.push({ type: 'drop', params }),
    },
  });

  constructor(
    system: ActorSystem,
    private readonly logger: AppLogger,
  ) {
    // Sharded: tens of thousands of tasks each spawn and stop an actor (see SupervisorGroup).
    this.group = system.group('tasks', { shards: TASK_GROUP_SHARDS });
  }

  has(taskId: string): boolean {
    return this.group.get(actorId(taskId)) !== undefined;
  }

  /** (Re)starts an enabled task's actor from its task and schedule row. */
  start(task: TaskRow, sched: ScheduleRow | null): void {
    this.group.stop(actorId(task.task_id));
    this.group.spawn(actorId(task.task_id), this.logic, {
      input: {
        task_id: task.task_id,
        overlap_policy: task.overlap_policy,
        enabled: true,
        paused: sched?.paused ?? false,
        paused_reason: sched?.paused_reason ?? null,
      },
    });
  }

  stop(taskId: string): void {
    this.group.stop(actorId(taskId));
  }

  /** An edited task whose actor runs: its overlap policy, then its pause state, follow the stored rows. */
  update(task: TaskRow, sched: ScheduleRow | null): void {
    const ref = this.group.get(actorId(task.task_id));
    if (!ref) return;
    this.decide(task.task_id, { type: 'UPDATE', overlap_policy: task.overlap_policy });
    const paused = (ref.getSnapshot() as { context: { paused: boolean } }).context.paused;
    if (sched?.paused && !paused) this.decide(task.task_id, { type: 'PAUSE', reason: sched.paused_reason });
    if (!sched?.paused && paused) this.decide(task.task_id, { type: 'RESUME' });
  }

  /** One event to the task's actor; returns the dispatches it decided (drops are logged). */
  decide(taskId: string, event: TaskEvent): DispatchParams[] {
    const ref = this.group.get(actorId(taskId));
    if (!ref) return [];
    // The actor processes the event synchronously (nothing else is sending to it), so its
    // effects are exactly what it pushes while send() runs.
    this.effects = [];
    ref.send(event);
    const actions = this.effects;
    this.effects = [];
    const out: DispatchParams[] = [];
    for (const a of actions) {
      if (a.type === 'dispatch') out.push(a.params);
      else {
        const d = a.params;
        this.logger.info({ task_id: d.task_id, occurrence_id: d.occurrence?.occurrence_id ?? null, reason: d.reason }, 'background occurrence dropped');
      }
    }
    return out;
  }
}
