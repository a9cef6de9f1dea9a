// A min-heap of (due time, task id) with lazy deletion: the ticker looks only at the top, so
// 10,000 idle tasks cost one comparison per tick instead of a scan (issue benchmark: idle CPU).

interface Entry {
  at: number;
  task_id: string;
}

export class DueHeap {
  private items: Entry[] = [];
  /** The one live due time per task; heap entries that disagree are stale and skipped. */
  private current = new Map<string, number>();

  get size(): number {
    return this.current.size;
  }

  /** Sets (or replaces) the task's next due time; null removes it. */
  set(taskId: string, at: number | null): void {
    if (at === null) {
      this.current.delete(taskId);
      return;
    }
    this.current.set(taskId, at);
    this.items.push({ at, task_id: taskId });
    this.up(this.items.length - 1);
    // Stale entries pile up when due times move often; rebuild once they dominate.
    if (this.items.length > 64 && this.items.length > this.current.size * 4) this.rebuild();
  }

  get(taskId: string): number | null {
    return this.current.get(taskId) ?? null;
  }

  /** Earliest live due time, or null. */
  peek(): number | null {
    this.dropStale();
    return this.items.length > 0 ? this.items[0].at : null;
  }

  /** Removes and returns every task due at or before `now`, earliest first. */
  popDue(now: number): Array<{ task_id: string; at: number }> {
    const out: Array<{ task_id: string; at: number }> = [];
    for (;;) {
      this.dropStale();
      const top = this.items[0];
      if (!top || top.at > now) break;
      this.pop();
      this.current.delete(top.task_id);
      out.push({ task_id: top.task_id, at: top.at });
    }
    return out;
  }

  private dropStale(): void {
    while (this.items.length > 0) {
      const top = this.items[0];
      if (this.current.get(top.task_id) === top.at) return;
      this.pop();
    }
  }

  private rebuild(): void {
    this.items = [...this.current.entries()].map(([task_id, at]) => ({ at, task_id }));
    for (let i = (this.items.length >> 1) - 1; i >= 0; i--) this.down(i);
  }

  private pop(): void {
    const last = this.items.pop()!;
    if (this.items.length > 0) {
      this.items[0] = last;
      this.down(0);
    }
  }

  private up(i: number): void {
    const items = this.items;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (items[p].at <= items[i].at) break;
      [items[p], items[i]] = [items[i], items[p]];
      i = p;
    }
  }

  private down(i: number): void {
    const items = this.items;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < items.length && items[l].at < items[m].at) m = l;
      if (r < items.length && items[r].at < items[m].at) m = r;
      if (m === i) return;
      [items[m], items[i]] = [items[i], items[m]];
      i = m;
    }
  }
}
