-- rota schema, version 11: operator controls. "expires_at": no attempt of the job starts at
-- or after it; the claim skips such a job, and the rescuer's pass cancels it (last_error
-- 'expired'). A nullable column without a default rewrites nothing; the partial index holds
-- only pending jobs that can expire, so the expiry pass costs nothing where none do.
ALTER TABLE rota_jobs ADD COLUMN expires_at timestamptz;
CREATE INDEX rota_jobs_expiring ON rota_jobs (expires_at)
    WHERE state = 'pending' AND expires_at IS NOT NULL;
