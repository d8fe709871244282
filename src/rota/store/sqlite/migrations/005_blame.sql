-- 005_blame: crash suspects (rota.domain.blame). "crashes" counts the expired leases under which
-- the job's handler had started (above 0: a suspect, claimed and run alone); "lease_started"
-- says whether the current lease's handler has started (1 from the claim for an ordinary job,
-- from the worker's begin() for a suspect), so an expiry knows whether to count the attempt.
ALTER TABLE rota_jobs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rota_jobs ADD COLUMN lease_started INTEGER NOT NULL DEFAULT 1;

-- claim: the pending suspects of the claimed queues, among which are the jobs a claim takes
-- alone. Suspects are few, and ordinary jobs never enter this index, so it costs them
-- nothing. Its columns cover the lookup (SQLite covers no query with a partial index lacking
-- a column of its WHERE).
CREATE INDEX rota_jobs_suspects ON rota_jobs (queue, id, state, crashes, attempt, max_attempts)
    WHERE state = 'pending' AND crashes > 0;
