-- rota schema, version 3: flow control (paused queues, limits) and a claim index that lets
-- tenants take turns and stops at the first job that is not yet due.

CREATE TABLE rota_queues (
    name        text        PRIMARY KEY,
    paused      boolean     NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL
);

CREATE TABLE rota_limits (
    scope        text        NOT NULL CHECK (scope IN ('queue', 'kind', 'tenant')),
    key          text        NOT NULL,
    concurrency  integer     CHECK (concurrency >= 0),
    rate         integer     CHECK (rate > 0),
    period_us    bigint      CHECK (period_us > 0),
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

-- The claim walks (queue, tenant, priority) groups with a loose index scan, then reads each
-- group in run_at order and stops at the first job not yet due: the cost does not grow with
-- the number of future jobs, and one tenant's backlog cannot hide another tenant's jobs.
-- Jobs without a tenant form the group ''.
DROP INDEX rota_jobs_due;
CREATE INDEX rota_jobs_due ON rota_jobs (queue, (coalesce(tenant, '')), priority DESC, run_at, id)
    WHERE state = 'pending';

-- The latest starts of each rate-limited kind or tenant (a tenant under a "*" limit has its
-- own row), written under the rota_limits row locks that serialise limited claims.
CREATE TABLE rota_limit_starts (
    scope   text          NOT NULL,
    key     text          NOT NULL,
    starts  timestamptz[] NOT NULL,
    PRIMARY KEY (scope, key)
);
