-- rota schema, version 17: job counts kept by the writes that change them, so the dashboard,
-- /api/stats and /metrics read a few hundred rows instead of grouping every job.
--
-- Every statement that inserts, updates or deletes jobs (whatever code runs it: this
-- version's, an older worker's during a rolling upgrade, a trigger of 012/014, a COPY) fires
-- one statement-level trigger, which adds the net change per (queue, kind, state) from the
-- statement's transition tables as rows of rota_count_deltas. Those rows are only ever
-- inserted, never updated, by the writers: concurrent claimers and completers take no lock
-- on a shared counter, and a long transaction that enqueues (a caller's own, for a
-- transactional enqueue) holds no row anyone else waits for. A reader sums rota_counts (the
-- folded totals) and the deltas in one statement: one snapshot, so it sees a transaction's
-- jobs and its deltas together or neither. Store.rescue (every worker's rescuer, every few
-- seconds) folds the committed deltas into rota_counts in one statement (fold_counts).
CREATE TABLE rota_counts (
    queue text   NOT NULL,
    kind  text   NOT NULL,
    state text   NOT NULL,
    n     bigint NOT NULL,
    PRIMARY KEY (queue, kind, state)
);
-- No index: a heap insert is all a writer pays; readers and the fold read the whole table.
CREATE TABLE rota_count_deltas (
    queue text   NOT NULL,
    kind  text   NOT NULL,
    state text   NOT NULL,
    n     bigint NOT NULL
);
-- Deltas are inserted and folded away all day: vacuum the dead ones early.
ALTER TABLE rota_count_deltas SET (
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_cost_delay = 0
);

CREATE FUNCTION rota_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rota_count_deltas (queue, kind, state, n)
    SELECT queue, kind, state, count(*) FROM rota_inserted GROUP BY queue, kind, state;
    RETURN NULL;
END
$$;

CREATE FUNCTION rota_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Net per key: a heartbeat or a progress report changes no count and writes nothing.
    INSERT INTO rota_count_deltas (queue, kind, state, n)
    SELECT queue, kind, state, sum(n) FROM (
        SELECT queue, kind, state, 1 AS n FROM rota_updated_new
        UNION ALL
        SELECT queue, kind, state, -1 FROM rota_updated_old
    ) AS d
    GROUP BY queue, kind, state HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;

CREATE FUNCTION rota_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rota_count_deltas (queue, kind, state, n)
    SELECT queue, kind, state, -count(*) FROM rota_deleted GROUP BY queue, kind, state;
    RETURN NULL;
END
$$;

CREATE FUNCTION rota_count_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rota_count_deltas;
    DELETE FROM rota_counts;
    RETURN NULL;
END
$$;

-- Writers wait from here to this migration's commit (CREATE TRIGGER takes this lock anyway;
-- taking it first says so): no job changes between the triggers' creation and the count
-- below, which therefore starts from exactly the jobs the triggers will not see. Workers
-- running during the upgrade block on their next write for the length of one pass over the
-- table (about a second per million jobs; bench/dashboard_scale.py --upgrade measures it),
-- then carry on; readers are never blocked.
LOCK TABLE rota_jobs IN SHARE ROW EXCLUSIVE MODE;

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

INSERT INTO rota_counts (queue, kind, state, n)
SELECT queue, kind, state, count(*) FROM rota_jobs GROUP BY queue, kind, state;

-- The age of the oldest due job (/api/stats, /metrics) is the first entry of this index.
-- rota_jobs_due leads with the queue and tenant, so min(run_at) read all of it: every pending
-- job on each refresh. Partial: only a pending row version enters it (an enqueue, a retry, a
-- job given back), never the running or finished versions a claim and a completion write.
CREATE INDEX rota_jobs_pending_run_at ON rota_jobs (run_at) WHERE state = 'pending';
