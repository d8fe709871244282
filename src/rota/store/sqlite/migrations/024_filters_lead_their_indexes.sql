-- 024: a list filtered by tenant or by schedule reads that tenant's or schedule's jobs only,
-- newest first (no index led with either: a tenant with no job in a state read every job of
-- that state). Each leads with what the filter pins, then the state, then the id.
CREATE INDEX rota_jobs_tenant ON rota_jobs (tenant, state, id) WHERE tenant IS NOT NULL;
CREATE INDEX rota_jobs_schedule ON rota_jobs (schedule, state, id) WHERE schedule IS NOT NULL;
