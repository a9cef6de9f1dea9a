// When tasks are due: an in-memory min-heap of each enabled task's next due time and one precise
// timer to the earliest, so a tick looks at one entry, not at every task, and dispatch lateness
// stays well under the poll interval (the manager's poll ticker calls dispatchDue too, covering
// waits beyond MAX_TIMER_MS). It knows times, not tasks: each due task id goes to `fire`, which
// the scheduler runs inside the task's job. The due time itself comes from the schedule row
// (dueTimeOf in schedule-rows.ts).
import type { Clock } from '../clock.js';
import { DueHeap } from './heap.js';

/** Longest single wait of the due timer; the poll ticker covers anything beyond. */
const MAX_TIMER_MS = 60_000;

export class DueTicker {
  private readonly heap = new DueHeap();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private ticking = false;

  constructor(
    private readonly clock: Clock,
    private readonly fire: (taskId: string) => void,
  ) {}

  start(): void {
    this.ticking = true;
    this.arm();
  }

  stop(): void {
    this.ticking = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Infinity;
  }

  /** Sets the task's next due time (null: not due, removed from the heap). */
  set(taskId: string, at: number | null): void {
    this.heap.set(taskId, at);
    if (at !== null) this.arm();
  }

  /** A task popped but not advanced (its dispatch failed): due again at `at`, unless something set it meanwhile. */
  retry(taskId: string, at: number): void {
    if (this.heap.get(taskId) === null) this.set(taskId, at);
  }

  /** Pops every due task and hands it to `fire`. */
  dispatchDue(): void {
    if (!this.ticking) return;
    for (const { task_id } of this.heap.popDue(this.clock.now())) this.fire(task_id);
    this.arm();
  }

  /** A precise timer to the earliest due time. */
  private arm(): void {
    if (!this.ticking) return;
    const next = this.heap.peek();
    if (next === null) return;
    if (this.timer && this.timerAt <= next) return;
    if (this.timer) clearTimeout(this.timer);
    const delay = Math.min(MAX_TIMER_MS, Math.max(0, next - this.clock.now()));
    this.timerAt = next;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.timerAt = Infinity;
      this.dispatchDue();
    }, delay);
    this.timer.unref();
  }
}
