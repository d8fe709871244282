-- rota schema, version 14: what a workflow's children see when a parent is deleted, and
-- schedules that start workflows (at the end).
--
-- A deleted parent (rota.domain.workflow): each edge by which the parent still held a child up stops counting;
-- a waiting child on a 'cancel' edge is cancelled naming the parent, and one whose last such
-- edge it was becomes pending, as if the parent had ended without succeeding.
--
-- An AFTER DELETE trigger does it, inside whichever statement deleted the parent (delete,
-- purge, retention): no deleting path can forget it. It must still see the parent's edges, and
-- the ON DELETE CASCADE of rota_job_deps.parent_id (itself an AFTER trigger, fired before ours
-- by name order) would remove them first: so the parent's side of an edge is no longer a
-- foreign key, and the trigger deletes the edges itself. The child's side still cascades.
-- Race-free: the trigger runs with the parent's row lock held, and its statements take a new
-- snapshot, so they see an edge added by a workflow enqueue that locked the parent first
-- (workflow_parents); a child's counter is updated under its row lock, re-read when another
-- parent of it changed it meanwhile (READ COMMITTED re-evaluation). A child deleted by the same
-- statement is already gone when the trigger runs: nothing to update there.
ALTER TABLE rota_job_deps DROP CONSTRAINT rota_job_deps_parent_id_fkey;

CREATE FUNCTION rota_orphan_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    reason text := 'cancelled: parent job ' || OLD.id || ' was deleted';
    n bigint;
BEGIN
    WITH held AS (
        DELETE FROM rota_job_deps WHERE parent_id = OLD.id
        RETURNING child_id, on_parent_failure, satisfied
    ), settled AS (
        UPDATE rota_jobs c SET waiting_on = c.waiting_on - 1,
            state = CASE WHEN c.state <> 'waiting' THEN c.state
                         WHEN h.on_parent_failure = 'cancel' THEN 'cancelled'
                         WHEN c.waiting_on = 1 THEN 'pending' ELSE c.state END,
            finished_at = CASE WHEN c.state = 'waiting' AND h.on_parent_failure = 'cancel'
                               THEN now() ELSE c.finished_at END,
            last_error = CASE WHEN c.state = 'waiting' AND h.on_parent_failure = 'cancel'
                              THEN reason
                              ELSE c.last_error END,
            -- Nothing can re-arm a job cancelled by a parent that is gone.
            blocked_by = CASE WHEN c.blocked_by = OLD.id THEN NULL ELSE c.blocked_by END
        FROM held h
        WHERE c.id = h.child_id AND NOT h.satisfied
        -- Only this update can have written this parent's reason (a job is deleted once): it
        -- tells a child cancelled now from one that was already cancelled.
        RETURNING c.id, c.state, c.queue, c.run_at,
                  c.state = 'cancelled' AND c.last_error = reason AS cancelled_now
    ), tally AS (
        INSERT INTO rota_finished_per_minute (minute, state, n)
        SELECT date_trunc('minute', now()), 'cancelled', count(*) FROM settled
        WHERE cancelled_now HAVING count(*) > 0
        ON CONFLICT (minute, state) DO UPDATE SET n = rota_finished_per_minute.n + excluded.n
        RETURNING 1
    ), wake AS (
        SELECT pg_notify('rota_jobs',
                         queue || ' ' || (extract(epoch FROM min(run_at)) * 1000000)::bigint)
        FROM settled WHERE state = 'pending' GROUP BY queue
    ), waited AS (
        DELETE FROM rota_result_waits
        WHERE job_id IN (SELECT id FROM settled WHERE cancelled_now)
        RETURNING 1
    ), finished AS (
        SELECT pg_notify('rota_finished', '') WHERE EXISTS (SELECT 1 FROM waited)
    )
    SELECT (SELECT count(*) FROM tally) + (SELECT count(*) FROM wake)
         + (SELECT count(*) FROM finished) INTO n;
    RETURN NULL;
END
$$;

CREATE TRIGGER rota_jobs_orphan_dependents AFTER DELETE ON rota_jobs
    FOR EACH ROW WHEN (OLD.workflow IS NOT NULL)
    EXECUTE FUNCTION rota_orphan_dependents();

-- Schedules that start workflows (rota.domain.workflow.slot_graph): each slot writes the graph
-- a builder registered in code under the schedule's name returns, in the transaction that
-- claims the slot. A constant default rewrites nothing.
ALTER TABLE rota_schedules ADD COLUMN workflow boolean NOT NULL DEFAULT false;
