-- agentd PostgreSQL schema, version 7: an update with indexes costs PostgreSQL fewer statements
-- and index rows.
--
-- agentd.commit_batch as in version 4 (same arguments, results, checks and per-commit atomicity),
-- except for an update that gives its indexes (a background run's status change, an attempt, a
-- trace: src/store/repos/). It took the general path: lock the row with a SELECT, check, UPDATE,
-- then DELETE every agentd.record_ix row of the record and INSERT them all again, whether one
-- value changed or none (measured on a background drain: ~5 such updates per run, 2 of them
-- rewriting 4-5 index rows to move 1). Now:
-- - the update is ONE UPDATE, which also returns the indexes the row had, so when they are
--   unchanged nothing else runs (a failed CAS is found as before: AG404 / AG412); a
--   create-or-replace of a record that is not there is an upsert (INSERT ... ON CONFLICT DO
--   UPDATE), like the one without indexes: a concurrent create of the same record is then
--   replaced, as the contract's create-or-replace says, where the general path refused it (AG409);
-- - when they changed, only the index rows whose value changed are deleted, and the new values
--   inserted. The rows still mirror records.ix exactly.
-- Deletes, creates and holders edits are as before.
--
-- CREATE OR REPLACE keeps the signature (and grants): both write_round functions (versions 1 and
-- 5), which instances of earlier versions call during a rolling upgrade, call this one.
CREATE OR REPLACE FUNCTION agentd.commit_batch(
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
  h_op   jsonb;
  h_val  jsonb;
  h_list jsonb;
  h_low  numeric;
  h_n    integer;
  h_add  boolean;
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
        -- An update with indexes, without a SELECT first: one UPDATE that also returns the
        -- indexes the row had (`o`, the row as this statement first saw it; when a concurrent
        -- write committed in between, the version tells, and they count as unknown). When they
        -- are unchanged, that is all. Otherwise, of the record's agentd.record_ix rows only those
        -- whose value changed go, and the new values come (ON CONFLICT DO NOTHING: when the old
        -- ones are unknown, an unchanged one meets its own key and nothing is written for it).
        -- Not for a key's holders record created or replaced: its BEFORE INSERT trigger
        -- (migration 006) would fill it as a new record before the upsert turned into an
        -- update; it takes the general path.
        IF p_op[j] = 'update' AND (p_expected[j] IS NOT NULL OR NOT (p_kind[j] = 'meta' AND left(p_id[j], 9) = 'flow_key:')) THEN
          UPDATE agentd.records r SET value = p_value[j], version = r.version + 1, ix = p_ix[j]
            FROM agentd.records o
            WHERE r.kind = p_kind[j] AND r.id = p_id[j] AND (p_expected[j] IS NULL OR r.version = p_expected[j])
              AND o.kind = p_kind[j] AND o.id = p_id[j]
            RETURNING r.version, r.seq, CASE WHEN r.version = o.version + 1 THEN o.ix END INTO c_ver, c_seq, c_ix;
          IF NOT FOUND THEN
            IF p_expected[j] IS NOT NULL THEN
              SELECT r.version INTO c_ver FROM agentd.records r WHERE r.kind = p_kind[j] AND r.id = p_id[j];
              IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'AG404', MESSAGE = format('%s ''%s'' was not found', p_kind[j], p_id[j]);
              END IF;
              RAISE EXCEPTION USING ERRCODE = 'AG412', MESSAGE = format('%s ''%s'' is at version %s, expected %s', p_kind[j], p_id[j], c_ver, p_expected[j]);
            END IF;
            -- Not there: created (version 1, no index rows yet), or replaced when a concurrent
            -- transaction created it since our look (its indexes unknown).
            INSERT INTO agentd.records AS r (kind, id, version, seq, value, ix)
              VALUES (p_kind[j], p_id[j], 1, nextval('agentd.record_seq'), p_value[j], p_ix[j])
              ON CONFLICT (kind, id) DO UPDATE SET value = EXCLUDED.value, version = r.version + 1, ix = EXCLUDED.ix
              RETURNING r.version, r.seq INTO c_ver, c_seq;
            c_ix := CASE WHEN c_ver = 1 THEN '{}'::jsonb END;
          END IF;
          IF c_ix IS NULL OR c_ix <> p_ix[j] THEN
            IF c_ix IS NULL OR c_ix <> '{}'::jsonb THEN
              DELETE FROM agentd.record_ix x WHERE x.kind = p_kind[j] AND x.id = p_id[j] AND (p_ix[j] ->> x.name) IS DISTINCT FROM x.value;
            END IF;
            INSERT INTO agentd.record_ix (kind, name, value, seq, id)
              SELECT p_kind[j], nx.key, nx.value, c_seq, p_id[j] FROM jsonb_each_text(p_ix[j]) AS nx
                WHERE c_ix IS NULL OR (c_ix ->> nx.key) IS DISTINCT FROM nx.value
              ON CONFLICT DO NOTHING;
          END IF;
          vers[j] := c_ver;
          seqs[j] := c_seq;
          CONTINUE;
        END IF;
        -- A holders edit (src/store/holders-op.ts): lock the row, drop `remove`, add `add` unless
        -- the holders would then exceed the lowest limit among its and theirs (AG429: the commit
        -- fails), and write the row back, delete it with its last holder, or create it with its first.
        IF p_op[j] = 'holders' THEN
          h_op := p_value[j]::jsonb;
          -- Once more when a concurrent transaction created the record between our look and our
          -- INSERT (ON CONFLICT waited for it to commit: the next look sees it).
          LOOP
            SELECT r.version, r.seq, r.value::jsonb INTO c_ver, c_seq, h_val
              FROM agentd.records r WHERE r.kind = p_kind[j] AND r.id = p_id[j] FOR UPDATE;
            found_ := FOUND;
            h_n := CASE WHEN found_ AND jsonb_typeof(h_val -> 'holders') = 'array' THEN jsonb_array_length(h_val -> 'holders') ELSE 0 END;
            SELECT coalesce(jsonb_agg(x.h ORDER BY x.o), '[]'::jsonb) INTO h_list
              FROM jsonb_array_elements(CASE WHEN found_ AND jsonb_typeof(h_val -> 'holders') = 'array' THEN h_val -> 'holders' ELSE '[]'::jsonb END)
                WITH ORDINALITY AS x(h, o)
              WHERE NOT (x.h ->> 'run_id') IN (SELECT jsonb_array_elements_text(h_op -> 'remove'));
            h_add := jsonb_typeof(h_op -> 'add') = 'object'
               AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(h_list) AS y(h) WHERE y.h ->> 'run_id' = h_op -> 'add' ->> 'run_id');
            -- Nobody to remove and nobody new: nothing is written.
            EXIT WHEN NOT h_add AND jsonb_array_length(h_list) = h_n;
            IF h_add THEN
              SELECT least((h_op -> 'add' ->> 'limit')::numeric, min((y.h ->> 'limit')::numeric)) INTO h_low
                FROM jsonb_array_elements(h_list) AS y(h) WHERE jsonb_typeof(y.h -> 'limit') = 'number';
              h_low := coalesce(h_low, (h_op -> 'add' ->> 'limit')::numeric);
              IF jsonb_array_length(h_list) >= h_low THEN
                RAISE EXCEPTION USING ERRCODE = 'AG429', MESSAGE = format('%s ''%s'' holds %s of at most %s', p_kind[j], p_id[j], jsonb_array_length(h_list), h_low);
              END IF;
              h_list := h_list || jsonb_build_array(jsonb_build_object('run_id', h_op -> 'add' -> 'run_id', 'since', h_op -> 'add' -> 'since', 'limit', h_op -> 'add' -> 'limit'));
            END IF;
            IF jsonb_array_length(h_list) = 0 THEN
              IF found_ THEN
                DELETE FROM agentd.records WHERE kind = p_kind[j] AND id = p_id[j];
                DELETE FROM agentd.record_ix WHERE kind = p_kind[j] AND id = p_id[j];
              END IF;
              EXIT;
            END IF;
            h_val := (CASE WHEN found_ THEN h_val - 'holders' ELSE '{}'::jsonb END)
              || coalesce(CASE WHEN jsonb_typeof(h_op -> 'fields') = 'object' THEN h_op -> 'fields' END, '{}'::jsonb)
              || jsonb_build_object('holders', h_list);
            IF found_ THEN
              UPDATE agentd.records SET value = h_val::text, version = c_ver + 1 WHERE kind = p_kind[j] AND id = p_id[j];
              EXIT;
            END IF;
            INSERT INTO agentd.records (kind, id, version, seq, value, ix)
              VALUES (p_kind[j], p_id[j], 1, nextval('agentd.record_seq'), h_val::text, '{}'::jsonb)
              ON CONFLICT DO NOTHING;
            EXIT WHEN FOUND;
          END LOOP;
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
    EXCEPTION WHEN SQLSTATE 'AG404' OR SQLSTATE 'AG409' OR SQLSTATE 'AG412' OR SQLSTATE 'AG429' THEN
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
