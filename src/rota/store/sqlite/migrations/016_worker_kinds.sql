-- 016_worker_kinds: the kinds each worker runs (a JSON array; NULL for a worker that did not
-- say, which may run any kind). The rescuer ends a pending job only when the live workers of
-- its queue all listed their kinds and none lists the job's (Store.end_unrunnable).
ALTER TABLE rota_workers ADD COLUMN kinds TEXT;
