-- agentd PostgreSQL schema, version 5: events that ride in a commit (Store.commitWithEvents).
--
-- agentd.write_round as in version 1, plus one argument: p_ev_commit names, for each event, the
-- commit (p_commit's number) that carries it, or NULL for a plain append. A carried event is stored
-- only when its commit applied (its CAS held), in the same statement and transaction: a run's
-- lifecycle events and its row are written together or not at all, as on the embedded stores, and
-- need no round of their own. Cursors are given to the stored events only, in order, so a refused
-- commit leaves no gap. The first result rows are commit_batch's; when events were given, one more
-- row whose r_seq is the cursor before the first stored event (NULL when none was stored).
--
-- When p_ann_head is given, the round also announces its stored events on the change feed
-- (src/store/changes.ts): pg_notify(p_ann_chan, p_ann_head || '["first","last"]' || p_ann_tail)
-- with the cursors they got, delivered when the round commits: a follower on another instance
-- hears of them without a transaction of their own (src/runtime/cluster.ts).
--
-- It also ends the claim hold (migration 002) of every background run row a commit of the round
-- wrote: the claim of a queued run is its row's CAS write, so the claimer's pass needs no
-- statement of its own to release the rows it claimed (src/store/repos/bg-runs.ts), only those it
-- was handed and did not claim. Only rows whose commit applied (already row-locked by it).
--
-- A new argument list makes a second function of the same name: the version-1 write_round (14
-- arguments) stays, unchanged, for instances of the previous version during a rolling upgrade. Both
-- take their cursors from the same locked counter row, so appends of old and new instances still
-- become visible in cursor order.
-- An event cursor as the adapter writes it (src/store/store.ts encodeCursor): 16 digits, zero-padded.
CREATE FUNCTION agentd.cursor_text(c bigint) RETURNS text LANGUAGE sql IMMUTABLE AS
$fn$ SELECT CASE WHEN length(c::text) >= 16 THEN c::text ELSE lpad(c::text, 16, '0') END $fn$;

CREATE OR REPLACE FUNCTION agentd.write_round(
  p_commit    integer[],
  p_op        text[],
  p_kind      text[],
  p_id        text[],
  p_value     text[],
  p_expected  integer[],
  p_ix        jsonb[],
  p_ts        double precision[],
  p_trace     text[],
  p_run       text[],
  p_session   text[],
  p_task      text[],
  p_type      text[],
  p_body      text[],
  p_ev_commit integer[],
  p_ann_chan  text,
  p_ann_head  text,
  p_ann_tail  text
) RETURNS TABLE (r_version integer, r_seq bigint, r_err text, r_msg text)
LANGUAGE plpgsql AS $fn$
DECLARE
  n_events integer := coalesce(array_length(p_body, 1), 0);
  n_kept   integer;
  base     bigint;
  vers     integer[];
  seqs     bigint[];
  errs     text[];
  msgs     text[];
  -- commits (p_commit numbers) that were refused: their events are not stored
  refused  integer[] := '{}';
BEGIN
  IF coalesce(array_length(p_op, 1), 0) > 0 THEN
    SELECT array_agg(b.r_version ORDER BY b.o), array_agg(b.r_seq ORDER BY b.o), array_agg(b.r_err ORDER BY b.o), array_agg(b.r_msg ORDER BY b.o),
           coalesce(array_agg(DISTINCT p_commit[b.o]) FILTER (WHERE b.r_err IS NOT NULL), '{}')
      INTO vers, seqs, errs, msgs, refused
      FROM agentd.commit_batch(p_commit, p_op, p_kind, p_id, p_value, p_expected, p_ix) WITH ORDINALITY AS b(r_version, r_seq, r_err, r_msg, o);
    IF 'bg_runs' = ANY(p_kind) THEN
      UPDATE agentd.records r SET claim_token = NULL, claim_until = NULL
        FROM unnest(p_commit, p_kind, p_id) AS w(c, k, i)
        WHERE w.k = 'bg_runs' AND NOT (w.c = ANY(refused)) AND r.kind = 'bg_runs' AND r.id = w.i AND r.claim_token IS NOT NULL;
    END IF;
    RETURN QUERY SELECT * FROM unnest(vers, seqs, errs, msgs);
  END IF;
  IF n_events > 0 THEN
    SELECT count(*) INTO n_kept FROM unnest(p_ev_commit, p_body) AS x(c, body) WHERE x.c IS NULL OR NOT (x.c = ANY(refused));
    IF n_kept > 0 THEN
      -- Taken last, to hold the counter's row lock as briefly as possible (see version 1).
      UPDATE agentd.counters SET value = value + n_kept WHERE name = 'event_cursor' RETURNING value - n_kept INTO base;
      INSERT INTO agentd.events (cursor, ts_ms, trace_id, run_id, session_id, task_id, event_type, body)
        SELECT base + row_number() OVER (ORDER BY x.ord), x.ts, x.f1, x.f2, x.f3, x.f4, x.f5, x.body
          FROM unnest(p_ts, p_trace, p_run, p_session, p_task, p_type, p_body, p_ev_commit) WITH ORDINALITY AS x(ts, f1, f2, f3, f4, f5, body, c, ord)
          WHERE x.c IS NULL OR NOT (x.c = ANY(refused));
      IF p_ann_head IS NOT NULL THEN
        PERFORM pg_notify(p_ann_chan, p_ann_head || json_build_array(agentd.cursor_text(base + 1), agentd.cursor_text(base + n_kept))::text || p_ann_tail);
      END IF;
    END IF;
    RETURN QUERY SELECT NULL::integer, base, NULL::text, NULL::text;
  END IF;
END
$fn$;
