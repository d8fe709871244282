-- rota schema, version 31: each table of jobs keeps statistics of the columns a filter
-- combines, so that an estimated count ("about N") sees a tenant's jobs as they are.
--
-- Past its exact threshold a count of a tenant's or a schedule's jobs is the planner's row
-- estimate (postgres/filters.py, estimate). With statistics of each column alone, the planner
-- multiplies their shares as if the tenant, the state, the kind and the queue were
-- independent: where a tenant's jobs all sit in one state, of one kind, it was off by up to
-- 14x at a million jobs, and guessed hundreds of jobs for a combination that has none.
--
-- A list of the most common combinations (mcv) of some columns answers a filter on two or
-- more of them, and says that a combination missing from the list has almost no job, as long
-- as the list holds nearly every job of the table. A list holds up to 100 combinations (the
-- default statistics target; a higher one would have ANALYZE sample more rows of every table
-- every time), so each is kept as narrow as the filters it serves:
-- - (tenant, state), the state tabs under a tenant filter: a tenant's jobs sit in a few
--   states, so it holds dozens of tenants whole even where their jobs spread over every kind
--   and queue (the planner takes the list with the fewest columns that covers a filter);
-- - (tenant, state, kind, queue), a tenant's jobs of a kind or queue, in a state or not;
-- - (schedule, state), a schedule's runs by state, apart: the jobs of no schedule would crowd
--   a list with the tenants' columns.
-- No functional dependencies: where an mcv list covers a filter's columns the planner never
-- reads them, and alone they take every combination of values for one that exists (a
-- tenant's jobs in a state it has none in).
--
-- Extended statistics are a table's own: PostgreSQL plans the scan of each partition with
-- that partition's statistics, so every leaf of rota_jobs gets them, and rota_jobs_add_day
-- gives them to each day made from now on. Every ANALYZE (autovacuum's, the rescuers' of the
-- active jobs) builds them from the rows it samples anyway: no more reading, a sort of the
-- sample (up to 30,000 rows) per list, tens of milliseconds.
CREATE FUNCTION rota_jobs_stat_leaf(leaf text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE STATISTICS IF NOT EXISTS %I (mcv) ON tenant, state FROM %I',
                   leaf || '_tenant_state', leaf);
    EXECUTE format('CREATE STATISTICS IF NOT EXISTS %I (mcv) ON tenant, state, kind, queue'
                   ' FROM %I', leaf || '_tenant_state_kind_queue', leaf);
    EXECUTE format('CREATE STATISTICS IF NOT EXISTS %I (mcv) ON schedule, state FROM %I',
                   leaf || '_schedule_state', leaf);
END
$$;

-- 019's, giving the day its statistics with its indexes.
CREATE OR REPLACE FUNCTION rota_jobs_add_day(day date) RETURNS boolean LANGUAGE plpgsql AS $$
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
    PERFORM rota_jobs_stat_leaf(leaf);
    EXECUTE format('ALTER TABLE rota_jobs_finished ATTACH PARTITION %I'
                   ' FOR VALUES FROM (%L) TO (%L)', leaf, lo, hi);
    RETURN true;
EXCEPTION WHEN check_violation OR invalid_object_definition THEN
    -- Jobs of that day in the default partition, or a partition that covers it already (the
    -- upgraded table's).
    RETURN false;
END
$$;

-- The tables there are now: the active one, the default, an upgraded table's, every day.
-- Each is analysed once, for the statistics' columns only: a day past will not change enough
-- for autovacuum to analyse it again. That reads a sample of each table (up to 30,000 rows),
-- under a lock, kept until the migration commits, that holds no read or write of jobs: only
-- another ANALYZE or VACUUM of the table waits, and the drop of a day gives up and comes again.
DO $$
DECLARE
    leaf text;
BEGIN
    FOR leaf IN
        SELECT c.relname FROM pg_partition_tree('rota_jobs') t
        JOIN pg_class c ON c.oid = t.relid
        WHERE t.isleaf ORDER BY c.relname
    LOOP
        PERFORM rota_jobs_stat_leaf(leaf);
        EXECUTE format('ANALYZE %I (tenant, state, kind, queue, schedule)', leaf);
    END LOOP;
END
$$;
