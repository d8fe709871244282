-- rota schema, version 25: results longer than MAX_RESULT_BYTES (64 KiB of JSON), kept out
-- of the job's row (rows are read by every list and claim) and read only with that job; the
-- job's own result column stays NULL for them. No foreign key (rota_jobs is partitioned by
-- state and day): retention deletes the rows whose job is gone after each pass, and a re-run
-- deletes its job's row.
CREATE TABLE rota_results (
    job_id bigint PRIMARY KEY,
    result json   NOT NULL
);
