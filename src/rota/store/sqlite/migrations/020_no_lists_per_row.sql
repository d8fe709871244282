-- 020_no_lists_per_row: the per-row checks of rota_jobs compare with = instead of IN.
-- SQLite evaluates `x IN (a, b, c)` (three or more constants) by building a temporary B-tree
-- of the list, once per statement in a query, but once per row in the checks it runs for each
-- row it writes: the state CHECK, a partial index's WHERE (for the old and the new row) and a
-- trigger's WHEN. A claim or a completion paid for seven of those per job, more than the rest
-- of its update; `x = a OR x = b OR x = c` costs a few comparisons. The meaning of each
-- check, index and trigger is unchanged.

-- The state CHECK, rewritten in the table's stored definition as 012_workflows did (the
-- documented way to change a CHECK constraint without rebuilding the table; every row passes
-- the new one exactly when it passed the old). The DDL below bumps the schema version, so
-- every other connection re-reads the schema.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(
    sql,
    'CHECK (state IN (''pending'', ''running'', ''succeeded'', ''dead'', ''cancelled'', ''waiting''))',
    'CHECK (state = ''pending'' OR state = ''running'' OR state = ''succeeded'' OR state = ''dead''' ||
    ' OR state = ''cancelled'' OR state = ''waiting'')')
WHERE type = 'table' AND name = 'rota_jobs';
PRAGMA writable_schema = RESET;

-- Queries that read this index repeat its WHERE word for word (rota.store.sqlite.rows
-- .FINISHED): SQLite uses a partial index only for a query whose WHERE contains the index's.
DROP INDEX rota_jobs_finished;
CREATE INDEX rota_jobs_finished ON rota_jobs (finished_at)
    WHERE (state = 'succeeded' OR state = 'dead' OR state = 'cancelled');

-- The claim's and the completion's rows are ruled out first, before anything else is looked at.
DROP TRIGGER rota_jobs_tallied_update;
CREATE TRIGGER rota_jobs_tallied_update AFTER UPDATE OF state ON rota_jobs
WHEN old.state IS NOT new.state
 AND NOT (old.state = 'pending' AND new.state = 'running')
 AND NOT (old.state = 'running' AND new.state = 'succeeded')
 AND (old.state = 'succeeded' OR old.state = 'dead' OR old.state = 'cancelled'
      OR new.state = 'succeeded' OR new.state = 'dead' OR new.state = 'cancelled')
BEGIN
    UPDATE rota_finished_per_second SET n = n - 1
    WHERE (old.state = 'succeeded' OR old.state = 'dead' OR old.state = 'cancelled')
      AND old.finished_at IS NOT NULL
      AND second = old.finished_at - old.finished_at % 1000000 AND state = old.state;
    INSERT INTO rota_finished_per_second (second, state, n)
    SELECT new.finished_at - new.finished_at % 1000000, new.state, 1
    WHERE (new.state = 'succeeded' OR new.state = 'dead' OR new.state = 'cancelled')
      AND new.finished_at IS NOT NULL
    ON CONFLICT (second, state) DO UPDATE SET n = n + 1;
END;

DROP TRIGGER rota_jobs_tallied_delete;
CREATE TRIGGER rota_jobs_tallied_delete AFTER DELETE ON rota_jobs
WHEN (old.state = 'succeeded' OR old.state = 'dead' OR old.state = 'cancelled')
 AND old.finished_at IS NOT NULL
BEGIN
    UPDATE rota_finished_per_second SET n = n - 1
    WHERE second = old.finished_at - old.finished_at % 1000000 AND state = old.state;
END;

-- The workflow triggers, as 012_workflows made them but for the list in their WHEN.
DROP TRIGGER rota_jobs_satisfy_dependents;
CREATE TRIGGER rota_jobs_satisfy_dependents AFTER UPDATE OF state ON rota_jobs
WHEN new.workflow IS NOT NULL AND old.state IS NOT new.state
 AND (new.state = 'succeeded' OR new.state = 'dead' OR new.state = 'cancelled')
BEGIN
    UPDATE rota_jobs SET waiting_on = waiting_on - 1,
        state = CASE WHEN state = 'waiting' AND waiting_on = 1 THEN 'pending' ELSE state END
    WHERE id IN (SELECT child_id FROM rota_job_deps
                 WHERE parent_id = new.id AND NOT satisfied
                   AND (new.state = 'succeeded' OR on_parent_failure = 'run'));
    UPDATE rota_job_deps SET satisfied = 1
    WHERE parent_id = new.id AND NOT satisfied
      AND (new.state = 'succeeded' OR on_parent_failure = 'run');
END;
