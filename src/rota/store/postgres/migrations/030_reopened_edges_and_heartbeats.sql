-- rota schema, version 30: a retried parent's settled edges wait again; each attempt's
-- heartbeats are recorded.
--
-- Retrying (or re-arming) a workflow job that ended dead or cancelled re-opens the edges its
-- end satisfied (those on on_parent_failure = 'run' edges, or any a success before a re-run
-- left satisfied) to every child that has not started since (waiting, or pending: it waits
-- again) or that a retry may run again (dead, cancelled): each counts in the child's
-- waiting_on again, so a child retried with the parent (after it, or in the same statement)
-- waits for the parent's new outcome. A running or succeeded child keeps its run. The
-- children are updated first, under their row locks (a child claimed or retried meanwhile is
-- re-checked on its new version), and only their edges are re-opened. The settling of 019
-- follows unchanged; the rows changed here stay in their partitions (no state leaves its
-- table), so nothing moves.
ALTER FUNCTION rota_settle_dependents(rota_jobs, rota_jobs) RENAME TO rota_settle_dependents_019;
CREATE FUNCTION rota_settle_dependents(prior rota_jobs, job rota_jobs) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF prior.state IN ('dead', 'cancelled') AND job.state IN ('waiting', 'pending') THEN
        WITH reopened AS (
            UPDATE rota_jobs c SET waiting_on = c.waiting_on + 1,
                state = CASE WHEN c.state = 'pending' THEN 'waiting' ELSE c.state END
            FROM rota_job_deps d
            WHERE d.parent_id = job.id AND d.satisfied AND c.id = d.child_id
              AND c.state IN ('waiting', 'pending', 'dead', 'cancelled')
            RETURNING c.id
        )
        UPDATE rota_job_deps d SET satisfied = false
        FROM reopened r WHERE d.parent_id = job.id AND d.child_id = r.id;
    END IF;
    PERFORM rota_settle_dependents_019(prior, job);
END
$$;

-- Heartbeats: the heartbeat that extends a lease also counts itself and records its instant on
-- the job (the same UPDATE, fenced on the token as before); a claim sets them back to 0 and
-- NULL; an attempt's history entry keeps them when it ends (queries.sql). No index covers
-- either column, so a heartbeat writes no index entry it did not write before (its new
-- lease_until, in rota_jobs_leases, already makes it a non-HOT update); a constant default
-- rewrites no table.
ALTER TABLE rota_jobs ADD COLUMN heartbeats integer NOT NULL DEFAULT 0,
    ADD COLUMN last_heartbeat_at timestamptz;
