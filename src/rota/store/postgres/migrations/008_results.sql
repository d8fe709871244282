-- rota schema, version 8: what a handler returned (json, exactly as sent; NULL when it
-- returned None), kept with the succeeded job and written by the completion that succeeds
-- it; and the progress its running attempt last reported (a fraction in [0, 1] and a short
-- message), written by heartbeats and cleared by the claim that starts an attempt. The
-- domain checks both before they are sent (rota.domain.job.encode_result, Progress).
-- Nullable columns without defaults or constraints: adding them rewrites and scans nothing.
-- Numbered before 009: the migrator applies every version it has not recorded, in order of
-- their names, so a database already at 009 gets 008 next.
ALTER TABLE rota_jobs
    ADD COLUMN result json,
    ADD COLUMN progress double precision,
    ADD COLUMN progress_message text;

-- The jobs someone waits for (app.result): a statement that makes one of them terminal deletes
-- its row and sends one NOTIFY rota_finished; finishing jobs nobody waits for notifies no one,
-- so the completion path pays a probe of this (mostly empty) table, never a NOTIFY's commit
-- lock. Unlogged: a wait does not outlive a crash of the server, and writes no WAL.
CREATE UNLOGGED TABLE rota_result_waits (job_id bigint PRIMARY KEY);
