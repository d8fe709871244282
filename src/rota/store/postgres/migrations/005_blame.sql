-- rota schema, version 5: crash suspects (rota.domain.blame). "crashes" counts the expired
-- leases under which the job's handler had started (above 0: a suspect, claimed and run
-- alone); "lease_started" says whether the current lease's handler has started (true from the
-- claim for an ordinary job, from the worker's begin() for a suspect), so an expiry knows
-- whether the attempt counts. Constant defaults: neither column rewrites the table.
ALTER TABLE rota_jobs
    ADD COLUMN crashes integer NOT NULL DEFAULT 0 CHECK (crashes >= 0),
    ADD COLUMN lease_started boolean NOT NULL DEFAULT true;
