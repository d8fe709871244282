-- 001_initial: jobs, their attempt history, the fencing counter, per-(queue, state) counts,
-- finished jobs per second and the workers registry. Every instant is INTEGER microseconds
-- since the Unix epoch (UTC), so SQL compares integers and never parses text.

CREATE TABLE rota_jobs (
    -- AUTOINCREMENT: an id is never reused, even after the newest jobs were pruned.
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    payload      TEXT    NOT NULL,  -- the canonical JSON text of JobSpec.payload_json
    state        TEXT    NOT NULL
                 CHECK (state IN ('pending', 'running', 'succeeded', 'dead', 'cancelled')),
    priority     INTEGER NOT NULL,
    run_at       INTEGER NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    tenant       TEXT,
    unique_key   TEXT,
    timeout_us   INTEGER,
    lease_token  INTEGER,
    lease_until  INTEGER,
    worker       TEXT,
    started_at   INTEGER,
    finished_at  INTEGER,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    schedule     TEXT,
    slot_at      INTEGER,
    -- C4: a bug that would run a job more often than allowed fails loudly instead.
    CHECK (attempt >= 0 AND attempt <= max_attempts)
);

-- claim: per queue, walk due pending jobs in claim order and stop after LIMIT rows.
CREATE INDEX rota_jobs_due ON rota_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending';
-- counts: the oldest pending run_at in O(log n), whatever the priorities.
CREATE INDEX rota_jobs_pending_run_at ON rota_jobs (run_at) WHERE state = 'pending';
-- claim and rescue: expired leases.
CREATE INDEX rota_jobs_leases ON rota_jobs (lease_until) WHERE state = 'running';
-- One active job per unique key, enforced here (enqueue inserts with ON CONFLICT DO NOTHING).
CREATE UNIQUE INDEX rota_jobs_active_unique_key ON rota_jobs (unique_key)
    WHERE state IN ('pending', 'running');
-- search by exact unique key in any state.
CREATE INDEX rota_jobs_unique_key ON rota_jobs (unique_key) WHERE unique_key IS NOT NULL;
-- C5: one job per (schedule, slot) in every state, for as long as the job exists.
CREATE UNIQUE INDEX rota_jobs_slot ON rota_jobs (schedule, slot_at) WHERE schedule IS NOT NULL;
-- lists filtered by state, newest first.
CREATE INDEX rota_jobs_state ON rota_jobs (state, id);
-- prune: terminal jobs by age.
CREATE INDEX rota_jobs_finished ON rota_jobs (finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');

-- One row per claim; the token is unique and increasing, so it keys and orders the history.
CREATE TABLE rota_attempts (
    token       INTEGER PRIMARY KEY,
    job_id      INTEGER NOT NULL REFERENCES rota_jobs (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    worker      TEXT,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    outcome     TEXT    NOT NULL,
    error       TEXT,
    traceback   TEXT
);
CREATE INDEX rota_attempts_job ON rota_attempts (job_id, token);

-- Named counters; 'fencing_token' is advanced inside the claim transaction, and SQLite runs one
-- write transaction at a time, so tokens strictly increase across every process on the file.
CREATE TABLE rota_meta (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO rota_meta (name, value) VALUES ('fencing_token', 0);

-- Job counts by (queue, state), kept by triggers so counts() never scans the jobs table.
CREATE TABLE rota_counts (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

CREATE TRIGGER rota_jobs_counted_insert AFTER INSERT ON rota_jobs
BEGIN
    INSERT INTO rota_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER rota_jobs_counted_update AFTER UPDATE OF state, queue ON rota_jobs
WHEN old.state IS NOT new.state OR old.queue IS NOT new.queue
BEGIN
    UPDATE rota_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    INSERT INTO rota_counts (queue, state, n) VALUES (new.queue, new.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER rota_jobs_counted_delete AFTER DELETE ON rota_jobs
BEGIN
    UPDATE rota_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
END;

-- Jobs currently in each terminal state by the second they finished in: what the throughput
-- chart reads instead of scanning the jobs table. A job counts where it is now, as in the
-- reference store: a retried job leaves its old second, a pruned job leaves the chart.
CREATE TABLE rota_finished_per_second (
    second INTEGER NOT NULL,  -- finished_at truncated to a whole second (still microseconds)
    state  TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (second, state)
) WITHOUT ROWID;

CREATE TRIGGER rota_jobs_tallied_update AFTER UPDATE OF state ON rota_jobs
WHEN old.state IS NOT new.state
BEGIN
    UPDATE rota_finished_per_second SET n = n - 1
    WHERE old.state IN ('succeeded', 'dead', 'cancelled') AND old.finished_at IS NOT NULL
      AND second = old.finished_at - old.finished_at % 1000000 AND state = old.state;
    INSERT INTO rota_finished_per_second (second, state, n)
    SELECT new.finished_at - new.finished_at % 1000000, new.state, 1
    WHERE new.state IN ('succeeded', 'dead', 'cancelled') AND new.finished_at IS NOT NULL
    ON CONFLICT (second, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER rota_jobs_tallied_delete AFTER DELETE ON rota_jobs
WHEN old.state IN ('succeeded', 'dead', 'cancelled') AND old.finished_at IS NOT NULL
BEGIN
    UPDATE rota_finished_per_second SET n = n - 1
    WHERE second = old.finished_at - old.finished_at % 1000000 AND state = old.state;
END;

CREATE TABLE rota_workers (
    name        TEXT    PRIMARY KEY,
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    queues      TEXT    NOT NULL,  -- a JSON array of queue names
    concurrency INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    beat_at     INTEGER NOT NULL
) WITHOUT ROWID;
