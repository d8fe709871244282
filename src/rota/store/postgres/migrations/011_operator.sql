-- rota schema, version 11: operator controls. "expires_at": no attempt of the job starts at
-- or after it; the claim skips such a job, and the rescuer's pass cancels it (last_error
-- 'expired'). A nullable column without a default rewrites nothing; the partial index holds
-- only pending jobs that can expire, so the expiry pass costs nothing where none do.
ALTER TABLE rota_jobs ADD COLUMN expires_at timestamptz;
CREATE INDEX rota_jobs_expiring ON rota_jobs (expires_at)
    WHERE state = 'pending' AND expires_at IS NOT NULL;

-- Unique keys held beyond the active states (JobSpec.unique_for / unique_states): until
-- "unique_until", while the job's state is one of the bits of "unique_states" (pending 1,
-- running 2, succeeded 4, dead 8, cancelled 16). NULL for the keys held only while active,
-- which the partial unique index on active keys alone guards. Only jobs with such a hold
-- enter the index, so it costs the others nothing.
ALTER TABLE rota_jobs ADD COLUMN unique_until timestamptz, ADD COLUMN unique_states smallint;
CREATE INDEX rota_jobs_unique_held ON rota_jobs (unique_key, unique_until)
    WHERE unique_until IS NOT NULL;
