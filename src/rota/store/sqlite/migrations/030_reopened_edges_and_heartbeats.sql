-- 030: a retried parent's settled edges wait again; each attempt's heartbeats are recorded.
--
-- Retrying (or re-arming) a workflow job that ended dead or cancelled re-opens the edges its
-- end satisfied (those on on_parent_failure = 'run' edges, or any a success before a re-run
-- left satisfied) to every child that has not started since (waiting, or pending: it waits
-- again) or that a retry may run again (dead, cancelled): each counts in the child's
-- waiting_on again, so a child retried with the parent waits for the parent's new outcome.
-- A running or succeeded child keeps its run. The jobs' update comes first and the edges'
-- second, by the same states, which the first leaves each child in.
CREATE TRIGGER rota_jobs_reopen_edges AFTER UPDATE OF state ON rota_jobs
WHEN new.workflow IS NOT NULL AND old.state IN ('dead', 'cancelled')
 AND new.state IN ('waiting', 'pending')
BEGIN
    UPDATE rota_jobs SET waiting_on = waiting_on + 1,
        state = CASE WHEN state = 'pending' THEN 'waiting' ELSE state END
    WHERE id IN (SELECT child_id FROM rota_job_deps WHERE parent_id = new.id AND satisfied)
      AND (state = 'waiting' OR state = 'pending' OR state = 'dead' OR state = 'cancelled');
    UPDATE rota_job_deps SET satisfied = 0
    WHERE parent_id = new.id AND satisfied
      AND EXISTS (SELECT 1 FROM rota_jobs AS c WHERE c.id = rota_job_deps.child_id
                    AND (c.state = 'waiting' OR c.state = 'dead' OR c.state = 'cancelled'));
END;

-- Heartbeats: the heartbeat that extends a lease also counts itself and records its instant on
-- the job (the same UPDATE, fenced on the token as before); a claim sets them back to 0 and
-- NULL; an attempt's history row keeps them when it ends (rota.store.sqlite.claims).
ALTER TABLE rota_jobs ADD COLUMN heartbeats INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rota_jobs ADD COLUMN last_heartbeat_at INTEGER;
ALTER TABLE rota_attempts ADD COLUMN heartbeats INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rota_attempts ADD COLUMN last_heartbeat_at INTEGER;
-- An attempt whose lease expired: when it ran out (its worker's last heartbeat, that instant,
-- then the rescue or the takeover that ended it).
ALTER TABLE rota_attempts ADD COLUMN lease_until INTEGER;
