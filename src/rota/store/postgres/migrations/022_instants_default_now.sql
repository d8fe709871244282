-- rota schema, version 22: a job's run_at and created_at default to the transaction's now().
--
-- A bulk enqueue by COPY sends every row's instants as text, which the server parses row by
-- row: of a keyless job due now, both are the transaction's now(), as reserve_ids returned
-- it. With these defaults, a COPY of jobs due now leaves both columns out
-- ("copy_jobs_now"): a quarter of the server's time per row, measured on 100,000 rows of the
-- bench's cluster (940 against 710 ms, median of 6). Every other insert names both columns.
ALTER TABLE rota_jobs ALTER COLUMN run_at SET DEFAULT now(),
                      ALTER COLUMN created_at SET DEFAULT now();
