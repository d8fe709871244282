-- 003_flow_control: paused queues, limits and the recent starts they count, and a claim index
-- that lets tenants take turns and stops at the first job that is not yet due. Instants are
-- INTEGER microseconds since the Unix epoch (UTC), durations INTEGER microseconds.

CREATE TABLE rota_queues (
    name       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE rota_limits (
    scope       TEXT    NOT NULL CHECK (scope IN ('queue', 'kind', 'tenant')),
    key         TEXT    NOT NULL,
    concurrency INTEGER CHECK (concurrency >= 0),
    rate        INTEGER CHECK (rate > 0),
    period_us   INTEGER CHECK (period_us > 0),
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;

-- The latest starts of each rate-limited kind or tenant (a tenant under a "*" limit has rows of
-- its own): n jobs started at the instant "at". Claims write it, one at a time (BEGIN
-- IMMEDIATE), keeping no more starts per key than its rate can count.
CREATE TABLE rota_limit_starts (
    scope TEXT    NOT NULL,
    key   TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    n     INTEGER NOT NULL CHECK (n > 0),
    PRIMARY KEY (scope, key, at)
) WITHOUT ROWID;
-- budgets read the starts within the longest period; claims forget those older than any period.
CREATE INDEX rota_limit_starts_at ON rota_limit_starts (at);

-- claim: walk the (queue, tenant, priority, kind) groups with one probe each, then read each
-- group in run_at order up to the first job not yet due, so future jobs cost nothing, one
-- tenant's backlog cannot hide another tenant's jobs, and a kind or tenant at its limit is
-- skipped without reading its jobs. Jobs without a tenant (NULL sorts first) form one group
-- per priority and kind. Plain columns and the trailing state make it cover the walk and the
-- reads: SQLite (3.40 at least) covers a query neither with an index on an expression nor
-- with a partial index that lacks a column of its WHERE, and would read every entry's row.
DROP INDEX rota_jobs_due;
CREATE INDEX rota_jobs_due ON rota_jobs (queue, tenant, priority DESC, kind, run_at, id, state)
    WHERE state = 'pending';
