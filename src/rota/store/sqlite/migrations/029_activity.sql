-- 029: the activity of each queue and kind per minute, for the kind and queue pages' charts
-- (rota.domain.activity). The statements that end an attempt (a success, a failure) add to
-- these rows in their own transaction, only for the jobs they changed under their lease token:
-- one row per (minute, queue, kind, duration bucket) whatever the number of jobs, and one per
-- (minute, queue, kind, error fingerprint). Pages read these rows only, never the jobs.
--
-- In a row, succeeded, failed and dead count the attempts whose run time falls in the bucket
-- (dead: those of the failed that made their job dead), waited those whose wait, from the
-- job's due time to the attempt's start, does.
CREATE TABLE rota_activity (
    minute    INTEGER NOT NULL,
    queue     TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    bucket    INTEGER NOT NULL,
    succeeded INTEGER NOT NULL DEFAULT 0,
    failed    INTEGER NOT NULL DEFAULT 0,
    dead      INTEGER NOT NULL DEFAULT 0,
    waited    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue, kind, bucket)
) WITHOUT ROWID;
-- A page reads one queue's or one kind's minutes of its window.
CREATE INDEX rota_activity_queue ON rota_activity (queue, minute);
CREATE INDEX rota_activity_kind ON rota_activity (kind, minute);

-- Failed attempts by error fingerprint; the sample is the latest message of the minute.
CREATE TABLE rota_error_minutes (
    minute      INTEGER NOT NULL,
    queue       TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    sample      TEXT    NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (minute, queue, kind, fingerprint)
) WITHOUT ROWID;
CREATE INDEX rota_error_minutes_queue ON rota_error_minutes (queue, minute);
CREATE INDEX rota_error_minutes_kind ON rota_error_minutes (kind, minute);
