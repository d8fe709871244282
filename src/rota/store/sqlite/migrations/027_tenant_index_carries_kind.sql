-- 027: the tenant's index (024) ends with each job's kind and queue, after the unique id so
-- that its order is the same: a count of a tenant's jobs of a kind reads the index alone,
-- never the rows.
DROP INDEX rota_jobs_tenant;
CREATE INDEX rota_jobs_tenant ON rota_jobs (tenant, state, id, kind, queue)
    WHERE tenant IS NOT NULL;
