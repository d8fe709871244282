-- 012_workflows: jobs that depend on jobs (rota.domain.workflow). A job with parents is
-- 'waiting' until every edge to a parent is satisfied, then 'pending'; the claim index is
-- partial on state = 'pending', so claims never see waiting jobs.
-- The state CHECK gains 'waiting' by editing the table's stored definition, the documented way
-- to loosen a CHECK constraint without rebuilding the table (every row already passes); the
-- RESET makes this connection re-read the schema, and the DDL below bumps the schema version
-- so every other connection re-reads it too.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''cancelled''))', '''cancelled'', ''waiting''))')
WHERE type = 'table' AND name = 'rota_jobs';
PRAGMA writable_schema = RESET;

-- workflow: the id of the workflow's first job (NULL outside workflows: the triggers below
-- ignore such rows); waiting_on: the edges to parents not yet satisfied; blocked_by: the parent
-- whose end cancelled this job (retrying that parent re-arms it).
ALTER TABLE rota_jobs ADD COLUMN workflow INTEGER;
ALTER TABLE rota_jobs ADD COLUMN waiting_on INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rota_jobs ADD COLUMN blocked_by INTEGER;
CREATE INDEX rota_jobs_workflow ON rota_jobs (workflow, id) WHERE workflow IS NOT NULL;
CREATE INDEX rota_jobs_blocked_by ON rota_jobs (blocked_by) WHERE blocked_by IS NOT NULL;

-- One row per edge; pruning a job takes its edges with it.
CREATE TABLE rota_job_deps (
    parent_id         INTEGER NOT NULL REFERENCES rota_jobs (id) ON DELETE CASCADE,
    child_id          INTEGER NOT NULL REFERENCES rota_jobs (id) ON DELETE CASCADE,
    on_parent_failure TEXT    NOT NULL CHECK (on_parent_failure IN ('cancel', 'run')),
    satisfied         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent_id, child_id)
) WITHOUT ROWID;
CREATE INDEX rota_job_deps_child ON rota_job_deps (child_id);

-- When a workflow job's state changes, its direct children are settled in the same
-- transaction, by whichever statement changed it (SQLite runs one writer at a time, so a
-- counter reaches 0 once). Rows these triggers change fire them in turn (recursive_triggers).
CREATE TRIGGER rota_jobs_satisfy_dependents AFTER UPDATE OF state ON rota_jobs
WHEN new.workflow IS NOT NULL AND old.state IS NOT new.state
 AND new.state IN ('succeeded', 'dead', 'cancelled')
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

CREATE TRIGGER rota_jobs_cancel_dependents AFTER UPDATE OF state ON rota_jobs
WHEN new.workflow IS NOT NULL AND old.state IS NOT new.state
 AND new.state IN ('dead', 'cancelled')
BEGIN
    UPDATE rota_jobs SET state = 'cancelled', finished_at = new.finished_at,
        blocked_by = new.id,
        last_error = 'cancelled: parent job ' || new.id || ' ended ' || new.state
    WHERE state = 'waiting'
      AND id IN (SELECT child_id FROM rota_job_deps
                 WHERE parent_id = new.id AND NOT satisfied AND on_parent_failure = 'cancel');
END;

-- Retried: the jobs its end cancelled wait again, unless another parent of theirs has ended
-- dead or cancelled on a 'cancel' edge (then that one blocks them from now on).
CREATE TRIGGER rota_jobs_rearm_dependents AFTER UPDATE OF state ON rota_jobs
WHEN new.workflow IS NOT NULL AND old.state IN ('dead', 'cancelled')
 AND new.state IN ('waiting', 'pending')
BEGIN
    -- -id marks, for the next statement, the jobs nothing else blocks (ids are positive).
    UPDATE rota_jobs SET blocked_by = coalesce((
        SELECT d.parent_id FROM rota_job_deps AS d JOIN rota_jobs AS p ON p.id = d.parent_id
        WHERE d.child_id = rota_jobs.id AND d.parent_id <> new.id AND NOT d.satisfied
          AND d.on_parent_failure = 'cancel' AND p.state IN ('dead', 'cancelled') LIMIT 1),
        -new.id)
    WHERE blocked_by = new.id AND state = 'cancelled';
    UPDATE rota_jobs SET state = 'waiting', finished_at = NULL, last_error = NULL,
        blocked_by = NULL
    WHERE blocked_by = -new.id;
END;
