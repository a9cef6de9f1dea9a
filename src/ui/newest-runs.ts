// A run list newest first, as the Runs page, the Background page and a task's runs view show it.
import { useEffect, useState } from 'preact/hooks';
import { api } from './api.js';
import { usePoll } from './router.js';

/** What a newest-first list shows: the newest page merged with the older pages loaded so far. */
export interface NewestRuns {
  runs: any[];
  error: string | null;
  /** Set while older pages remain. */
  loadOlder: (() => Promise<void>) | null;
}

/**
 * `path` (a list route with `order=desc` and `limit`, filters included) polled every 2 s: one
 * request reads the newest page whatever the store holds, and "Older runs" follows next_cursor on
 * demand, keeping at most `keep`. A changed `path` (a filter) starts the older pages over; `tick`
 * re-reads at once (a run started here). Reading oldest first and reversing showed, past one page,
 * the newest of the oldest runs and never the latest.
 */
export function useNewestRuns(path: string, keep: number, tick: number): NewestRuns {
  const [runs, setRuns] = useState<any[]>([]);
  const [older, setOlder] = useState<{ runs: any[]; cursor: string | null }>({ runs: [], cursor: null });
  const [error, setError] = useState<string | null>(null);
  usePoll(
    async () => {
      try {
        const page = await api(path);
        setRuns(page.runs);
        setOlder((o) => (o.runs.length ? o : { runs: [], cursor: page.next_cursor }));
        setError(null);
      } catch (e) {
        setError(String(e));
      }
    },
    2000,
    [path, tick],
  );
  useEffect(() => setOlder({ runs: [], cursor: null }), [path]);
  const loadOlder = async () => {
    if (!older.cursor) return;
    try {
      const page = await api(`${path}&cursor=${encodeURIComponent(older.cursor)}`);
      setOlder({ runs: [...older.runs, ...page.runs].slice(0, keep), cursor: page.next_cursor });
    } catch (e) {
      setError(String(e));
    }
  };
  const seen = new Set(runs.map((r) => r.run_id));
  return { runs: [...runs, ...older.runs.filter((r) => !seen.has(r.run_id))], error, loadOlder: older.cursor ? loadOlder : null };
}
