-- rota schema, version 29: the activity of each queue and kind per minute, for the kind and
-- queue pages' charts (rota.domain.activity).
--
-- The statements that end an attempt (complete, complete_apart, fail) add to these rows in the
-- same statement, from the rows they changed under their lease token: one upsert per (minute,
-- queue, kind, duration bucket) whatever the number of jobs in the batch, the rows taken in
-- key order so that two batches never deadlock; fail adds one per (minute, queue, kind, error
-- fingerprint). Pages read these rows only, never the jobs.
--
-- In a row, succeeded, failed and dead count the attempts whose run time falls in the bucket
-- (dead: those of the failed that made their job dead), waited those whose wait, from the
-- job's due time to the attempt's start, does. Rows are updated in place (no indexed column
-- changes): the fill factor leaves room for those updates on the row's own page.
CREATE TABLE rota_activity (
    minute    timestamptz NOT NULL,
    queue     text        NOT NULL,
    kind      text        NOT NULL,
    bucket    smallint    NOT NULL,
    succeeded integer     NOT NULL DEFAULT 0,
    failed    integer     NOT NULL DEFAULT 0,
    dead      integer     NOT NULL DEFAULT 0,
    waited    integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue, kind, bucket)
) WITH (fillfactor = 70, autovacuum_vacuum_cost_delay = 1);
-- A page reads one queue's or one kind's minutes of its window.
CREATE INDEX rota_activity_queue ON rota_activity (queue, minute);
CREATE INDEX rota_activity_kind ON rota_activity (kind, minute);

-- Failed attempts by error fingerprint; the sample is the latest message of the minute.
CREATE TABLE rota_error_minutes (
    minute      timestamptz NOT NULL,
    queue       text        NOT NULL,
    kind        text        NOT NULL,
    fingerprint text        NOT NULL,
    sample      text        NOT NULL,
    n           integer     NOT NULL,
    PRIMARY KEY (minute, queue, kind, fingerprint)
) WITH (fillfactor = 70, autovacuum_vacuum_cost_delay = 1);
CREATE INDEX rota_error_minutes_queue ON rota_error_minutes (queue, minute);
CREATE INDEX rota_error_minutes_kind ON rota_error_minutes (kind, minute);
