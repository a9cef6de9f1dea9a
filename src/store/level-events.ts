// The LevelDB adapter's event log: what an append stages into a group-commit round (the event
// bodies and the round's postings), and the reads: a page of the log, or a walk over the index of
// the most selective filter (level-keys.ts has the layout of the postings).
import { storedEventText } from './event-text.js';
import { EVENT_PREFIX, SEP, clampLimit, end, esc, eventIndexHead, eventIndexPrefix, tailNumber, type BatchOp, type Db } from './level-keys.js';
import {
  EVENT_INDEX_FIELDS,
  decodeCursor,
  encodeCursor,
  type EventIndexField,
  type EventInput,
  type EventQuery,
  type EventTextPage,
  type StoredEvent,
} from './store.js';

// ---------------------------------------------------------------- appends

/**
 * A round's postings: indexed field -> value -> the round's cursors with that value, in order: the
 * cursor itself while there is one (most values of a round of single-event appends: a run, a trace),
 * an array from the second on.
 */
export type RoundPostings = Map<EventIndexField, Map<string, string | string[]>>;

export const newRoundPostings = (): RoundPostings => new Map(EVENT_INDEX_FIELDS.map((f) => [f, new Map<string, string | string[]>()]));

/**
 * Stages one appendEvents call (all or nothing) into a round: every event gets the next cursor,
 * its stored copy (`{...e, cursor}`), whose JSON text is serialised once, put under its cursor and
 * remembered for the streams (event-text.ts), and its index values join the round's postings.
 * Throws, having staged nothing, when an event cannot be serialised (a BigInt, a cycle).
 *
 * Runs once per appended event on the ingest path, so it allocates little: the copy is the stored
 * event and serialising it gives exactly JSON.stringify({...e, cursor}); postings are grouped by
 * field and raw value, and their keys are built once per value in stagePostings.
 */
export function stageEvents(events: EventInput[], first: number, batch: BatchOp[], postings: RoundPostings): StoredEvent[] {
  const n = events.length;
  const stored: StoredEvent[] = new Array(n);
  const texts: string[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const e = events[i];
    // Object.assign makes a smaller copy than a spread and sets `cursor` in place when the event
    // has one, as {...e, cursor} would; it would set the prototype for an own `__proto__` key (a
    // JSON.parse result may have one), so such an event is spread instead.
    const s = (Object.prototype.hasOwnProperty.call(e, '__proto__') ? { ...e } : Object.assign({}, e)) as StoredEvent;
    s.cursor = encodeCursor(first + i);
    texts[i] = JSON.stringify(s);
    stored[i] = s;
  }
  for (let i = 0; i < n; i++) {
    const s = stored[i];
    const c = s.cursor;
    batch.push({ type: 'put', key: EVENT_PREFIX + c, value: texts[i] });
    storedEventText.set(s, texts[i]);
    for (const field of EVENT_INDEX_FIELDS) {
      const v = s[field];
      if (typeof v !== 'string') continue;
      const byValue = postings.get(field)!;
      const had = byValue.get(v);
      if (had === undefined) byValue.set(v, c);
      else if (typeof had === 'string') byValue.set(v, [had, c]);
      else had.push(c);
    }
  }
  return stored;
}

/**
 * The round's postings as batch puts: one key per indexed value, ending in the last of its
 * cursors; '' when that is the only one, else all of them concatenated.
 */
export function stagePostings(postings: RoundPostings, batch: BatchOp[]): void {
  // (forEach: no entry pair per indexed value of every round.)
  postings.forEach((byValue, field) => {
    const head = eventIndexHead(field);
    byValue.forEach((cs, v) => {
      if (typeof cs === 'string') batch.push({ type: 'put', key: head + esc(v) + SEP + cs, value: '' });
      else batch.push({ type: 'put', key: head + esc(v) + SEP + cs[cs.length - 1], value: cs.join('') });
    });
  });
}

// ---------------------------------------------------------------- reads

/** A string filter is one value; an array is an OR; an empty array puts no constraint. */
const normaliseFilters = (q: EventQuery): Array<[EventIndexField, string[]]> => {
  const out: Array<[EventIndexField, string[]]> = [];
  const f = q.filters ?? {};
  for (const field of EVENT_INDEX_FIELDS) {
    const v = f[field];
    const values = typeof v === 'string' ? [v] : Array.isArray(v) ? [...new Set(v.filter((x) => typeof x === 'string'))] : [];
    if (values.length > 0) out.push([field, values]);
  }
  return out;
};

/** Walk order for event queries: the first filtered field in this list drives the index walk. */
const WALK_PREFERENCE: EventIndexField[] = ['run_id', 'trace_id', 'task_id', 'session_id', 'event_type'];

/** Events whose timestamp cannot be parsed count as expired, so they can never pin retention. */
export const isBefore = (timestamp: unknown, cutoffMs: number): boolean => {
  const t = typeof timestamp === 'string' ? Date.parse(timestamp) : NaN;
  return Number.isNaN(t) || t < cutoffMs;
};

/** One page of `readEventsJson`, read on one snapshot. */
export async function readEventsPage(db: Db, query: EventQuery): Promise<EventTextPage> {
  {
    const limit = clampLimit(query.limit, 200);
    const after = query.after ? encodeCursor(decodeCursor(query.after)) : null;
    const filters = normaliseFilters(query);
    const snapshot = db.snapshot();
    try {
      const page = filters.length === 0 ? await scanLog(db, snapshot, after, limit) : await walkIndex(db, snapshot, filters, after, limit);
      return { events: page.texts, next_cursor: page.texts.length === limit ? page.last : null };
    } finally {
      await snapshot.close();
    }
  }
}

async function scanLog(db: Db, snapshot: ReturnType<Db['snapshot']>, after: string | null, limit: number): Promise<{ texts: string[]; last: string | null }> {
  const entries = (await db.iterator({ gt: after ? EVENT_PREFIX + after : EVENT_PREFIX, lt: end(EVENT_PREFIX), limit, snapshot }).all()) as Array<
    [string, string]
  >;
  return { texts: entries.map(([, t]) => t), last: entries.length ? tailNumber(entries[entries.length - 1][0]) : null };
}

/**
 * Walks the index of the most selective filtered field (several values: the walks are merged in
 * cursor order), loads the bodies with getMany and checks the other filters on them. Only the
 * postings of the filtered values are read, never the whole log. Bodies are returned as stored
 * text; they are parsed only when another filter has to be checked on them.
 */
async function walkIndex(
  db: Db,
  snapshot: ReturnType<Db['snapshot']>,
  filters: Array<[EventIndexField, string[]]>,
  after: string | null,
  limit: number,
): Promise<{ texts: string[]; last: string | null }> {
  const walked = WALK_PREFERENCE.find((f) => filters.some(([field]) => field === f))!;
  const prefixes = filters.find(([f]) => f === walked)![1].map((v) => eventIndexPrefix(walked, v));
  const rest = filters.filter(([f]) => f !== walked).map(([f, vs]) => [f, new Set(vs)] as const);
  const texts: string[] = [];
  let last: string | null = null;
  let pos = after;
  // Without other filters every index hit is a result, so fetch exactly what is missing;
  // otherwise read bigger chunks, growing while hits are sparse.
  let chunk = rest.length ? Math.max(limit, 128) : limit;
  while (texts.length < limit) {
    const want = rest.length ? chunk : limit - texts.length;
    // Each list: the next `want` cursors after `pos` under one value. Reading `want` postings
    // yields at least that many cursors unless the value has no more (a posting holds >= 1).
    const lists = await Promise.all(
      prefixes.map(async (p) => {
        const entries = (await db.iterator({ gt: pos ? p + pos : p, lt: end(p), limit: want, snapshot }).all()) as Array<[string, string]>;
        const out: string[] = [];
        for (const [key, value] of entries) {
          if (value === '') out.push(tailNumber(key));
          else for (let i = 0; i < value.length; i += 16) out.push(value.slice(i, i + 16));
        }
        // A posting may start at or before `pos` (it was cut short by the previous page).
        const fresh = pos === null ? out : out.filter((c) => c > pos!);
        return { cursors: fresh.length > want ? fresh.slice(0, want) : fresh, done: entries.length < want && fresh.length <= want };
      }),
    );
    let cursors: string[];
    let exhausted: boolean;
    if (lists.length === 1) {
      cursors = lists[0].cursors;
      exhausted = lists[0].done;
    } else {
      // Each list holds its own next `want` cursors, so the first `want` of their union are
      // exactly the next `want` cursors overall; the rest are read again next round.
      const all = [...new Set(lists.flatMap((l) => l.cursors))].sort();
      cursors = all.slice(0, want);
      exhausted = lists.every((l) => l.done) && all.length <= want;
    }
    if (cursors.length === 0) break;
    const bodies = await db.getMany(
      cursors.map((c) => EVENT_PREFIX + c),
      { snapshot },
    );
    for (let i = 0; i < bodies.length; i++) {
      const t = bodies[i];
      if (t === undefined) continue; // deleted by retention after the posting was read
      if (rest.length) {
        const e = JSON.parse(t) as StoredEvent;
        if (!rest.every(([f, vs]) => typeof e[f] === 'string' && vs.has(e[f] as string))) continue;
      }
      texts.push(t);
      last = cursors[i];
      if (texts.length === limit) break;
    }
    pos = cursors[cursors.length - 1];
    if (exhausted) break;
    chunk = Math.min(chunk * 2, 1000);
  }
  return { texts, last };
}
