-- agentd PostgreSQL schema, version 1: records with versions and secondary indexes, the event log.
-- Applied by src/store/pg-migrate.ts at open() (under pg_advisory_lock) or by `agentd migrate`,
-- in one transaction together with its row in agentd.schema_migrations. Never edit a shipped
-- migration: add 002_*.sql.
--
-- Text columns hold ids and index values with NUL and backslash escaped by the adapter
-- (PostgreSQL text cannot hold NUL); record values and event bodies are JSON text (not jsonb:
-- jsonb refuses \u0000, and the adapter hands the text back without re-encoding it).

CREATE TABLE agentd.records (
  kind    text    NOT NULL,
  id      text    NOT NULL,
  version integer NOT NULL,
  -- creation order, from agentd.record_seq; lists are ordered by it
  seq     bigint  NOT NULL,
  value   text    NOT NULL,
  -- index name -> value as last written ({} = none); the rows of agentd.record_ix mirror it
  ix      jsonb   NOT NULL DEFAULT '{}',
  PRIMARY KEY (kind, id)
);
CREATE UNIQUE INDEX records_kind_seq ON agentd.records (kind, seq);

CREATE SEQUENCE agentd.record_seq;

-- One row per (record, index name) with a value: lists and counts by index never read bodies.
CREATE TABLE agentd.record_ix (
  kind  text   NOT NULL,
  name  text   NOT NULL,
  value text   NOT NULL,
  seq   bigint NOT NULL,
  id    text   NOT NULL,
  PRIMARY KEY (kind, name, value, seq)
);
CREATE INDEX record_ix_by_id ON agentd.record_ix (kind, id);

-- Single-row counters. 'event_cursor' is the last event cursor ever assigned: the appending
-- statement increments it, which row-locks it until that transaction ends, so appends commit in
-- cursor order across every process (see the comment on appendEvents in src/store/postgres.ts).
CREATE TABLE agentd.counters (
  name  text   PRIMARY KEY,
  value bigint NOT NULL
);
INSERT INTO agentd.counters (name, value) VALUES ('event_cursor', 0);

CREATE TABLE agentd.events (
  cursor     bigint PRIMARY KEY,
  -- Date.parse(timestamp) in ms; NULL when unparseable (counts as expired for retention)
  ts_ms      double precision,
  trace_id   text,
  run_id     text,
  session_id text,
  task_id    text,
  event_type text,
  -- the event as JSON text, without its cursor (added when read)
  body       text NOT NULL
);
CREATE INDEX events_trace   ON agentd.events (trace_id, cursor)   WHERE trace_id IS NOT NULL;
CREATE INDEX events_run     ON agentd.events (run_id, cursor)     WHERE run_id IS NOT NULL;
CREATE INDEX events_session ON agentd.events (session_id, cursor) WHERE session_id IS NOT NULL;
CREATE INDEX events_task    ON agentd.events (task_id, cursor)    WHERE task_id IS NOT NULL;
CREATE INDEX events_type    ON agentd.events (event_type, cursor) WHERE event_type IS NOT NULL;

-- Atomic group commit: the ops of several commits (p_commit numbers them, ops of one commit are
-- adjacent and in order) in one statement. Each commit runs in its own subtransaction (the
-- BEGIN ... EXCEPTION block): a failed check (AG409 conflict, AG412 stale_version, AG404
-- not_found) undoes that commit alone and is reported on its ops; any other error aborts the
-- whole statement. p_ix NULL = indexes not given (keep the previous ones); p_expected NULL on an
-- update = create or replace without a check, on a delete = no version check.
-- Returns one row per op, in op order: the written version and seq, or the error.
CREATE FUNCTION agentd.commit_batch(
  p_commit   integer[],
  p_op       text[],
  p_kind     text[],
  p_id       text[],
  p_value    text[],
  p_expected integer[],
  p_ix       jsonb[]
) RETURNS TABLE (r_version integer, r_seq bigint, r_err text, r_msg text)
LANGUAGE plpgsql AS $fn$
DECLARE
  n      integer := coalesce(array_length(p_op, 1), 0);
  i      integer := 1;
  j      integer;
  e      integer;
  vers   integer[] := array_fill(NULL::integer, ARRAY[n]);
  seqs   bigint[]  := array_fill(NULL::bigint, ARRAY[n]);
  errs   text[]    := array_fill(NULL::text, ARRAY[n]);
  msgs   text[]    := array_fill(NULL::text, ARRAY[n]);
  c_ver  integer;
  c_seq  bigint;
  c_ix   jsonb;
  found_ boolean;
  n_seq  bigint;
  n_ix   jsonb;
BEGIN
  WHILE i <= n LOOP
    e := i;
    WHILE e < n AND p_commit[e + 1] = p_commit[i] LOOP
      e := e + 1;
    END LOOP;
    BEGIN
      FOR j IN i..e LOOP
        -- Fast paths, one statement each (the common writes): a create; a CAS update and a
        -- create-or-replace that leave the index values as they are.
        IF p_op[j] = 'create' THEN
          n_ix := coalesce(p_ix[j], '{}'::jsonb);
          INSERT INTO agentd.records (kind, id, version, seq, value, ix)
            VALUES (p_kind[j], p_id[j], 1, nextval('agentd.record_seq'), p_value[j], n_ix)
            ON CONFLICT DO NOTHING
            RETURNING seq INTO n_seq;
          IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'AG409', MESSAGE = format('%s ''%s'' already exists', p_kind[j], p_id[j]);
          END IF;
          IF n_ix <> '{}'::jsonb THEN
            INSERT INTO agentd.record_ix (kind, name, value, seq, id)
              SELECT p_kind[j], x.key, x.value, n_seq, p_id[j] FROM jsonb_each_text(n_ix) AS x;
          END IF;
          vers[j] := 1;
          seqs[j] := n_seq;
          CONTINUE;
        END IF;
        IF p_op[j] = 'update' AND p_ix[j] IS NULL THEN
          IF p_expected[j] IS NULL THEN
            INSERT INTO agentd.records AS r (kind, id, version, seq, value, ix)
              VALUES (p_kind[j], p_id[j], 1, nextval('agentd.record_seq'), p_value[j], '{}'::jsonb)
              ON CONFLICT (kind, id) DO UPDATE SET value = EXCLUDED.value, version = r.version + 1
              RETURNING r.version, r.seq INTO c_ver, c_seq;
          ELSE
            -- A concurrent writer holds the row: we wait, then the WHERE sees its new version.
            UPDATE agentd.records SET value = p_value[j], version = version + 1
              WHERE kind = p_kind[j] AND id = p_id[j] AND version = p_expected[j]
              RETURNING version, seq INTO c_ver, c_seq;
            IF NOT FOUND THEN
              SELECT r.version INTO c_ver FROM agentd.records r WHERE r.kind = p_kind[j] AND r.id = p_id[j];
              IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'AG404', MESSAGE = format('%s ''%s'' was not found', p_kind[j], p_id[j]);
              END IF;
              RAISE EXCEPTION USING ERRCODE = 'AG412', MESSAGE = format('%s ''%s'' is at version %s, expected %s', p_kind[j], p_id[j], c_ver, p_expected[j]);
            END IF;
          END IF;
          vers[j] := c_ver;
          seqs[j] := c_seq;
          CONTINUE;
        END IF;
        -- The general path: lock the row, check, write, and keep agentd.record_ix in step.
        SELECT r.version, r.seq, r.ix INTO c_ver, c_seq, c_ix
          FROM agentd.records r WHERE r.kind = p_kind[j] AND r.id = p_id[j] FOR UPDATE;
        found_ := FOUND;
        IF p_op[j] = 'delete' THEN
          IF NOT found_ THEN
            RAISE EXCEPTION USING ERRCODE = 'AG404', MESSAGE = format('%s ''%s'' was not found', p_kind[j], p_id[j]);
          END IF;
          IF p_expected[j] IS NOT NULL AND c_ver <> p_expected[j] THEN
            RAISE EXCEPTION USING ERRCODE = 'AG412', MESSAGE = format('%s ''%s'' is at version %s, expected %s', p_kind[j], p_id[j], c_ver, p_expected[j]);
          END IF;
          DELETE FROM agentd.records WHERE kind = p_kind[j] AND id = p_id[j];
          IF c_ix <> '{}'::jsonb THEN
            DELETE FROM agentd.record_ix WHERE kind = p_kind[j] AND id = p_id[j];
          END IF;
        ELSIF p_op[j] = 'create' OR (p_op[j] = 'update' AND p_expected[j] IS NULL AND NOT found_) THEN
          IF found_ THEN
            RAISE EXCEPTION USING ERRCODE = 'AG409', MESSAGE = format('%s ''%s'' already exists', p_kind[j], p_id[j]);
          END IF;
          n_ix := coalesce(p_ix[j], '{}'::jsonb);
          INSERT INTO agentd.records (kind, id, version, seq, value, ix)
            VALUES (p_kind[j], p_id[j], 1, nextval('agentd.record_seq'), p_value[j], n_ix)
            ON CONFLICT DO NOTHING
            RETURNING seq INTO n_seq;
          IF NOT FOUND THEN
            -- created by a concurrent transaction since our SELECT
            RAISE EXCEPTION USING ERRCODE = 'AG409', MESSAGE = format('%s ''%s'' already exists', p_kind[j], p_id[j]);
          END IF;
          IF n_ix <> '{}'::jsonb THEN
            INSERT INTO agentd.record_ix (kind, name, value, seq, id)
              SELECT p_kind[j], x.key, x.value, n_seq, p_id[j] FROM jsonb_each_text(n_ix) AS x;
          END IF;
          vers[j] := 1;
          seqs[j] := n_seq;
        ELSE -- update
          IF NOT found_ THEN
            RAISE EXCEPTION USING ERRCODE = 'AG404', MESSAGE = format('%s ''%s'' was not found', p_kind[j], p_id[j]);
          END IF;
          IF p_expected[j] IS NOT NULL AND c_ver <> p_expected[j] THEN
            RAISE EXCEPTION USING ERRCODE = 'AG412', MESSAGE = format('%s ''%s'' is at version %s, expected %s', p_kind[j], p_id[j], c_ver, p_expected[j]);
          END IF;
          n_ix := coalesce(p_ix[j], c_ix);
          UPDATE agentd.records SET value = p_value[j], version = c_ver + 1, ix = n_ix
            WHERE kind = p_kind[j] AND id = p_id[j];
          IF n_ix IS DISTINCT FROM c_ix THEN
            DELETE FROM agentd.record_ix WHERE kind = p_kind[j] AND id = p_id[j];
            INSERT INTO agentd.record_ix (kind, name, value, seq, id)
              SELECT p_kind[j], x.key, x.value, c_seq, p_id[j] FROM jsonb_each_text(n_ix) AS x;
          END IF;
          vers[j] := c_ver + 1;
          seqs[j] := c_seq;
        END IF;
      END LOOP;
    EXCEPTION WHEN SQLSTATE 'AG404' OR SQLSTATE 'AG409' OR SQLSTATE 'AG412' THEN
      FOR j IN i..e LOOP
        vers[j] := NULL;
        seqs[j] := NULL;
        errs[j] := SQLSTATE;
        msgs[j] := SQLERRM;
      END LOOP;
    END;
    i := e + 1;
  END LOOP;
  RETURN QUERY SELECT * FROM unnest(vers, seqs, errs, msgs);
END
$fn$;

-- One round of the adapter's group commit: the commits (as agentd.commit_batch) and the event
-- appends queued in one turn, in one statement and one transaction. Events get the cursors after
-- agentd.counters['event_cursor'], which this UPDATE row-locks until the transaction commits: the
-- next appender (any process) takes its range only after this one is visible, so cursors become
-- visible in increasing order. The counter is taken last, to hold its lock as briefly as possible.
-- Returns the rows of commit_batch, then, when events were given, one row whose r_seq is the
-- cursor before the first event (they get r_seq + 1, + 2, ... in order).
CREATE FUNCTION agentd.write_round(
  p_commit   integer[],
  p_op       text[],
  p_kind     text[],
  p_id       text[],
  p_value    text[],
  p_expected integer[],
  p_ix       jsonb[],
  p_ts       double precision[],
  p_trace    text[],
  p_run      text[],
  p_session  text[],
  p_task     text[],
  p_type     text[],
  p_body     text[]
) RETURNS TABLE (r_version integer, r_seq bigint, r_err text, r_msg text)
LANGUAGE plpgsql AS $fn$
DECLARE
  n_events integer := coalesce(array_length(p_body, 1), 0);
  base     bigint;
BEGIN
  IF coalesce(array_length(p_op, 1), 0) > 0 THEN
    RETURN QUERY SELECT * FROM agentd.commit_batch(p_commit, p_op, p_kind, p_id, p_value, p_expected, p_ix);
  END IF;
  IF n_events > 0 THEN
    UPDATE agentd.counters SET value = value + n_events WHERE name = 'event_cursor' RETURNING value - n_events INTO base;
    INSERT INTO agentd.events (cursor, ts_ms, trace_id, run_id, session_id, task_id, event_type, body)
      SELECT base + x.ord, x.ts, x.f1, x.f2, x.f3, x.f4, x.f5, x.body
        FROM unnest(p_ts, p_trace, p_run, p_session, p_task, p_type, p_body) WITH ORDINALITY AS x(ts, f1, f2, f3, f4, f5, body, ord);
    RETURN QUERY SELECT NULL::integer, base, NULL::text, NULL::text;
  END IF;
END
$fn$;
