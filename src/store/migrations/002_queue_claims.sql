-- agentd PostgreSQL schema, version 2: claim holds on queued background runs.
--
-- A claimer takes queued runs with one statement (FOR UPDATE SKIP LOCKED, src/store/pg-claim.ts)
-- that also marks them held by its claim pass until claim_until (epoch ms of the claimer's clock),
-- so a concurrent claimer on another instance skips them instead of racing the same rows' CAS.
-- The hold is advisory: the claim itself is still the CAS write of the run's row, which fences
-- a holder that took too long. Both columns are NULL on every other row.
ALTER TABLE agentd.records ADD COLUMN claim_token text, ADD COLUMN claim_until double precision;
