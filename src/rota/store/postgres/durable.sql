-- The durable verbs' statements (postgres/durable.py), loaded with queries.sql and written
-- in its conventions. Fenced writes lock the job's row under its token inside their own
-- statement or transaction: a claim or a rescue taking the job over waits for them (and then
-- sees what they wrote), and one that came first leaves no row to lock.

-- name: steps
SELECT job_id, name, kind, state, seq, attempts, result, error, started_at, finished_at,
       wake_at, key, token
FROM rota_steps WHERE job_id = %(id)s ORDER BY seq;

-- name: checkpoint
-- A step's checkpoint in one statement: the count says whether the job was held (0: the
-- lease is lost and nothing was written). A step that succeeded keeps its first result.
WITH held AS MATERIALIZED (
    SELECT id FROM rota_jobs
    WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
    FOR UPDATE
), written AS (
    INSERT INTO rota_steps AS s (job_id, name, kind, state, attempts, result, token,
                                 started_at, finished_at)
    SELECT id, %(name)s, 'step', 'succeeded', 1, %(result)s::json, %(token)s,
           coalesce(%(now)s::timestamptz, now()) - %(duration)s::interval,
           coalesce(%(now)s::timestamptz, now())
    FROM held
    ON CONFLICT (job_id, name) DO UPDATE SET
        state = 'succeeded', attempts = s.attempts + 1, result = excluded.result,
        token = excluded.token, started_at = excluded.started_at,
        finished_at = excluded.finished_at
    WHERE s.state <> 'succeeded'
)
SELECT count(*) FROM held;

-- name: fail_step
-- A step's failure recorded and, with %(retry_in)s, its attempt ended failed and given back
-- (the step has attempts of its own), in one statement.
WITH held AS MATERIALIZED (
    SELECT id FROM rota_jobs
    WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
    FOR UPDATE
), written AS (
    INSERT INTO rota_steps AS s (job_id, name, kind, state, attempts, error, token,
                                 started_at, finished_at)
    SELECT id, %(name)s, 'step', 'failed', 1, %(error)s, %(token)s,
           coalesce(%(now)s::timestamptz, now()) - %(duration)s::interval,
           coalesce(%(now)s::timestamptz, now())
    FROM held
    ON CONFLICT (job_id, name) DO UPDATE SET
        state = 'failed', attempts = s.attempts + 1, error = excluded.error,
        token = excluded.token, started_at = excluded.started_at,
        finished_at = excluded.finished_at
    WHERE s.state <> 'succeeded'
), done AS (
    UPDATE rota_jobs j SET
        state = 'pending',
        run_at = coalesce(%(now)s::timestamptz, now()) + %(retry_in)s::interval,
        attempt = j.attempt - 1,
        lease_until = NULL,
        last_error = %(error)s,
        history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'token', j.lease_token, 'worker', j.worker,
            'started_us', (extract(epoch FROM j.started_at) * 1000000)::bigint,
            'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
            {_beats}, 'outcome', 'failed', 'error', %(error)s::text, 'traceback', %(traceback)s::text))
    FROM held
    WHERE %(retry_in)s::interval IS NOT NULL AND j.id = held.id AND j.state = 'running'
      AND j.lease_token = %(token)s
    RETURNING j.id, j.state, j.queue, j.run_at
), {wake}
SELECT (SELECT count(*) FROM held) FROM woke;

-- name: hold_step
-- The job's row locked under the token, the store's now, and the record named so far (a
-- sleep's or wait's transaction starts here; no row: the lease is lost).
SELECT coalesce(%(now)s::timestamptz, now()), s.state, s.wake_at, s.result::text
FROM rota_jobs j LEFT JOIN rota_steps s ON s.job_id = j.id AND s.name = %(name)s
WHERE j.id = %(id)s AND j.state = 'running' AND j.lease_token = %(token)s
FOR UPDATE OF j;

-- name: record_step
-- A sleep's or a wait's record: a new one, or the one named so far moved on (keeping its
-- first start, wake time and key).
INSERT INTO rota_steps AS s (job_id, name, kind, state, result, token, started_at,
                             finished_at, wake_at, key)
VALUES (%(id)s, %(name)s, %(kind)s, %(state)s, %(result)s::json, %(token)s, %(at)s,
        %(finished)s, %(wake)s, %(key)s)
ON CONFLICT (job_id, name) DO UPDATE SET
    state = excluded.state, result = excluded.result, token = excluded.token,
    finished_at = excluded.finished_at, wake_at = coalesce(s.wake_at, excluded.wake_at),
    key = coalesce(s.key, excluded.key);

-- name: lock_signal_key
-- Signals and waits on one key take turns (until their commit), so that a signal sent while
-- a wait begins is either delivered to it or kept for it, never missed by both.
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 1936289646));

-- name: take_signal
-- The oldest signal kept for the key and not expired, taken: it reaches this wait only.
DELETE FROM rota_signals WHERE id = (
    SELECT id FROM rota_signals
    WHERE key = %(key)s AND expires_at > %(at)s
    ORDER BY id LIMIT 1
)
RETURNING data::text;

-- name: first_wait
-- The wait for the key that began first, of a job still waiting (pending, or held by an
-- operator) or running, its job's row locked (in the same order as a wait's own
-- transaction: the key, then the job).
SELECT s.job_id, s.name
FROM rota_steps s JOIN rota_jobs j ON j.id = s.job_id
WHERE s.key = %(key)s AND s.state = 'waiting' AND j.state IN ('pending', 'running', 'held')
ORDER BY s.started_at, s.job_id
LIMIT 1
FOR UPDATE OF j;

-- name: deliver_signal
UPDATE rota_steps SET state = 'received', result = %(data)s::json,
    finished_at = coalesce(%(now)s::timestamptz, now())
WHERE job_id = %(id)s AND name = %(name)s AND state = 'waiting'
RETURNING job_id;

-- name: wake_waiting
-- The job whose wait got its signal is due now (if it waits, rather than runs), and the
-- workers of its queue are woken on commit; a held one is due once released, waking none now.
WITH done AS (
    UPDATE rota_jobs SET run_at = least(run_at, coalesce(%(now)s::timestamptz, now()))
    WHERE id = %(id)s AND state IN ('pending', 'held')
    RETURNING id, state, queue, run_at
), {wake}
SELECT count(*) FROM done, woke;

-- name: keep_signal
INSERT INTO rota_signals (key, data, sent_at, expires_at)
VALUES (%(key)s, %(data)s::json, coalesce(%(now)s::timestamptz, now()),
        coalesce(%(now)s::timestamptz, now()) + %(expire_after)s::interval)
RETURNING expires_at;

-- name: prune_durable
-- The records of jobs that are gone (no foreign key can cascade from the partitioned
-- rota_jobs), a batch of jobs at a time, and kept signals past their expiry.
WITH orphans AS (
    SELECT DISTINCT o.job_id FROM rota_steps o
    WHERE o.started_at < %(older_than)s
      AND NOT EXISTS (SELECT FROM rota_jobs j WHERE j.id = o.job_id)
    LIMIT %(limit)s
), gone AS (
    DELETE FROM rota_steps WHERE job_id IN (SELECT job_id FROM orphans) RETURNING 1
), expired AS (
    DELETE FROM rota_signals WHERE expires_at <= coalesce(%(now)s::timestamptz, now())
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM expired);

-- name: held
SELECT 1 FROM rota_jobs WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s;
