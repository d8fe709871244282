-- rota schema, version 25: results longer than MAX_RESULT_BYTES (64 KiB of JSON), kept out
-- of the job's row (rows are read by every list and claim) and read only with that job; the
-- job's own result column stays NULL for them. "token" is the lease of the attempt that
-- returned it: a row is the job's result only while that is the job's token (a re-run's new
-- attempt series leaves the old row behind, unread). No foreign key (rota_jobs is partitioned
-- by state and day): retention deletes the rows whose job is gone after each pass.
CREATE TABLE rota_results (
    job_id bigint PRIMARY KEY,
    token  bigint NOT NULL,
    result json   NOT NULL
);
