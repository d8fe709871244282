-- 024: a list filtered by tenant, schedule or kind reads that tenant's, schedule's or kind's
-- jobs only, newest first (no index led with any of them: a tenant with no job in a state
-- read every job of that state, a kind no job has every job). Each leads with what the filter
-- pins, then the state, then the id; the tenant's and schedule's are partial.
CREATE INDEX rota_jobs_tenant ON rota_jobs (tenant, state, id) WHERE tenant IS NOT NULL;
CREATE INDEX rota_jobs_schedule ON rota_jobs (schedule, state, id) WHERE schedule IS NOT NULL;
CREATE INDEX rota_jobs_kind ON rota_jobs (kind, state, id);
-- The running jobs per worker (the workers registry: GET /api/workers, and every list page
-- that explains why a pending job waits) from index entries alone, not from every running
-- job's row.
CREATE INDEX rota_jobs_running_worker ON rota_jobs (worker) WHERE state = 'running';
