-- rota schema, version 24: a list filtered by tenant or by schedule reads that tenant's or
-- schedule's jobs only, newest first.
--
-- No index led with either: a tenant's jobs in a state were found by reading every job of the
-- state (1.5 s for a tenant with no dead job among a million jobs), and a schedule's by
-- sorting all of its jobs. Each index leads with what the filter pins, then the state (a
-- list reads each state on its own, pruned to its partitions: postgres/filters.py), then the
-- id, so a page walks it newest first and stops. Partial: only the jobs that have a tenant or
-- a schedule enter them.
--
-- On the partitioned table: every partition gets its own, the days made later included
-- (rota_jobs_add_day attaches a new empty table, which gets them then, at no cost). The build
-- holds job writes while it reads the jobs once (a few seconds per million jobs).
CREATE INDEX rota_jobs_tenant ON rota_jobs (tenant, state, id) WHERE tenant IS NOT NULL;
CREATE INDEX rota_jobs_schedule ON rota_jobs (schedule, state, id) WHERE schedule IS NOT NULL;
