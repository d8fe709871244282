-- 028_held_jobs_and_missed_slots: the held state (rota.domain.transitions: hold, release_held)
-- and what resuming a paused schedule does with the slots it missed (at the end). A held job
-- is active but never claimed: the claim's partial indexes say state = 'pending' and so never
-- see it; it keeps its unique key, and a parent's failure cancels it as it cancels a waiting
-- job.

-- The state CHECK gains 'held' in the table's stored definition, as 012 and 020 did (every
-- row already passes); the DDL below bumps the schema version for every other connection.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, ' OR state = ''cancelled'' OR state = ''waiting'')',
                  ' OR state = ''cancelled'' OR state = ''waiting'' OR state = ''held'')')
WHERE type = 'table' AND name = 'rota_jobs';
PRAGMA writable_schema = RESET;

-- A held job keeps its unique key: no other job with that key may be enqueued meanwhile.
DROP INDEX rota_jobs_active_unique_key;
CREATE UNIQUE INDEX rota_jobs_active_unique_key ON rota_jobs (unique_key)
    WHERE (state = 'pending' OR state = 'running' OR state = 'held') AND unique_key IS NOT NULL;

-- A parent that ends dead or cancelled cancels its held children on "cancel" edges too.
DROP TRIGGER rota_jobs_cancel_dependents;
CREATE TRIGGER rota_jobs_cancel_dependents AFTER UPDATE OF state ON rota_jobs
WHEN new.workflow IS NOT NULL AND old.state IS NOT new.state
 AND (new.state = 'dead' OR new.state = 'cancelled')
BEGIN
    UPDATE rota_jobs SET state = 'cancelled', finished_at = new.finished_at,
        blocked_by = new.id,
        last_error = 'cancelled: parent job ' || new.id || ' ended ' || new.state
    WHERE (state = 'waiting' OR state = 'held')
      AND id IN (SELECT child_id FROM rota_job_deps
                 WHERE parent_id = new.id AND NOT satisfied AND on_parent_failure = 'cancel');
END;

-- What resuming a paused schedule does with the slots that fell due while it was paused
-- (rota.domain.schedule_state.Missed): 'queue' (as before: the misfire policy decides) or
-- 'drop' (none fires). Set by each pause.
ALTER TABLE rota_schedules ADD COLUMN missed TEXT NOT NULL DEFAULT 'queue'
    CHECK (missed = 'queue' OR missed = 'drop');
