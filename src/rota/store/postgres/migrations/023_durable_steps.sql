-- rota schema, version 23: the records of durable jobs (steps, sleeps, waits) and the signals
-- kept for waits to come (rota.domain.durable; docs/decisions/0006).
--
-- Records live beside the jobs, not in their rows: a checkpoint is one INSERT (no new version
-- of the job's row, whose payload and indexes it would copy), claims and lists read the same
-- rows as before, and a job of a thousand steps keeps a thousand small rows, not one growing
-- value rewritten at every step. rota_jobs is partitioned, so no foreign key can point at it:
-- the records of a job that is gone (deleted, purged, pruned, its day dropped) are deleted by
-- the pruner (prune_durable), by their first write's instant.
CREATE TABLE rota_steps (
    job_id      bigint      NOT NULL,
    name        text        NOT NULL,
    -- Orders a job's records by their first write.
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    kind        text        NOT NULL CHECK (kind IN ('step', 'sleep', 'wait')),
    state       text        NOT NULL,
    attempts    integer     NOT NULL DEFAULT 0,
    result      json,       -- a step's result, or a received signal's data
    error       text,
    token       bigint,     -- the fencing token that last wrote the record
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    wake_at     timestamptz, -- a sleep's wake time, a wait's deadline
    key         text,       -- the signal key a wait waits for
    PRIMARY KEY (job_id, name)
);
-- signal: the first wait still waiting for a key.
CREATE INDEX rota_steps_waiting ON rota_steps (key, started_at) WHERE state = 'waiting';
-- prune_durable: records by their first write, to find those of jobs that are gone.
CREATE INDEX rota_steps_started ON rota_steps (started_at);

-- Signals sent to a key no job waited for: kept until expires_at for the next wait on it.
CREATE TABLE rota_signals (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key        text        NOT NULL,
    data       json,
    sent_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX rota_signals_key ON rota_signals (key, id);
CREATE INDEX rota_signals_expiry ON rota_signals (expires_at);
