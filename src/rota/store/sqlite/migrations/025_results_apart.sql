-- 025_results_apart: results longer than MAX_RESULT_BYTES (64 KiB of JSON), kept out of the
-- job's row (rows are read by every list and claim) and read only with that job. The job's
-- own result column stays NULL for them. Deleted with their job (retention, delete).
CREATE TABLE rota_results (
    job_id INTEGER PRIMARY KEY REFERENCES rota_jobs (id) ON DELETE CASCADE,
    result TEXT    NOT NULL
);
