-- rota schema, version 4: vacuum the jobs table early. Every job is inserted, rewritten at
-- claim and at its end, and finally pruned, so the table and its indexes churn; the default
-- thresholds (20% of the rows dead before a vacuum) let dead index entries of claimed and
-- finished jobs pile up in front of the claim's scans on a large table.
ALTER TABLE rota_jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 1
);
