-- rota schema, version 10: find a job by its unique key whatever its state. The dashboard's
-- search asks for `id = N OR unique_key = 'N'`; the only index on unique_key covered active
-- jobs, so the search read the whole table (a parallel scan of every finished job). With this
-- index both arms are index lookups (a BitmapOr). Partial: jobs without a key cost nothing.
-- Built without CONCURRENTLY (migrations run in one transaction): on a large table it holds
-- writes for the length of one pass over the rows that have a key.
CREATE INDEX rota_jobs_unique_key ON rota_jobs (unique_key) WHERE unique_key IS NOT NULL;
