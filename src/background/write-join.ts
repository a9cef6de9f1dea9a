// Lets a background run's completion share a store round (one fsync) with the next row write,
// typically the claim of the next queued run: the completion frees its worker at once (the actor
// is no longer held), so a claim pass starts, and the completion's commit waits until the claim's
// commit is issued (or a few ms, or the end of the claim pass under way), then is issued in the
// same turn of the event loop. Both then go to the store in the same group-commit round; on the
// embedded stores that is one atomic write, so a crash leaves both or neither.
//
// Why this is safe: the agent run's end is durable before its completion is decided (the bridge
// hears of it once stored), so while the completion waits, a crash leaves the run `running` with
// its agent run ended, exactly the state a crash between the two writes would leave: the next
// start settles it from the agent run (its RECOVER carries the agent run's end, read by
// AgentBridge.agentSettledOf) without running anything again.
//
// An end or park folded into its agent run's final commit (RunHosts.foldInto) waits here while
// that commit has not gone to the store (CarriedEvents.hold: its creating write still held back,
// past CREATE_FOLD_MS too while this waits, or on a shared store a new write): nothing of either run's
// end is durable meanwhile, so a crash is a crash before the agent run's end (its idempotent work
// may run again; a non-idempotent tool never waits this way: it hands the creating write over at
// once, and its result's write goes before the final one, which only a new write may hold).

/** Longest a completion waits for another row write to share its store round, while no claim pass is under way. */
const JOIN_NEXT_WRITE_MS = 5;
/**
 * Longest it waits while a claim pass is under way (`writeExpected`). On PostgreSQL a pass's
 * queue statement alone takes longer than JOIN_NEXT_WRITE_MS on a loaded server: the completion
 * then went alone, and the claim's write queued behind its round (one more round trip and
 * transaction per drained run at concurrency 1). A pass claims within one statement or two;
 * this bounds a stuck one.
 */
const JOIN_PASS_MS = 100;

export class WriteJoin {
  private waiting: Array<() => void> = [];
  private timer: NodeJS.Timeout | null = null;
  /** When the first write now waiting began to (performance.now()). */
  private since = 0;

  /** `writeExpected`: a row write is on its way (a claim pass is under way): the wait goes on, up to JOIN_PASS_MS. */
  constructor(private readonly writeExpected: () => boolean = () => false) {}

  /** Resolves just before the next row write is issued (release), or after JOIN_NEXT_WRITE_MS (JOIN_PASS_MS while a claim pass runs). */
  next(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.waiting.push(resolve);
      if (!this.timer) {
        this.since = performance.now();
        this.arm();
      }
    });
  }

  private arm(): void {
    this.timer = setTimeout(() => {
      if (this.writeExpected() && performance.now() - this.since < JOIN_PASS_MS) this.arm();
      else this.release();
    }, JOIN_NEXT_WRITE_MS);
    this.timer.unref?.();
  }

  /** A row write is about to be issued (or the engine closes): the writes waiting go now, in this same turn. */
  release(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const waiting = this.waiting;
    this.waiting = [];
    for (const go of waiting) go();
  }
}
