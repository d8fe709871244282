-- 023_durable_steps: the records of durable jobs (steps, sleeps, waits) and the signals kept
-- for waits to come (rota.domain.durable). A job's records go with it (ON DELETE CASCADE:
-- delete, purge and retention alike); its records are read by (job_id, name).
CREATE TABLE rota_steps (
    job_id      INTEGER NOT NULL REFERENCES rota_jobs (id) ON DELETE CASCADE,
    name        TEXT    NOT NULL,
    -- The order of the job's records by first write (1, 2, ... per job).
    seq         INTEGER NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('step', 'sleep', 'wait')),
    state       TEXT    NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    result      TEXT,   -- a step's JSON result, or a received signal's data
    error       TEXT,
    token       INTEGER,          -- the fencing token that last wrote the record
    started_at  INTEGER NOT NULL, -- microseconds since the Unix epoch, UTC
    finished_at INTEGER,
    wake_at     INTEGER,          -- a sleep's wake time, a wait's deadline
    key         TEXT,             -- the signal key a wait waits for
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;
-- signal: the first wait still waiting for a key.
CREATE INDEX rota_steps_waiting ON rota_steps (key, started_at) WHERE state = 'waiting';

-- Signals sent to a key no job waited for: kept until expires_at for the next wait on it.
CREATE TABLE rota_signals (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    key        TEXT    NOT NULL,
    data       TEXT,
    sent_at    INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX rota_signals_key ON rota_signals (key, id);
CREATE INDEX rota_signals_expiry ON rota_signals (expires_at);
