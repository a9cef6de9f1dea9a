-- agentd PostgreSQL schema, version 3: room on each page of agentd.records for the updates of its rows.
--
-- A record is created and then updated a few times soon after (a run's row and its snapshot at each
-- step). With pages filled to 100 % by the creates, almost every update had to put the new version
-- on another page: a non-HOT update, which inserts into both indexes of the table (measured: 20 % of
-- the updates were HOT). With half of each page left free, the new version stays on the same page
-- and the indexes are not touched (measured: 90-100 % HOT, PostgreSQL CPU per run about 12 % lower);
-- the dead versions are pruned from the page on a later visit. Only pages filled from now on keep the
-- room; no row is rewritten, and the lock taken does not block reads or writes.
ALTER TABLE agentd.records SET (fillfactor = 50);
