-- 013_audit: the audit log of operator actions (rota.domain.audit), one row per action.
-- "at" is microseconds since the Unix epoch (UTC) from the store's clock; "job_filter" and
-- "detail" are JSON object text; "touched" is how many jobs the action touched (NULL for
-- actions on no job). Listings walk ids newest first; pruning and since/until use "at".
CREATE TABLE rota_audit (
    -- AUTOINCREMENT: an id is never reused, even after the newest entries were pruned.
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    identity   TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    target     TEXT,
    job_filter TEXT,
    detail     TEXT,
    touched    INTEGER CHECK (touched >= 0)
);
CREATE INDEX rota_audit_at ON rota_audit (at);
