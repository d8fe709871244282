-- 025_results_apart: results longer than MAX_RESULT_BYTES (64 KiB of JSON), kept out of the
-- job's row (rows are read by every list and claim) and read only with that job. The job's
-- own result column stays NULL for them. Deleted with their job (retention, delete). "token"
-- is the lease of the attempt that returned it: a row is the job's result only while that is
-- the job's token (a re-run's new attempt series leaves the old row behind, unread).
CREATE TABLE rota_results (
    job_id INTEGER PRIMARY KEY REFERENCES rota_jobs (id) ON DELETE CASCADE,
    token  INTEGER NOT NULL,
    result TEXT    NOT NULL
);
