-- 011_operator: operator controls. "expires_at" (microseconds, UTC): no attempt of the job
-- starts at or after it; the claim skips such a job, and the rescuer's pass cancels it
-- (last_error 'expired'). The partial index holds only pending jobs that can expire.
ALTER TABLE rota_jobs ADD COLUMN expires_at INTEGER;
CREATE INDEX rota_jobs_expiring ON rota_jobs (expires_at)
    WHERE state = 'pending' AND expires_at IS NOT NULL;

-- claim: the group reads skip expired jobs (expires_at > now) from the index alone, as they
-- read everything else they need: the column joins the covering index (see 003).
DROP INDEX rota_jobs_due;
CREATE INDEX rota_jobs_due
    ON rota_jobs (queue, tenant, priority DESC, kind, run_at, id, state, expires_at)
    WHERE state = 'pending';

-- Unique keys held beyond the active states (JobSpec.unique_for / unique_states): until
-- "unique_until", while the job's state is one of the bits of "unique_states" (pending 1,
-- running 2, succeeded 4, dead 8, cancelled 16); NULL for keys held only while active.
-- Enqueues are serialised by BEGIN IMMEDIATE, so looking the holder up before inserting is
-- race-free; rota_jobs_unique_key finds it.
ALTER TABLE rota_jobs ADD COLUMN unique_until INTEGER;
ALTER TABLE rota_jobs ADD COLUMN unique_states INTEGER;
