-- 019_hot_writes_count_themselves: the three changes a queue makes most, an insert, a claim
-- (pending to running) and a success (running to succeeded), are counted in rota_counts and
-- rota_finished_per_second by the statements that make them, once per statement
-- (rota.store.sqlite.counts), instead of by row triggers. Any trigger on an INSERT makes
-- SQLite insert each index entry with a fresh descent of its B-tree, which cost more than
-- the rest of the insert, and the update triggers ran two statements each per row. Every
-- other change of state (failures, retries, cancels, expiry, the workflow triggers' own
-- updates, deletes) is still counted by the triggers.
DROP TRIGGER rota_jobs_counted_insert;

DROP TRIGGER rota_jobs_counted_update;
CREATE TRIGGER rota_jobs_counted_update AFTER UPDATE OF state, queue ON rota_jobs
WHEN (old.state IS NOT new.state OR old.queue IS NOT new.queue)
 AND NOT (old.queue = new.queue
          AND ((old.state = 'pending' AND new.state = 'running')
               OR (old.state = 'running' AND new.state = 'succeeded')))
BEGIN
    UPDATE rota_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    INSERT INTO rota_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

-- Only a change into or out of a finished state touches the tally: a claim never did.
DROP TRIGGER rota_jobs_tallied_update;
CREATE TRIGGER rota_jobs_tallied_update AFTER UPDATE OF state ON rota_jobs
WHEN old.state IS NOT new.state
 AND (old.state IN ('succeeded', 'dead', 'cancelled') OR new.state IN ('succeeded', 'dead', 'cancelled'))
 AND NOT (old.state = 'running' AND new.state = 'succeeded')
BEGIN
    UPDATE rota_finished_per_second SET n = n - 1
    WHERE old.state IN ('succeeded', 'dead', 'cancelled') AND old.finished_at IS NOT NULL
      AND second = old.finished_at - old.finished_at % 1000000 AND state = old.state;
    INSERT INTO rota_finished_per_second (second, state, n)
    SELECT new.finished_at - new.finished_at % 1000000, new.state, 1
    WHERE new.state IN ('succeeded', 'dead', 'cancelled') AND new.finished_at IS NOT NULL
    ON CONFLICT (second, state) DO UPDATE SET n = n + 1;
END;

-- The active unique key's index held an entry for every pending and running job, NULL key
-- or not; a NULL never conflicts, so only jobs with a key need one.
DROP INDEX rota_jobs_active_unique_key;
CREATE UNIQUE INDEX rota_jobs_active_unique_key ON rota_jobs (unique_key)
    WHERE state IN ('pending', 'running') AND unique_key IS NOT NULL;
