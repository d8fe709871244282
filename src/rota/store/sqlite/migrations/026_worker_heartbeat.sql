-- 026_worker_heartbeat: each worker's own heartbeat interval in seconds (NULL for a worker that
-- registered before this column), so `rota workers`, the API and the dashboard judge a worker
-- alive or silent by the interval it beats at, not by one interval assumed for the fleet.
ALTER TABLE rota_workers ADD COLUMN heartbeat_seconds REAL;
