-- rota schema, version 19: finished jobs by day, dropped whole.
--
-- rota_jobs becomes a partitioned table. Active jobs (waiting, pending, running) live in
-- rota_jobs_active, the only table claims, heartbeats and completions search; finished ones
-- (succeeded, dead, cancelled) in one table per UTC day of their finished_at, under
-- rota_jobs_finished. Retention then drops a whole day (no dead rows, no vacuum of a week of
-- indexes, almost no WAL), and the active table's vacuums read indexes of active jobs only,
-- so dead entries of claimed jobs stop piling up in front of the claims however long finished
-- jobs are kept (docs/scaling.md, "Tens of millions of jobs").
--
--   rota_jobs                      LIST (state)
--     rota_jobs_active             'waiting', 'pending', 'running'
--     rota_jobs_finished           'succeeded', 'dead', 'cancelled'; RANGE (finished_at)
--       rota_jobs_YYYYMMDD         one UTC day, made ahead by rota_jobs_add_days
--       rota_jobs_until_YYYYMMDD   an upgraded table's finished jobs, up to that day
--       rota_jobs_finished_default whatever no day holds (a day not made in time)
--
-- What changes with that, and where it is handled:
-- - Finishing a job, retrying or re-running it moves its row between partitions (PostgreSQL
--   deletes and inserts it). A statement that meets a row moved since it began fails with
--   40001 instead of re-reading it: the store runs such a statement again (postgres/store.py).
-- - Row-level AFTER UPDATE triggers do not fire for a moved row: the workflow trigger is now
--   one AFTER DELETE trigger that tells a move (the row is still there) from a delete.
-- - No index spans partitions: ids stay unique by their sequence, each table has its own
--   indexes (rota_jobs_index_leaf), the active unique keys are unique in rota_jobs_active as
--   before, and a schedule slot, unique across every state, is looked up under a lock by the
--   enqueue that takes it. rota_job_deps loses its foreign key; the delete trigger drops a
--   deleted child's edges, and the prune of a day deletes its workflow jobs one by one first.
--
-- The upgrade holds every job write from here to its commit: it moves the active jobs into
-- rota_jobs_active and checks the finished rows that stay in the old table once (a pass over
-- the table, about a second per million finished jobs; bench/scale.py --upgrade measures it).
LOCK TABLE rota_jobs IN ACCESS EXCLUSIVE MODE;

ALTER TABLE rota_job_deps DROP CONSTRAINT IF EXISTS rota_job_deps_child_id_fkey;
DROP TRIGGER rota_jobs_notify_due ON rota_jobs;
DROP TRIGGER rota_jobs_settle_dependents ON rota_jobs;
DROP TRIGGER rota_jobs_orphan_dependents ON rota_jobs;
DROP TRIGGER rota_jobs_count_inserted ON rota_jobs;
DROP TRIGGER rota_jobs_count_updated ON rota_jobs;
DROP TRIGGER rota_jobs_count_deleted ON rota_jobs;
DROP TRIGGER rota_jobs_count_truncated ON rota_jobs;
-- The partitions say which states exist; the old check was NOT VALID, which an attached
-- partition may not carry.
ALTER TABLE rota_jobs DROP CONSTRAINT rota_jobs_state_check;
-- The active-only indexes go with the active rows; the rest is renamed below.
DROP INDEX rota_jobs_due, rota_jobs_leases, rota_jobs_unique_active, rota_jobs_expiring,
    rota_jobs_pending_run_at;
ALTER TABLE rota_jobs RENAME TO rota_jobs_old;
ALTER INDEX rota_jobs_pkey RENAME TO rota_jobs_old_id;
ALTER INDEX rota_jobs_state_id RENAME TO rota_jobs_old_state_id;
ALTER INDEX rota_jobs_unique_key RENAME TO rota_jobs_old_unique_key;
ALTER INDEX rota_jobs_unique_held RENAME TO rota_jobs_old_unique_held;
ALTER INDEX rota_jobs_slot RENAME TO rota_jobs_old_slot;
ALTER INDEX rota_jobs_workflow RENAME TO rota_jobs_old_workflow;
ALTER INDEX rota_jobs_blocked_by RENAME TO rota_jobs_old_blocked_by;

-- Ids: a sequence of their own, continuing the identity's (which goes with its column).
DO $$
DECLARE
    last bigint;
BEGIN
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM %s',
                   pg_get_serial_sequence('rota_jobs_old', 'id')) INTO last;
    ALTER TABLE rota_jobs_old ALTER COLUMN id DROP IDENTITY;
    CREATE SEQUENCE rota_jobs_id_seq AS bigint;
    IF last > 0 THEN
        PERFORM setval('rota_jobs_id_seq', last);
    END IF;
END
$$;

-- The columns in the old table's order, so that it can be attached as it is.
CREATE TABLE rota_jobs (
    id            bigint      NOT NULL DEFAULT nextval('rota_jobs_id_seq'),
    state         text        NOT NULL DEFAULT 'pending',
    queue         text        NOT NULL,
    kind          text        NOT NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    run_at        timestamptz NOT NULL,
    attempt       integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL CONSTRAINT rota_jobs_max_attempts_check
                                       CHECK (max_attempts > 0),
    lease_token   bigint,
    lease_until   timestamptz,
    worker        text,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz,
    payload       json        NOT NULL,
    tenant        text,
    unique_key    text,
    timeout_us    bigint,
    last_error    text,
    schedule      text,
    slot_at       timestamptz,
    history       jsonb,
    crashes       integer     NOT NULL DEFAULT 0 CONSTRAINT rota_jobs_crashes_check
                                                 CHECK (crashes >= 0),
    lease_started boolean     NOT NULL DEFAULT true,
    result        json,
    progress      double precision,
    progress_message text,
    trace_context json,
    expires_at    timestamptz,
    unique_until  timestamptz,
    unique_states smallint,
    workflow      bigint,
    waiting_on    integer     NOT NULL DEFAULT 0,
    blocked_by    bigint
) PARTITION BY LIST (state);
ALTER SEQUENCE rota_jobs_id_seq OWNED BY rota_jobs.id;

-- The indexes every partition has, named after it. A finished job is found by id, listed by
-- state newest first, found by its unique key (search, and keys held beyond the active
-- states), by its schedule slot, and with its workflow.
CREATE FUNCTION rota_jobs_index_leaf(leaf text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (id)', leaf || '_id', leaf);
    EXECUTE format('CREATE INDEX %I ON %I (state, id)', leaf || '_state_id', leaf);
    EXECUTE format('CREATE INDEX %I ON %I (unique_key) WHERE unique_key IS NOT NULL',
                   leaf || '_unique_key', leaf);
    EXECUTE format('CREATE INDEX %I ON %I (unique_key, unique_until)'
                   ' WHERE unique_until IS NOT NULL', leaf || '_unique_held', leaf);
    EXECUTE format('CREATE INDEX %I ON %I (workflow, id) WHERE workflow IS NOT NULL',
                   leaf || '_workflow', leaf);
    EXECUTE format('CREATE INDEX %I ON %I (blocked_by) WHERE blocked_by IS NOT NULL',
                   leaf || '_blocked_by', leaf);
    IF leaf <> 'rota_jobs_active' THEN
        EXECUTE format('CREATE INDEX %I ON %I (schedule, slot_at) WHERE schedule IS NOT NULL',
                       leaf || '_slot', leaf);
    END IF;
END
$$;

CREATE TABLE rota_jobs_active PARTITION OF rota_jobs
    FOR VALUES IN ('waiting', 'pending', 'running')
    -- Every active job is rewritten at its claim and leaves at its end: vacuum early. The
    -- table holds only active jobs, so a vacuum reads small indexes whatever is kept.
    -- A vacuum of the table while no job is active (an idle hour) would give its pages back,
    -- and a plan made then (a claim's, kept for the connection's life) costs a sequential
    -- scan of no pages at nothing: once a burst arrives it reads the whole table at every
    -- step. Kept, the pages keep such a scan as dear as the table once was; and the rescuer
    -- analyses the table when its statistics fall far behind the active jobs it counts
    -- (retention.refresh_statistics), so estimates catch up within seconds of a burst.
    WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.05,
          autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 1,
          vacuum_truncate = false);
SELECT rota_jobs_index_leaf('rota_jobs_active');
-- The claim's walk over (queue, tenant, priority) groups in claim order (003_flow_control).
CREATE INDEX rota_jobs_due ON rota_jobs_active
    (queue, (coalesce(tenant, '')), priority DESC, run_at, id) WHERE state = 'pending';
-- Expired leases (for the claim and the rescuer) and a worker's held jobs.
CREATE INDEX rota_jobs_leases ON rota_jobs_active (lease_until) WHERE state = 'running';
-- A unique key is held only while its job is active: no check-then-insert race (001).
CREATE UNIQUE INDEX rota_jobs_unique_active ON rota_jobs_active (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('pending', 'running');
-- Two enqueues of one slot while its job is active: the second finds it taken.
CREATE UNIQUE INDEX rota_jobs_slot ON rota_jobs_active (schedule, slot_at)
    WHERE schedule IS NOT NULL;
CREATE INDEX rota_jobs_expiring ON rota_jobs_active (expires_at)
    WHERE state = 'pending' AND expires_at IS NOT NULL;
-- The age of the oldest due job; no claim can be planned over it (018).
CREATE INDEX rota_jobs_pending_run_at ON rota_jobs_active (run_at)
    WHERE state = 'pending' AND attempt >= 0;

CREATE TABLE rota_jobs_finished PARTITION OF rota_jobs
    FOR VALUES IN ('succeeded', 'dead', 'cancelled') PARTITION BY RANGE (finished_at);
CREATE TABLE rota_jobs_finished_default PARTITION OF rota_jobs_finished DEFAULT
    WITH (autovacuum_vacuum_cost_delay = 1);
SELECT rota_jobs_index_leaf('rota_jobs_finished_default');

-- A day's table, made before jobs finish in it and attached with a lock that blocks no
-- claim, completion or read of rota_jobs_finished (SHARE UPDATE EXCLUSIVE); the new table's
-- check constraint spares the attach a scan of it. False when the day exists, or when jobs of
-- that day already sit in the default partition (a day made late): those stay there, and
-- retention deletes them row by row.
CREATE FUNCTION rota_jobs_add_day(day date) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    leaf text := 'rota_jobs_' || to_char(day, 'YYYYMMDD');
    lo timestamptz := day::timestamp AT TIME ZONE 'UTC';
    hi timestamptz := (day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF to_regclass(leaf) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE rota_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
                   ' WITH (autovacuum_vacuum_cost_delay = 1)', leaf);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (state IN (''succeeded'', ''dead'','
                   ' ''cancelled'') AND finished_at >= %L AND finished_at < %L)',
                   leaf, leaf || '_day', lo, hi);
    PERFORM rota_jobs_index_leaf(leaf);
    EXECUTE format('ALTER TABLE rota_jobs_finished ATTACH PARTITION %I'
                   ' FOR VALUES FROM (%L) TO (%L)', leaf, lo, hi);
    RETURN true;
EXCEPTION WHEN check_violation OR invalid_object_definition THEN
    -- Jobs of that day in the default partition, or a partition that covers it already (the
    -- upgraded table's).
    RETURN false;
END
$$;

-- The days from today (UTC, by the database's clock) to "ahead" days after it; the last day
-- that exists afterwards. Every worker's rescuer calls it about once an hour.
CREATE FUNCTION rota_jobs_add_days(ahead integer) RETURNS date LANGUAGE plpgsql AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
BEGIN
    FOR i IN 0..ahead LOOP
        PERFORM rota_jobs_add_day(today + i);
    END LOOP;
    RETURN today + ahead;
END
$$;

-- Workflows (012, 014). A state change that matters to a workflow's other jobs always moves
-- the row: to a finished state (its children are settled) or from dead or cancelled back to
-- waiting or pending (the jobs its end cancelled are re-armed). A moved row fires AFTER DELETE
-- on the table it left (AFTER UPDATE does not fire for it) and its new version is visible to
-- the trigger, which is how a move is told from a delete. The settling itself is 012's
-- function, unchanged, called with the old and the new row.
ALTER FUNCTION rota_settle_dependents() RENAME TO rota_settle_dependents_012;
CREATE FUNCTION rota_settle_dependents(prior rota_jobs, job rota_jobs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := coalesce(job.finished_at, now());
    n bigint;
BEGIN
    IF job.state IN ('succeeded', 'dead', 'cancelled') THEN
        WITH sat AS (
            UPDATE rota_job_deps SET satisfied = true
            WHERE parent_id = job.id AND NOT satisfied
              AND (job.state = 'succeeded' OR on_parent_failure = 'run')
            RETURNING child_id
        ), released AS (
            UPDATE rota_jobs c SET waiting_on = c.waiting_on - 1,
                state = CASE WHEN c.state = 'waiting' AND c.waiting_on = 1 THEN 'pending'
                             ELSE c.state END
            FROM sat WHERE c.id = sat.child_id
            RETURNING c.state, c.queue, c.run_at
        ), wake AS (
            SELECT pg_notify('rota_jobs',
                             queue || ' ' || (extract(epoch FROM min(run_at)) * 1000000)::bigint)
            FROM released WHERE state = 'pending' GROUP BY queue
        )
        SELECT count(*) INTO n FROM wake;
    END IF;
    IF job.state IN ('dead', 'cancelled') THEN
        WITH cancelled AS (
            UPDATE rota_jobs c SET state = 'cancelled', finished_at = at, blocked_by = job.id,
                last_error = 'cancelled: parent job ' || job.id || ' ended ' || job.state
            FROM rota_job_deps d
            WHERE d.parent_id = job.id AND NOT d.satisfied AND d.on_parent_failure = 'cancel'
              AND c.id = d.child_id AND c.state = 'waiting'
            RETURNING c.id, c.state
        ), tally AS (
            INSERT INTO rota_finished_per_minute (minute, state, n)
            SELECT date_trunc('minute', at), 'cancelled', count(*) FROM cancelled
            HAVING count(*) > 0
            ON CONFLICT (minute, state) DO UPDATE SET n = rota_finished_per_minute.n + excluded.n
            RETURNING 1
        ), waited AS (
            DELETE FROM rota_result_waits WHERE job_id IN (SELECT id FROM cancelled)
            RETURNING 1
        ), finished AS (
            SELECT pg_notify('rota_finished', '') WHERE EXISTS (SELECT 1 FROM waited)
        )
        SELECT (SELECT count(*) FROM tally) + (SELECT count(*) FROM finished) INTO n;
    END IF;
    IF prior.state IN ('dead', 'cancelled') AND job.state IN ('waiting', 'pending') THEN
        UPDATE rota_jobs c SET
            blocked_by = o.other,
            state = CASE WHEN o.other IS NULL THEN 'waiting' ELSE 'cancelled' END,
            finished_at = CASE WHEN o.other IS NULL THEN NULL ELSE c.finished_at END,
            last_error = CASE WHEN o.other IS NULL THEN NULL ELSE c.last_error END
        FROM (
            SELECT b.id, (
                SELECT d.parent_id FROM rota_job_deps d JOIN rota_jobs p ON p.id = d.parent_id
                WHERE d.child_id = b.id AND d.parent_id <> job.id AND NOT d.satisfied
                  AND d.on_parent_failure = 'cancel' AND p.state IN ('dead', 'cancelled')
                LIMIT 1) AS other
            FROM rota_jobs b WHERE b.blocked_by = job.id AND b.state = 'cancelled'
        ) AS o
        WHERE c.id = o.id AND c.state = 'cancelled';
    END IF;
END
$$;
DROP FUNCTION rota_settle_dependents_012();

-- 014's orphaning, for a row that is gone; and, with no foreign key left on rota_job_deps, the
-- edges to a deleted child go with it.
ALTER FUNCTION rota_orphan_dependents() RENAME TO rota_orphan_dependents_014;
CREATE FUNCTION rota_orphan_dependents(gone rota_jobs) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    reason text := 'cancelled: parent job ' || gone.id || ' was deleted';
    n bigint;
BEGIN
    DELETE FROM rota_job_deps WHERE child_id = gone.id;
    WITH held AS (
        DELETE FROM rota_job_deps WHERE parent_id = gone.id
        RETURNING child_id, on_parent_failure, satisfied
    ), settled AS (
        UPDATE rota_jobs c SET waiting_on = c.waiting_on - 1,
            state = CASE WHEN c.state <> 'waiting' THEN c.state
                         WHEN h.on_parent_failure = 'cancel' THEN 'cancelled'
                         WHEN c.waiting_on = 1 THEN 'pending' ELSE c.state END,
            finished_at = CASE WHEN c.state = 'waiting' AND h.on_parent_failure = 'cancel'
                               THEN now() ELSE c.finished_at END,
            last_error = CASE WHEN c.state = 'waiting' AND h.on_parent_failure = 'cancel'
                              THEN reason
                              ELSE c.last_error END,
            blocked_by = CASE WHEN c.blocked_by = gone.id THEN NULL ELSE c.blocked_by END
        FROM held h
        WHERE c.id = h.child_id AND NOT h.satisfied
        RETURNING c.id, c.state, c.queue, c.run_at,
                  c.state = 'cancelled' AND c.last_error = reason AS cancelled_now
    ), tally AS (
        INSERT INTO rota_finished_per_minute (minute, state, n)
        SELECT date_trunc('minute', now()), 'cancelled', count(*) FROM settled
        WHERE cancelled_now HAVING count(*) > 0
        ON CONFLICT (minute, state) DO UPDATE SET n = rota_finished_per_minute.n + excluded.n
        RETURNING 1
    ), wake AS (
        SELECT pg_notify('rota_jobs',
                         queue || ' ' || (extract(epoch FROM min(run_at)) * 1000000)::bigint)
        FROM settled WHERE state = 'pending' GROUP BY queue
    ), waited AS (
        DELETE FROM rota_result_waits
        WHERE job_id IN (SELECT id FROM settled WHERE cancelled_now)
        RETURNING 1
    ), finished AS (
        SELECT pg_notify('rota_finished', '') WHERE EXISTS (SELECT 1 FROM waited)
    )
    SELECT (SELECT count(*) FROM tally) + (SELECT count(*) FROM wake)
         + (SELECT count(*) FROM finished) INTO n;
END
$$;
DROP FUNCTION rota_orphan_dependents_014();

CREATE FUNCTION rota_jobs_left() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prior rota_jobs := OLD;  -- the row type of the partitioned table, by position
    moved rota_jobs;
BEGIN
    -- A row leaves the active table only for a finished one, and a finished one for the
    -- active table (or, should its finished_at change, for another day): look there first.
    IF prior.state IN ('waiting', 'pending', 'running') THEN
        SELECT * INTO moved FROM rota_jobs
        WHERE id = prior.id AND state IN ('succeeded', 'dead', 'cancelled');
    ELSE
        SELECT * INTO moved FROM rota_jobs
        WHERE id = prior.id AND state IN ('waiting', 'pending', 'running');
        IF NOT FOUND THEN
            SELECT * INTO moved FROM rota_jobs
            WHERE id = prior.id AND state IN ('succeeded', 'dead', 'cancelled');
        END IF;
    END IF;
    IF NOT FOUND THEN
        PERFORM rota_orphan_dependents(prior);
    ELSIF moved.state IS DISTINCT FROM prior.state THEN
        PERFORM rota_settle_dependents(prior, moved);
    END IF;
    RETURN NULL;
END
$$;
-- On the partitioned table: every partition, those attached later included, gets it.
CREATE TRIGGER rota_jobs_left AFTER DELETE ON rota_jobs
    FOR EACH ROW WHEN (OLD.workflow IS NOT NULL) EXECUTE FUNCTION rota_jobs_left();

-- The old table's rows: active ones (and any finished row outside the range it keeps) through
-- the new table, which routes each to its partition; the rest stays where it is, attached as
-- the partition of every day up to and including today. Without finished rows it goes.
DO $$
DECLARE
    upto date := (now() AT TIME ZONE 'UTC')::date + 1;
    leaf text := 'rota_jobs_until_' || to_char(upto, 'YYYYMMDD');
    hi timestamptz := upto::timestamp AT TIME ZONE 'UTC';
BEGIN
    -- The days after today first, so that rows moved below find theirs.
    FOR i IN 0..2 LOOP
        PERFORM rota_jobs_add_day(upto + i);
    END LOOP;
    WITH moving AS (
        DELETE FROM rota_jobs_old
        WHERE state NOT IN ('succeeded', 'dead', 'cancelled') OR finished_at IS NULL
           OR finished_at >= hi
        RETURNING *
    )
    INSERT INTO rota_jobs SELECT * FROM moving;
    IF NOT EXISTS (SELECT 1 FROM rota_jobs_old) THEN
        DROP TABLE rota_jobs_old;
    ELSE
        EXECUTE format('ALTER TABLE rota_jobs_old RENAME TO %I', leaf);
        EXECUTE format('ALTER INDEX rota_jobs_old_id RENAME TO %I', leaf || '_id');
        EXECUTE format('ALTER INDEX rota_jobs_old_state_id RENAME TO %I', leaf || '_state_id');
        EXECUTE format('ALTER INDEX rota_jobs_old_unique_key RENAME TO %I', leaf || '_unique_key');
        EXECUTE format('ALTER INDEX rota_jobs_old_unique_held RENAME TO %I',
                       leaf || '_unique_held');
        EXECUTE format('ALTER INDEX rota_jobs_old_slot RENAME TO %I', leaf || '_slot');
        EXECUTE format('ALTER INDEX rota_jobs_old_workflow RENAME TO %I', leaf || '_workflow');
        EXECUTE format('ALTER INDEX rota_jobs_old_blocked_by RENAME TO %I', leaf || '_blocked_by');
        -- The attach checks every row against the range: the pass over the table.
        EXECUTE format('ALTER TABLE rota_jobs_finished ATTACH PARTITION %I'
                       ' FOR VALUES FROM (MINVALUE) TO (%L)', leaf, hi);
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_scale_factor = 0.02,'
                       ' autovacuum_vacuum_cost_delay = 1)', leaf);
    END IF;
END
$$;
-- The triggers of 001 and 017 come after the move: the moved rows were counted already.
-- Drop a day's table of finished jobs (retention.py decides which), all in one statement, so
-- that a pruner stopped at any moment holds no lock: one pruner at a time (others skip), the
-- day's workflow jobs deleted one by one first (their children see a deleted parent), the
-- rest counted out of the counts (017), their result waits and the day's tally gone, then the
-- table detached and dropped. Writers of the day's jobs (a retry, a delete) wait for it while
-- its jobs are counted; the detach needs an exclusive lock on rota_jobs_finished, which
-- completions and reads of finished jobs wait for, so it waits for them 200 ms at most (and
-- always before deadlock detection could pick another victim). NULL when it skipped or gave
-- up, having changed nothing; otherwise how many jobs went.
CREATE FUNCTION rota_jobs_drop_day(leaf text, day_start timestamptz, day_end timestamptz,
                                   older_than timestamptz)
RETURNS bigint LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE
    workflows bigint;
    rest bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('rota_jobs_drop_day', 0))
       OR to_regclass(leaf) IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('LOCK TABLE %I IN SHARE MODE', leaf);
    WITH gone AS (
        DELETE FROM rota_jobs
        WHERE state IN ('succeeded', 'dead', 'cancelled') AND workflow IS NOT NULL
          AND finished_at >= day_start AND finished_at < day_end
        RETURNING 1
    )
    SELECT count(*) INTO workflows FROM gone;
    EXECUTE format('WITH out AS (INSERT INTO rota_count_deltas (queue, kind, state, n)'
                   ' SELECT queue, kind, state, -count(*) FROM %I GROUP BY queue, kind, state'
                   ' RETURNING n) SELECT coalesce(-sum(n), 0)::bigint FROM out', leaf)
        INTO rest;
    EXECUTE format('DELETE FROM rota_result_waits w'
                   ' WHERE EXISTS (SELECT 1 FROM %I j WHERE j.id = w.job_id)', leaf);
    DELETE FROM rota_finished_per_minute WHERE minute < day_end AND minute < older_than;
    PERFORM set_config('lock_timeout', '200ms', true);
    EXECUTE format('ALTER TABLE rota_jobs_finished DETACH PARTITION %I', leaf);
    EXECUTE format('DROP TABLE %I', leaf);
    RETURN workflows + rest;
EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
    RETURN NULL;
END
$$;

-- rota_jobs_active is empty whenever nothing is queued, and a vacuum or analyze of it then
-- records no rows: until autovacuum analyses it again (up to a minute after a burst) every
-- plan made meanwhile takes it for one row. Every rescuer calls this: when the active jobs
-- the counts hold (017) are at least "floor" and more than "factor" times what the
-- statistics say, one caller (the others skip) analyses the table. One statement, so that a
-- worker stopped in it holds nothing. Whether it analysed.
CREATE FUNCTION rota_jobs_analyze_active(floor bigint, factor integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    estimated double precision;
    counted bigint;
BEGIN
    SELECT reltuples INTO estimated FROM pg_class WHERE oid = 'rota_jobs_active'::regclass;
    SELECT coalesce(sum(n), 0) INTO counted FROM (
        SELECT n FROM rota_counts WHERE state IN ('waiting', 'pending', 'running')
        UNION ALL
        SELECT n FROM rota_count_deltas WHERE state IN ('waiting', 'pending', 'running')
    ) AS active;
    IF counted < floor OR counted <= factor * greatest(estimated, 0)
       OR NOT pg_try_advisory_xact_lock(hashtextextended('rota_jobs_analyze', 0)) THEN
        RETURN false;
    END IF;
    ANALYZE rota_jobs_active;
    RETURN true;
END
$$;

-- Wake sleeping workers when jobs are inserted (001): one notification per queue per statement.
CREATE TRIGGER rota_jobs_notify_due AFTER INSERT ON rota_jobs
    REFERENCING NEW TABLE AS rota_new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION rota_notify_due();

-- The counts (017): statement triggers on the partitioned table see every row a statement
-- changed, moved rows included (in the OLD and NEW tables of an UPDATE).
CREATE TRIGGER rota_jobs_count_inserted AFTER INSERT ON rota_jobs
    REFERENCING NEW TABLE AS rota_inserted
    FOR EACH STATEMENT EXECUTE FUNCTION rota_count_inserted();
CREATE TRIGGER rota_jobs_count_updated AFTER UPDATE ON rota_jobs
    REFERENCING OLD TABLE AS rota_updated_old NEW TABLE AS rota_updated_new
    FOR EACH STATEMENT EXECUTE FUNCTION rota_count_updated();
CREATE TRIGGER rota_jobs_count_deleted AFTER DELETE ON rota_jobs
    REFERENCING OLD TABLE AS rota_deleted
    FOR EACH STATEMENT EXECUTE FUNCTION rota_count_deleted();
CREATE TRIGGER rota_jobs_count_truncated AFTER TRUNCATE ON rota_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION rota_count_truncated();

SELECT rota_jobs_add_days(3);
ANALYZE rota_jobs_active;
