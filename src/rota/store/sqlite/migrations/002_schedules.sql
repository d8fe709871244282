-- 002_schedules: recurring schedules. A row is a definition (the rule as plain columns, rebuilt
-- with Rule.from_dict) and where the schedule stands. Instants are INTEGER microseconds since
-- the Unix epoch (UTC), durations INTEGER microseconds.

CREATE TABLE rota_schedules (
    name          TEXT    PRIMARY KEY,
    kind          TEXT    NOT NULL,
    payload       TEXT    NOT NULL,  -- the canonical JSON text of ScheduleSpec.payload_json
    queue         TEXT    NOT NULL,
    priority      INTEGER NOT NULL,
    tenant        TEXT,
    max_attempts  INTEGER NOT NULL,
    every_us      INTEGER,           -- an interval rule ...
    cron          TEXT,              -- ... or a cron rule, never both
    timezone      TEXT    NOT NULL,
    anchor        INTEGER,           -- the interval grid's origin
    jitter_us     INTEGER NOT NULL,
    misfire       TEXT    NOT NULL CHECK (misfire IN ('latest', 'skip', 'all')),
    misfire_limit INTEGER NOT NULL,
    grace_us      INTEGER NOT NULL,
    overlap       TEXT    NOT NULL CHECK (overlap IN ('skip', 'allow')),
    paused        INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    next_run_at   INTEGER NOT NULL,  -- the next nominal slot
    -- next_run_at plus the schedule's jitter offset (derived from its name in Python): the
    -- instant it is due, so finding due schedules is one index range.
    due_at        INTEGER NOT NULL,
    last_run_at   INTEGER,           -- the latest slot that got a job
    last_job_id   INTEGER,           -- no foreign key: pruning a job must not touch its schedule
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    CHECK ((every_us IS NULL) <> (cron IS NULL))
) WITHOUT ROWID;

-- fire_due and next_fire_at: unpaused schedules in the order they come due.
CREATE INDEX rota_schedules_due ON rota_schedules (due_at) WHERE paused = 0;
