-- rota schema, version 18: no claim can be planned over rota_jobs_pending_run_at.
--
-- 017_counts added that index (run_at, pending jobs only) so that the age of the oldest due
-- job is one index entry. Its predicate, state = 'pending', is also every claim's condition,
-- so the planner may use it for a claim's probes instead of rota_jobs_due. With fresh
-- statistics it never does; with stale ones it can: after a table whose statistics say no job
-- is pending (analysed while every job was finished) takes a burst of 100,000 jobs, each probe
-- read every pending job through this index and sorted them, about 100 ms per claim instead
-- of 4, until the next autoanalyze (measured: bench.run's burst drains, at a third of their
-- rate). The index now also names a condition true of every row that no claim states
-- (attempt >= 0), which the planner cannot prove from a claim's conditions: the oldest-due
-- query, which states it, keeps the index; claims cannot see it.
DROP INDEX rota_jobs_pending_run_at;
CREATE INDEX rota_jobs_pending_run_at ON rota_jobs (run_at) WHERE state = 'pending' AND attempt >= 0;
