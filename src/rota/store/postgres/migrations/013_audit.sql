-- rota schema, version 13: the audit log of operator actions (rota.domain.audit), one row
-- per action. "at" comes from the store's clock (now() unless a test drives time);
-- "touched" is how many jobs the action touched (NULL for actions on no job). Listings walk
-- the primary key newest first; pruning and since/until use the index on "at". A new table:
-- no lock on any existing one.
CREATE TABLE rota_audit (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    identity   text        NOT NULL,
    action     text        NOT NULL,
    target     text,
    job_filter jsonb,
    detail     jsonb,
    touched    bigint CHECK (touched >= 0)
);
CREATE INDEX rota_audit_at ON rota_audit (at);
