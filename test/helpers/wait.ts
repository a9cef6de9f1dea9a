// The one way a test waits for something to happen: await the thing, never a fixed sleep.
// `waitFor` polls a predicate (a read over HTTP, a counter, a store row) until it answers a value;
// `waitForEvent` reads a stream (SSE frames, a bus subscription) until a frame matches. Both fail
// with `what` and the last error after `timeoutMs`, which only stops a hung test: it is generous,
// never a statement about speed (the machine may be loaded). A sleep that is part of a scenario
// (letting a lease lapse, proving that nothing happens) stays a sleep, with a comment saying so.

export interface WaitOptions {
  /** Gives up after this long (default 10 s): only a hung test should ever reach it. */
  timeoutMs?: number;
  /** Names the awaited state in the failure. */
  what?: string;
  /** Pause between polls (default 25 ms). */
  intervalMs?: number;
}

/** Polls `fn` until it answers a truthy value, and answers it. A throw counts as "not yet" (kept for the failure). */
export async function waitFor<T>(fn: () => Promise<T | null | undefined | false> | T | null | undefined | false, opts: WaitOptions = {}): Promise<T> {
  const { timeoutMs = 10_000, what = 'condition', intervalMs = 25 } = opts;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what} not reached in ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * Reads `stream` until a frame satisfies `match`, and answers that frame (the frames before it are
 * consumed). Fails when the stream ends first or after `timeoutMs`.
 */
export async function waitForEvent<F>(stream: AsyncIterable<F>, match: (frame: F) => boolean, opts: Omit<WaitOptions, 'intervalMs'> = {}): Promise<F> {
  const { timeoutMs = 10_000, what = 'event' } = opts;
  const it = stream[Symbol.asyncIterator]();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_r, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} not seen in ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    for (;;) {
      const next = await Promise.race([it.next(), timeout]);
      if (next.done) throw new Error(`the stream ended before ${what}`);
      if (match(next.value)) return next.value;
    }
  } finally {
    clearTimeout(timer);
  }
}
