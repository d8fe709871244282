-- rota schema, version 28: the held state (rota.domain.transitions: hold, release_held), and
-- what resuming a paused schedule does with the slots it missed (at the end).
--
-- A held job is active: its row stays in rota_jobs_active, whose list of states gains
-- 'held'. No claim sees it: the claim's indexes are partial on state = 'pending', and its
-- statements name the states they take. It keeps its unique key (the active key's index
-- covers it), and a parent that ends dead or cancelled, or is deleted, cancels it on a
-- "cancel" edge as it cancels a waiting child.
--
-- The partition's states change by detaching it and attaching it again; the check added
-- first (one pass over the active jobs, under the lock) spares the attach its own pass.
LOCK TABLE rota_jobs IN ACCESS EXCLUSIVE MODE;
ALTER TABLE rota_jobs DETACH PARTITION rota_jobs_active;
ALTER TABLE rota_jobs_active ADD CONSTRAINT rota_jobs_active_states
    CHECK (state IN ('waiting', 'pending', 'running', 'held'));
ALTER TABLE rota_jobs ATTACH PARTITION rota_jobs_active
    FOR VALUES IN ('waiting', 'pending', 'running', 'held');
ALTER TABLE rota_jobs_active DROP CONSTRAINT rota_jobs_active_states;

-- A held job keeps its unique key: no other job with that key may be enqueued meanwhile.
DROP INDEX rota_jobs_unique_active;
CREATE UNIQUE INDEX rota_jobs_unique_active ON rota_jobs_active (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('pending', 'running', 'held');

-- The held children of a workflow job that ended dead or cancelled, or was deleted, on its
-- "cancel" edges: cancelled as 019's settling cancels the waiting ones, with the same words,
-- tally and result waits. It fires before rota_jobs_left (triggers fire by name), while a
-- deleted parent's edges are still there; a cancelled child's own end settles its children.
CREATE FUNCTION rota_jobs_held_children() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    job rota_jobs;
    at timestamptz := now();
    reason text;
    ids bigint[];
BEGIN
    SELECT * INTO job FROM rota_jobs WHERE id = OLD.id;
    IF NOT FOUND THEN
        reason := 'cancelled: parent job ' || OLD.id || ' was deleted';
    ELSIF job.state IN ('dead', 'cancelled') AND job.state IS DISTINCT FROM OLD.state THEN
        reason := 'cancelled: parent job ' || OLD.id || ' ended ' || job.state;
        at := coalesce(job.finished_at, at);
    ELSE
        RETURN NULL;
    END IF;
    WITH cancelled AS (
        UPDATE rota_jobs c SET state = 'cancelled', finished_at = at, last_error = reason,
            blocked_by = CASE WHEN job.id IS NULL THEN NULL ELSE OLD.id END
        FROM rota_job_deps d
        WHERE d.parent_id = OLD.id AND NOT d.satisfied AND d.on_parent_failure = 'cancel'
          AND c.id = d.child_id AND c.state = 'held'
        RETURNING c.id
    )
    SELECT array_agg(id) INTO ids FROM cancelled;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO rota_finished_per_minute AS f (minute, state, n)
    VALUES (date_trunc('minute', at), 'cancelled', cardinality(ids))
    ON CONFLICT (minute, state) DO UPDATE SET n = f.n + excluded.n;
    DELETE FROM rota_result_waits WHERE job_id = ANY(ids);
    IF FOUND THEN
        PERFORM pg_notify('rota_finished', '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER rota_jobs_held_children AFTER DELETE ON rota_jobs
    FOR EACH ROW WHEN (OLD.workflow IS NOT NULL) EXECUTE FUNCTION rota_jobs_held_children();

-- What resuming a paused schedule does with the slots that fell due while it was paused
-- (rota.domain.schedule_state.Missed): 'queue' (as before: the misfire policy decides) or
-- 'drop' (none fires). Set by each pause. A constant default: no rewrite of the table.
ALTER TABLE rota_schedules ADD COLUMN missed text NOT NULL DEFAULT 'queue'
    CHECK (missed IN ('queue', 'drop'));
