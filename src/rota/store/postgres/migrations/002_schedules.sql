-- rota schema, version 2: recurring schedules. A row is a definition (the rule as plain
-- columns, rebuilt with Rule.from_dict) and where the schedule stands; fire_due locks due rows
-- with FOR UPDATE SKIP LOCKED and advances them in the transaction that inserts their jobs.

CREATE TABLE rota_schedules (
    name           text        PRIMARY KEY,
    kind           text        NOT NULL,
    payload        json        NOT NULL,
    queue          text        NOT NULL,
    priority       smallint    NOT NULL,
    tenant         text,
    max_attempts   integer     NOT NULL CHECK (max_attempts > 0),
    every_us       bigint,                  -- an interval rule ...
    cron           text,                    -- ... or a cron rule, never both
    timezone       text        NOT NULL,
    anchor         timestamptz,             -- the interval grid's origin
    jitter_us      bigint      NOT NULL,
    misfire        text        NOT NULL CHECK (misfire IN ('latest', 'skip', 'all')),
    misfire_limit  integer     NOT NULL,
    grace_us       bigint      NOT NULL,
    overlap        text        NOT NULL CHECK (overlap IN ('skip', 'allow')),
    paused         boolean     NOT NULL DEFAULT false,
    next_run_at    timestamptz NOT NULL,    -- the next nominal slot
    -- next_run_at plus the schedule's jitter offset (derived from its name in Python): the
    -- instant it is due, so finding due schedules is one index range.
    due_at         timestamptz NOT NULL,
    last_run_at    timestamptz,             -- the latest slot that got a job
    last_job_id    bigint,                  -- no foreign key: pruning a job must not touch it
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    CHECK ((every_us IS NULL) <> (cron IS NULL))
);

-- fire_due and next_fire_at: unpaused schedules in the order they come due.
CREATE INDEX rota_schedules_due ON rota_schedules (due_at) WHERE NOT paused;
