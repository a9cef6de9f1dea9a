// The PostgreSQL adapter's writes: a group commit like LevelStore's (see the header of
// postgres.ts). `commit` and `append` calls queue in call order; a round (one at a time per
// process, started on a setImmediate) takes every queued job (bounded), calls the commits'
// function forms, and sends them all in ONE statement, agentd.write_round(...). The events of a
// commitWithEvents ride in its commit: write_round stores them only if that commit applied
// (migration 005). Change-feed
// notifications (NOTIFY, src/store/changes.ts) queue here too and ride in the next round's
// statement: no transaction, round trip or WAL flush of their own (see `notify`).
import pg from 'pg';
import { ERROR_CODES, isTransientCode } from './pg-errors.js';
import { CHANGE_CHANNELS, MAX_CHANGE_PAYLOAD, type AppendAnnouncer } from './change-feed.js';
import { storedEventText } from './event-text.js';
import { escText, indexJson, lazyRecordView, withCursor, type Queryable } from './pg-text.js';
import {
  EVENT_INDEX_FIELDS,
  StoreError,
  encodeCursor,
  type CommitEvents,
  type CommitOps,
  type EventInput,
  type StoredEvent,
  type Versioned,
  type WriteOp,
} from './store.js';

/**
 * A round of the group commit takes at most this many commits / ops (bounds one statement). Each
 * commit is a subtransaction with its own xid; past 64 in one transaction PostgreSQL's subxid
 * cache overflows and every snapshot gets slower, so a round stays under it.
 */
const ROUND_MAX_COMMITS = 60;
const ROUND_MAX_OPS = 5000;
/** Writes (commits + appends) waiting for a round at most; more are refused ('unavailable'). */
const MAX_QUEUED_JOBS = 20_000;
/** A round of appends takes at most this many events. */
const ROUND_MAX_EVENTS = 5000;
interface EncodedOp {
  op: WriteOp;
  id: string;
  json: string | null;
  expected: number | null;
  ix: string | null;
}

interface PendingCommit {
  input: CommitOps;
  /** Events that ride in the commit (commitWithEvents): stored only if it applies. */
  events?: CommitEvents;
  /** `stored`: the carried events with their cursors (empty without events). */
  resolve: (r: Array<Versioned<unknown> | null>, stored: StoredEvent[]) => void;
  reject: (e: unknown) => void;
}

interface EncodedEvent {
  tsMs: number | null;
  fields: Array<string | null>; // EVENT_INDEX_FIELDS order, escaped
  body: string;
}

interface PendingAppend {
  given: EventInput[];
  events: EncodedEvent[];
  resolve: (stored: StoredEvent[]) => void;
  reject: (e: unknown) => void;
}

/**
 * The JSON texts of a round (record values, index objects, event bodies) go as ONE text parameter
 * each, joined by U+001E, which JSON.stringify never leaves unescaped (it escapes every control
 * character): the statement splits it with string_to_array, and an empty element (never a JSON
 * text) is NULL. Sent as array literals instead, every quote of every value had to be escaped here
 * (node-postgres' arrayString) and unescaped by the server's array_in: most of a round's bytes.
 */
const JSON_SEP = '\u001e';
const joinJson = (texts: Array<string | null>): string => texts.map((t) => t ?? '').join(JSON_SEP);
const WRITE_ROUND_SQL =
  "SELECT r_version, r_seq, r_err, r_msg FROM agentd.write_round($1::int[], $2::text[], $3::text[], $4::text[], string_to_array($5::text, E'\\x1e', ''), " +
  "$6::int[], string_to_array($7::text, E'\\x1e', '')::jsonb[], $8::float8[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], " +
  "string_to_array($14::text, E'\\x1e', ''), $15::int[], $16::text, $17::text, $18::text)";

/**
 * What `append` gives back for one event: a copy of the caller's object with its cursor, and (as
 * LevelStore does) the JSON text a stream sends for it, so it is serialised once. The text is the
 * stored body with the cursor spliced in last: what a replay from the store returns, byte for byte.
 * An event with its own `cursor` or a `toJSON` takes the plain path (the stored body, parsed).
 */
function storedView(e: EventInput, body: string, cursor: string): StoredEvent {
  if (Object.prototype.hasOwnProperty.call(e, 'cursor') || typeof (e as { toJSON?: unknown }).toJSON === 'function' || body.length <= 2) {
    return { ...(JSON.parse(body) as EventInput), cursor };
  }
  const s = Object.assign({}, e) as StoredEvent;
  s.cursor = cursor;
  storedEventText.set(s, withCursor(body, cursor));
  return s;
}

interface PendingNotify {
  channel: string;
  payload: string;
  /** Rounds that carried it and failed. */
  tries: number;
  resolve: () => void;
  reject: (e: unknown) => void;
}

/** Notifications one round carries at most (each payload is under 8000 bytes). */
const ROUND_MAX_NOTIFIES = 100;
/** Rounds a notification rides in at most: after that many failed (connection lost, database down), it is dropped. */
const NOTIFY_TRIES = 3;
/**
 * Notifications waiting at most (the change feed's own queue had the same bound): past it a new one
 * is dropped, so hints piling up while the database is slow never take the write queue's room
 * (MAX_QUEUED_JOBS) from commits and appends. Not inbox notifications: an instance whose feed has
 * not broken reads a run's inbox only when told (run-inbox.ts), and each rides with its own inbox
 * write, which the write queue's bound already limits.
 */
const MAX_QUEUED_NOTIFIES = 1000;

/**
 * A round with notifications: write_round's rows, then ONE more row (an aggregate always yields
 * one) whose evaluation sends them, in the same statement and transaction, so PostgreSQL delivers
 * them when the round commits (never if it does not). The client reads every row, so both parts of
 * the UNION ALL are evaluated; pg_notify is parallel-unsafe, so the plan is serial and in order.
 */
const WRITE_ROUND_NOTIFY_SQL =
  `SELECT r_version, r_seq, r_err, r_msg FROM (${WRITE_ROUND_SQL}) w ` +
  'UNION ALL SELECT NULL::int, count(pg_notify(n.c, n.p))::bigint, NULL::text, NULL::text FROM unnest($19::text[], $20::text[]) AS n(c, p)';
/** A round of notifications alone. */
const NOTIFY_SQL = 'SELECT count(pg_notify(n.c, n.p))::bigint AS n FROM unnest($1::text[], $2::text[]) AS n(c, p)';

type Job = { kind: 'commit'; p: PendingCommit } | { kind: 'append'; p: PendingAppend } | { kind: 'notify'; p: PendingNotify };
/** A commit taken into a round: its ops and, when events ride in it, those (as given and encoded). */
interface TakenCommit {
  kind: 'commit';
  p: PendingCommit;
  ops: EncodedOp[];
  events: { given: EventInput[]; encoded: EncodedEvent[] } | null;
}
type Taken = TakenCommit | { kind: 'append'; p: PendingAppend } | { kind: 'notify'; p: PendingNotify };

/** Events as write_round stores them; throws on one JSON cannot encode (a BigInt). */
function encodeEvents(events: EventInput[]): EncodedEvent[] {
  return events.map((e) => {
    const body = JSON.stringify(e);
    const t = typeof e.timestamp === 'string' ? Date.parse(e.timestamp) : NaN;
    return {
      tsMs: Number.isNaN(t) ? null : t,
      fields: EVENT_INDEX_FIELDS.map((f) => (typeof e[f] === 'string' ? escText(e[f] as string) : null)),
      body,
    };
  });
}

export class PgWriter {
  private readonly jobs: Job[] = [];
  /** Notify jobs in `jobs` (MAX_QUEUED_NOTIFIES). */
  private queuedNotifies = 0;
  /** The round loop while one runs (close() waits for it). */
  writing: Promise<void> | null = null;
  /**
   * Announces each round's stored events on the change feed, inside the round (StoreChanges.announceAppends):
   * what the cluster link would otherwise send as a notification, and often a transaction, of its own.
   */
  announcer: AppendAnnouncer | null = null;

  constructor(private readonly db: Queryable) {}

  commit(input: CommitOps): Promise<Array<Versioned<unknown> | null>> {
    return new Promise<Array<Versioned<unknown> | null>>((resolve, reject) => {
      this.enqueue({ kind: 'commit', p: { input, resolve, reject } });
    });
  }

  /**
   * A commit whose events ride in it: in the same statement and transaction, stored only if every
   * op applies (write_round, migration 005), with cursors as an append in its place would get.
   * `events`, a function, is called right after the ops, when the round takes the commit; an event
   * JSON cannot encode fails the commit (nothing is written).
   */
  commitWithEvents(input: CommitOps, events: CommitEvents): Promise<{ records: Array<Versioned<unknown> | null>; events: StoredEvent[] }> {
    return new Promise((resolve, reject) => {
      this.enqueue({ kind: 'commit', p: { input, events, resolve: (records, stored) => resolve({ records, events: stored }), reject } });
    });
  }

  /** Appends in call order; see the header for why cursors come from a locked counter row. */
  append(events: EventInput[]): Promise<StoredEvent[]> {
    if (events.length === 0) return Promise.resolve([]);
    let encoded: EncodedEvent[];
    try {
      encoded = encodeEvents(events); // throws on a BigInt: fails this append only
    } catch (e) {
      return Promise.reject(e);
    }
    // Resolved by the round with the stored events, as a commit's carried ones: the callers of one
    // round hear of their events in cursor order (they publish them in that order).
    return new Promise<StoredEvent[]>((resolve, reject) => {
      this.enqueue({ kind: 'append', p: { given: events, events: encoded, resolve, reject } });
    });
  }

  /**
   * A change-feed notification (pg_notify) sent by the next round, inside its transaction: at c=32
   * a round is almost always under way or about to start, so the notification costs no statement,
   * round trip or commit (WAL flush) of its own; with nothing else to write it makes a round alone
   * (one statement, as a separate NOTIFY would). Delivered when that round commits; a round that
   * fails passes it on to the next (NOTIFY_TRIES rounds at most, then it is dropped: a
   * notification is a hint, src/store/changes.ts). Never rejects; resolves once sent or dropped.
   */
  notify(channel: string, payload: string): Promise<void> {
    if (this.queuedNotifies >= MAX_QUEUED_NOTIFIES && channel !== CHANGE_CHANNELS.inbox) return Promise.resolve();
    return new Promise<void>((resolve) => {
      this.enqueue({ kind: 'notify', p: { channel, payload, tries: 0, resolve, reject: () => resolve() } });
    });
  }

  /**
   * Group commit of commits AND appends: jobs queue in call order; a round starts on a
   * setImmediate (as LevelStore's: everything issued in this turn of the event loop joins it),
   * takes the queued jobs (bounded) and writes them in ONE statement, agentd.write_round: one
   * round trip and one transaction (one WAL flush) for all of them. One round at a time per
   * process keeps commits and appends in call order.
   */
  private enqueue(job: Job): void {
    if (this.jobs.length >= MAX_QUEUED_JOBS) {
      // The database is not keeping up (or not answering): refuse instead of queueing without bound.
      job.p.reject(new StoreError('unavailable', `the PostgreSQL write queue is full (${MAX_QUEUED_JOBS} writes waiting)`));
      return;
    }
    this.jobs.push(job);
    if (job.kind === 'notify') this.queuedNotifies++;
    if (this.writing) return;
    this.writing = (async () => {
      try {
        while (this.jobs.length > 0) {
          await new Promise<void>((r) => setImmediate(r));
          await this.writeRound();
        }
      } finally {
        this.writing = null;
      }
    })();
  }

  private encodeOps(ops: WriteOp[]): EncodedOp[] {
    return ops.map((op) => {
      if (op.op === 'delete') return { op, id: escText(op.id), json: null, expected: op.expectedVersion ?? null, ix: null };
      // agentd.commit_batch applies it in SQL (src/store/migrations/004_holders_op.sql): the edit goes as the value.
      if (op.op === 'holders')
        return {
          op,
          id: escText(op.id),
          json: JSON.stringify({ remove: op.remove ?? [], add: op.add ?? null, fields: op.fields ?? null }),
          expected: null,
          ix: null,
        };
      const json = JSON.stringify(op.value ?? null); // throws on a BigInt: fails this commit only
      return { op, id: escText(op.id), json, expected: op.op === 'update' ? op.expectedVersion : null, ix: indexJson(op.indexes) };
    });
  }

  /** Takes the queued jobs (in call order, bounded) and writes them in one statement. */
  private async writeRound(): Promise<void> {
    const taken: Taken[] = [];
    let nCommits = 0;
    let nOps = 0;
    let nEvents = 0;
    let nNotifies = 0;
    while (this.jobs.length > 0 && nCommits < ROUND_MAX_COMMITS && nOps < ROUND_MAX_OPS) {
      const job = this.jobs[0];
      if (job.kind === 'notify') {
        if (nNotifies >= ROUND_MAX_NOTIFIES) break;
        this.jobs.shift();
        this.queuedNotifies--;
        taken.push(job);
        nNotifies++;
        continue;
      }
      if (job.kind === 'append') {
        if (nEvents > 0 && nEvents + job.p.events.length > ROUND_MAX_EVENTS) break;
        this.jobs.shift();
        taken.push(job);
        nEvents += job.p.events.length;
        continue;
      }
      this.jobs.shift();
      let ops: EncodedOp[];
      let events: TakenCommit['events'] = null;
      try {
        // The function forms are called now, when the store takes the write (Store.commit), the
        // events right after the ops.
        ops = this.encodeOps(typeof job.p.input === 'function' ? job.p.input() : job.p.input);
        const given = typeof job.p.events === 'function' ? job.p.events() : job.p.events;
        if (given && given.length > 0) events = { given, encoded: encodeEvents(given) };
      } catch (e) {
        job.p.reject(e);
        continue;
      }
      if (ops.length === 0 && !events) {
        job.p.resolve([], []);
        continue;
      }
      taken.push({ kind: 'commit', p: job.p, ops, events });
      nCommits++;
      nOps += ops.length;
      nEvents += events?.encoded.length ?? 0;
    }
    if (taken.length === 0) return;
    try {
      await this.write(taken);
    } catch (e) {
      if (taken.length > 1 && e instanceof pg.DatabaseError && !isTransientCode(e.code)) {
        // The statement failed as a whole (so it wrote nothing): one job's problem (a value too
        // large for an index, say) must not fail the others, so each is tried alone, in order.
        for (const t of taken) await this.write([t]).catch((err: unknown) => t.p.reject(err));
      } else {
        const requeue: Job[] = [];
        for (const t of taken) {
          // A notification whose round failed (the connection lost, say) goes out with the next
          // round, a few times at most: it may announce writes of an EARLIER round, which did
          // commit, and a listener must still hear of them (a repeat only costs a read).
          if (t.kind === 'notify' && ++t.p.tries < NOTIFY_TRIES && !(e instanceof StoreError && e.code === 'closed')) {
            requeue.push({ kind: 'notify', p: t.p });
          } else t.p.reject(e);
        }
        this.jobs.unshift(...requeue);
        this.queuedNotifies += requeue.length;
      }
    }
  }

  /** The announcement of a round's events (the announcer's), or null: none asked, or too long for a notification. */
  private announcement(taken: Taken[]): { head: string; tail: string } | null {
    if (!this.announcer) return null;
    const given: EventInput[] = [];
    for (const t of taken) {
      if (t.kind === 'append') given.push(...t.p.given);
      else if (t.kind === 'commit' && t.events) given.push(...t.events.given);
    }
    let ann: { head: string; tail: string } | null;
    try {
      ann = this.announcer(given);
    } catch {
      return null; // a hint: the round's writes go on without it
    }
    // The range adds two cursors (under 50 bytes); a payload over PostgreSQL's limit would fail the round.
    return ann && Buffer.byteLength(ann.head) + Buffer.byteLength(ann.tail) + 50 <= MAX_CHANGE_PAYLOAD ? ann : null;
  }

  private async write(taken: Taken[]): Promise<void> {
    const commitNo: number[] = [];
    const opName: string[] = [];
    const kinds: string[] = [];
    const ids: string[] = [];
    const values: Array<string | null> = [];
    const expected: Array<number | null> = [];
    const ix: Array<string | null> = [];
    const events: EncodedEvent[] = [];
    /** Per event: the commit carrying it (write_round stores it only if that commit applied), or null. */
    const evCommit: Array<number | null> = [];
    const channels: string[] = [];
    const payloads: string[] = [];
    taken.forEach((t, c) => {
      if (t.kind === 'notify') {
        channels.push(t.p.channel);
        payloads.push(t.p.payload);
        return;
      }
      if (t.kind === 'append') {
        events.push(...t.p.events);
        for (let i = 0; i < t.p.events.length; i++) evCommit.push(null);
        return;
      }
      if (t.events) {
        events.push(...t.events.encoded);
        for (let i = 0; i < t.events.encoded.length; i++) evCommit.push(c);
      }
      for (const e of t.ops) {
        commitNo.push(c);
        opName.push(e.op.op);
        kinds.push(e.op.kind);
        ids.push(e.id);
        values.push(e.json);
        expected.push(e.expected);
        ix.push(e.ix);
      }
    });
    if (opName.length === 0 && events.length === 0) {
      // Notifications alone.
      await this.db.query({ name: 'agentd_notify', text: NOTIFY_SQL, values: [channels, payloads] }, false);
      for (const t of taken) if (t.kind === 'notify') t.p.resolve();
      return;
    }
    const notifying = channels.length > 0;
    const col = (i: number) => events.map((e) => e.fields[i]);
    const ann = events.length > 0 ? this.announcement(taken) : null;
    const r = await this.db.query<{ r_version: number | null; r_seq: string | null; r_err: string | null; r_msg: string | null }>(
      {
        name: notifying ? 'agentd_write_round_notify' : 'agentd_write_round',
        text: notifying ? WRITE_ROUND_NOTIFY_SQL : WRITE_ROUND_SQL,
        values: [
          commitNo,
          opName,
          kinds,
          ids,
          joinJson(values),
          expected,
          joinJson(ix),
          events.map((e) => e.tsMs),
          col(0),
          col(1),
          col(2),
          col(3),
          col(4),
          joinJson(events.map((e) => e.body)),
          evCommit,
          CHANGE_CHANNELS.events,
          ann?.head ?? null,
          ann?.tail ?? null,
          ...(notifying ? [channels, payloads] : []),
        ],
      },
      false,
    );
    // The notifications' row comes last: not one of write_round's.
    if (notifying) r.rows.pop();
    // Rows: one per op in order, then (when events were given) one whose r_seq is the cursor
    // before the first stored event; the stored ones (appends, and the events of the commits that
    // applied) took the next cursors in order.
    let base = events.length > 0 ? Number(r.rows[r.rows.length - 1].r_seq) : 0;
    let k = 0;
    for (const t of taken) {
      if (t.kind === 'notify') {
        t.p.resolve();
        continue;
      }
      if (t.kind === 'append') {
        const b = base;
        const { given, events: encoded } = t.p;
        t.p.resolve(given.map((e, i) => storedView(e, encoded[i].body, encodeCursor(b + i + 1))));
        base += given.length;
        continue;
      }
      const rows = r.rows.slice(k, k + t.ops.length);
      k += t.ops.length;
      const failed = rows.find((row) => row.r_err);
      if (failed) {
        t.p.reject(new StoreError(ERROR_CODES[failed.r_err!] ?? 'conflict', failed.r_msg ?? failed.r_err!));
        continue;
      }
      let stored: StoredEvent[] = [];
      if (t.events) {
        const b = base;
        const { given, encoded } = t.events;
        stored = given.map((e, i) => storedView(e, encoded[i].body, encodeCursor(b + i + 1)));
        base += given.length;
      }
      // The value is parsed from the text just written only if the caller reads it (most use the version).
      t.p.resolve(
        t.ops.map((e, i) => (e.op.op === 'delete' || e.op.op === 'holders' ? null : lazyRecordView(e.op.id, rows[i].r_version!, rows[i].r_seq!, e.json!))),
        stored,
      );
    }
  }
}
