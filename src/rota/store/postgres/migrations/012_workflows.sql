-- rota schema, version 12: workflows, jobs that depend on jobs (rota.domain.workflow).
-- A job with parents is 'waiting' until every edge to a parent is satisfied; then it becomes
-- 'pending'. The claim index is partial on state = 'pending', so claims never see waiting jobs.
-- The old CHECK held for every row: the looser one is added NOT VALID (no scan of the table).
ALTER TABLE rota_jobs DROP CONSTRAINT rota_jobs_state_check;
ALTER TABLE rota_jobs ADD CONSTRAINT rota_jobs_state_check
    CHECK (state IN ('waiting', 'pending', 'running', 'succeeded', 'dead', 'cancelled')) NOT VALID;

-- workflow: the id of the workflow's first job (NULL outside workflows: the trigger below
-- ignores such rows); waiting_on: the edges to parents not yet satisfied; blocked_by: the
-- parent whose end cancelled this job (retrying that parent re-arms it). Adding nullable or
-- constant-default columns rewrites nothing.
ALTER TABLE rota_jobs
    ADD COLUMN workflow bigint,
    ADD COLUMN waiting_on integer NOT NULL DEFAULT 0,
    ADD COLUMN blocked_by bigint;
CREATE INDEX rota_jobs_workflow ON rota_jobs (workflow, id) WHERE workflow IS NOT NULL;
CREATE INDEX rota_jobs_blocked_by ON rota_jobs (blocked_by) WHERE blocked_by IS NOT NULL;

-- One row per edge; the primary key finds a parent's children, the index a child's parents.
-- Pruning a job takes its edges with it.
CREATE TABLE rota_job_deps (
    parent_id         bigint  NOT NULL REFERENCES rota_jobs (id) ON DELETE CASCADE,
    child_id          bigint  NOT NULL REFERENCES rota_jobs (id) ON DELETE CASCADE,
    on_parent_failure text    NOT NULL CHECK (on_parent_failure IN ('cancel', 'run')),
    satisfied         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX rota_job_deps_child ON rota_job_deps (child_id);

-- When a workflow job's state changes, settle its direct children inside the same statement
-- (so inside the completing, failing, cancelling or retrying transaction, whichever verb made
-- the change): no scan of the graph, and no path that changes a state can forget it.
-- Exactly once: an edge turns satisfied once (NOT satisfied in the WHERE), and two parents
-- finishing at once on different connections serialize on the child's row lock; the second
-- UPDATE re-reads the row the first committed (READ COMMITTED re-evaluation), so the counter
-- reaches 0 in exactly one of them, and only that one moves the child to 'pending'.
-- Children this trigger cancels or re-arms fire it in turn, for their own children.
CREATE FUNCTION rota_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := coalesce(NEW.finished_at, now());
    n bigint;
BEGIN
    IF NEW.state IN ('succeeded', 'dead', 'cancelled') THEN
        WITH sat AS (
            UPDATE rota_job_deps SET satisfied = true
            WHERE parent_id = NEW.id AND NOT satisfied
              AND (NEW.state = 'succeeded' OR on_parent_failure = 'run')
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
    IF NEW.state IN ('dead', 'cancelled') THEN
        WITH cancelled AS (
            UPDATE rota_jobs c SET state = 'cancelled', finished_at = at, blocked_by = NEW.id,
                last_error = 'cancelled: parent job ' || NEW.id || ' ended ' || NEW.state
            FROM rota_job_deps d
            WHERE d.parent_id = NEW.id AND NOT d.satisfied AND d.on_parent_failure = 'cancel'
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
    IF OLD.state IN ('dead', 'cancelled') AND NEW.state IN ('waiting', 'pending') THEN
        -- Retried (or re-armed): the jobs its end cancelled wait again, unless another parent
        -- of theirs has ended dead or cancelled on a 'cancel' edge; that one blocks them now.
        UPDATE rota_jobs c SET
            blocked_by = o.other,
            state = CASE WHEN o.other IS NULL THEN 'waiting' ELSE 'cancelled' END,
            finished_at = CASE WHEN o.other IS NULL THEN NULL ELSE c.finished_at END,
            last_error = CASE WHEN o.other IS NULL THEN NULL ELSE c.last_error END
        FROM (
            SELECT b.id, (
                SELECT d.parent_id FROM rota_job_deps d JOIN rota_jobs p ON p.id = d.parent_id
                WHERE d.child_id = b.id AND d.parent_id <> NEW.id AND NOT d.satisfied
                  AND d.on_parent_failure = 'cancel' AND p.state IN ('dead', 'cancelled')
                LIMIT 1) AS other
            FROM rota_jobs b WHERE b.blocked_by = NEW.id AND b.state = 'cancelled'
        ) AS o
        WHERE c.id = o.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER rota_jobs_settle_dependents AFTER UPDATE OF state ON rota_jobs
    FOR EACH ROW WHEN (NEW.workflow IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION rota_settle_dependents();
