-- 008_results: what a handler returned (JSON text, NULL when it returned None), kept with the
-- succeeded job and written by the completion that succeeds it; and the progress its running
-- attempt last reported (a fraction in [0, 1] and a short message), written by heartbeats and
-- cleared by the claim that starts an attempt. Nullable columns without defaults: adding them
-- rewrites nothing, and retention's delete removes them with their row.
ALTER TABLE rota_jobs ADD COLUMN result TEXT;
ALTER TABLE rota_jobs ADD COLUMN progress REAL;
ALTER TABLE rota_jobs ADD COLUMN progress_message TEXT;
