-- agentd PostgreSQL schema, version 6: a concurrency key's slots go to its waiters in one order
-- across every instance (docs/flow-control.md "Several instances").
--
-- A concurrency key's holders are one record (kind 'meta', id 'flow_key:<key>', value {key,
-- holders: [{run_id, since, limit}]}: src/flow/key-slots.ts), edited by the holders op of
-- commit_batch (004) or by a compare-and-set write. A run waiting for a slot is a run record
-- with status 'queued' and the index 'flow_wait' = '<100 - priority, 3 digits>:<key>'
-- (src/runtime/run-record.ts runIndexes), whose record_ix rows are ordered by (value, seq): higher
-- priority first, then creation order (agentd.record_seq, one sequence for every instance).
--
-- The triggers below make every write of a key's holders record fill the key's free slots from
-- those waiters, in that order, in the writing transaction: the run whose end commit lets go of a
-- slot hands it to the key's global head waiter in that same commit, whichever instance queued it,
-- and NOTIFY agentd_flow {k: key, a: [run ids]} (sent at commit) tells its instance to start it
-- without another round. A write that adds a holder which is not a queued waiter (a new run's take
-- in its creating commit, a background run's claim) gets a slot only after every waiter has one:
-- past the limit it fails the commit with AG429, as 004's check does. An add of a queued waiter
-- that is not next in that order is dropped (its instance learns who got the slot from the NOTIFY
-- or from reading the record). A waiter whose instance died keeps the slot it was handed until
-- another instance takes the run over (src/runtime/run-flow.ts recoverQueued) and starts it.

-- The holders `p_val` should have, `p_before`: the run ids that held before this write.
CREATE OR REPLACE FUNCTION agentd.flow_key_fill(p_ekey text, p_val jsonb, p_before text[])
RETURNS jsonb LANGUAGE plpgsql AS $fn$
DECLARE
  given   jsonb := CASE WHEN jsonb_typeof(p_val -> 'holders') = 'array' THEN p_val -> 'holders' ELSE '[]'::jsonb END;
  kept    jsonb := '[]'::jsonb;
  fresh   jsonb := '[]'::jsonb;
  ids     text[] := '{}';
  low     numeric := NULL;
  h       jsonb;
  w       record;
  w_val   jsonb;
  w_lim   numeric;
BEGIN
  -- Holders that were there stay; the ones this write adds are looked at after the waiters.
  FOR h IN SELECT x FROM jsonb_array_elements(given) AS t(x) LOOP
    IF (h ->> 'run_id') = ANY(p_before) THEN
      kept := kept || jsonb_build_array(h);
      ids := ids || (h ->> 'run_id');
      IF jsonb_typeof(h -> 'limit') = 'number' THEN low := least(coalesce(low, (h ->> 'limit')::numeric), (h ->> 'limit')::numeric); END IF;
    ELSE
      fresh := fresh || jsonb_build_array(h);
    END IF;
  END LOOP;
  -- Waiters, best first; a handful past the holders is enough (the key has at most `low` slots).
  IF EXISTS (SELECT 1 FROM agentd.record_ix x WHERE x.kind = 'runs' AND x.name = 'flow_key' AND x.value = p_ekey) THEN
    FOR w IN
      SELECT x.id AS rid FROM agentd.record_ix x
        WHERE x.kind = 'runs' AND x.name = 'flow_wait'
          AND x.value = ANY (SELECT lpad(g::text, 3, '0') || ':' || p_ekey FROM generate_series(0, 200) AS g)
        ORDER BY x.value, x.seq
        LIMIT jsonb_array_length(given) + coalesce(low, 1000) + 1
    LOOP
      CONTINUE WHEN w.rid = ANY(ids);
      SELECT r.value::jsonb INTO w_val FROM agentd.records r WHERE r.kind = 'runs' AND r.id = w.rid;
      CONTINUE WHEN NOT FOUND OR (w_val ->> 'status') IS DISTINCT FROM 'queued';
      w_lim := coalesce((w_val #>> '{queue,limit}')::numeric, 1);
      -- The head waits when the key is full under its limit or theirs: nobody overtakes it.
      EXIT WHEN array_length(ids, 1) IS NOT NULL AND array_length(ids, 1) >= least(coalesce(low, w_lim), w_lim);
      kept := kept || jsonb_build_array(jsonb_build_object('run_id', w.rid, 'since', (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'limit', w_lim));
      ids := ids || w.rid;
      low := least(coalesce(low, w_lim), w_lim);
    END LOOP;
  END IF;
  -- What this write adds: a queued waiter got its place above (or is not next: dropped); anyone
  -- else takes a slot left over, or the commit fails.
  FOR h IN SELECT x FROM jsonb_array_elements(fresh) AS t(x) LOOP
    CONTINUE WHEN (h ->> 'run_id') = ANY(ids);
    CONTINUE WHEN EXISTS (SELECT 1 FROM agentd.record_ix x WHERE x.kind = 'runs' AND x.id = h ->> 'run_id' AND x.name = 'flow_wait');
    IF jsonb_typeof(h -> 'limit') = 'number' THEN low := least(coalesce(low, (h ->> 'limit')::numeric), (h ->> 'limit')::numeric); END IF;
    IF low IS NOT NULL AND coalesce(array_length(ids, 1), 0) >= low THEN
      RAISE EXCEPTION USING ERRCODE = 'AG429', MESSAGE = format('concurrency key ''%s'' is full or has runs waiting before %s', p_val ->> 'key', h ->> 'run_id');
    END IF;
    kept := kept || jsonb_build_array(h);
    ids := ids || (h ->> 'run_id');
  END LOOP;
  RETURN (p_val - 'holders') || jsonb_build_object('holders', kept);
END
$fn$;

-- Every insert or update of a key's holders record: fill it (above).
CREATE OR REPLACE FUNCTION agentd.flow_key_write() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  before text[] := '{}';
  v      jsonb;
BEGIN
  -- The record flow_key_gone puts back is filled already.
  IF pg_trigger_depth() > 1 THEN RETURN NEW; END IF;
  IF TG_OP = 'UPDATE' THEN
    SELECT coalesce(array_agg(x ->> 'run_id'), '{}') INTO before
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(OLD.value::jsonb -> 'holders') = 'array' THEN OLD.value::jsonb -> 'holders' ELSE '[]'::jsonb END) AS t(x);
  END IF;
  v := agentd.flow_key_fill(substr(NEW.id, 10), NEW.value::jsonb, before);
  NEW.value := v::text;
  RETURN NEW;
END
$fn$;

-- The last holder let go (the record is deleted): when runs wait, the record comes back holding them.
CREATE OR REPLACE FUNCTION agentd.flow_key_gone() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  v jsonb;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM agentd.record_ix x WHERE x.kind = 'runs' AND x.name = 'flow_key' AND x.value = substr(OLD.id, 10)) THEN
    RETURN NULL;
  END IF;
  v := agentd.flow_key_fill(substr(OLD.id, 10), (OLD.value::jsonb - 'holders') || '{"holders": []}'::jsonb, '{}');
  IF jsonb_array_length(v -> 'holders') > 0 THEN
    INSERT INTO agentd.records (kind, id, version, seq, value, ix)
      VALUES (OLD.kind, OLD.id, 1, nextval('agentd.record_seq'), v::text, '{}'::jsonb)
      ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END
$fn$;

-- Who got a slot by this write and waits for it: told at commit (NOTIFY is sent only then), once
-- the row is really written (an insert that met a concurrent one's row writes nothing).
CREATE OR REPLACE FUNCTION agentd.flow_key_told() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  got     text[];
  payload text;
BEGIN
  SELECT coalesce(array_agg(x ->> 'run_id'), '{}') INTO got
    FROM jsonb_array_elements(NEW.value::jsonb -> 'holders') AS t(x)
    WHERE (TG_OP = 'INSERT' OR NOT (OLD.value::jsonb -> 'holders') @> jsonb_build_array(jsonb_build_object('run_id', x -> 'run_id')))
      AND EXISTS (SELECT 1 FROM agentd.record_ix i WHERE i.kind = 'runs' AND i.id = x ->> 'run_id' AND i.name = 'flow_wait');
  IF coalesce(array_length(got, 1), 0) = 0 THEN RETURN NULL; END IF;
  payload := json_build_object('k', NEW.value::jsonb ->> 'key', 'a', to_jsonb(got))::text;
  -- NOTIFY caps its payload (8000 bytes): past that the key alone; the instances then read the record.
  IF octet_length(payload) > 7900 THEN payload := json_build_object('k', NEW.value::jsonb ->> 'key')::text; END IF;
  PERFORM pg_notify('agentd_flow', payload);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER flow_key_write BEFORE INSERT OR UPDATE OF value ON agentd.records
  FOR EACH ROW WHEN (NEW.kind = 'meta' AND left(NEW.id, 9) = 'flow_key:')
  EXECUTE FUNCTION agentd.flow_key_write();

CREATE TRIGGER flow_key_gone AFTER DELETE ON agentd.records
  FOR EACH ROW WHEN (OLD.kind = 'meta' AND left(OLD.id, 9) = 'flow_key:')
  EXECUTE FUNCTION agentd.flow_key_gone();

CREATE TRIGGER flow_key_told AFTER INSERT OR UPDATE OF value ON agentd.records
  FOR EACH ROW WHEN (NEW.kind = 'meta' AND left(NEW.id, 9) = 'flow_key:')
  EXECUTE FUNCTION agentd.flow_key_told();
