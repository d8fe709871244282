-- Every statement rota runs on PostgreSQL, by name. Loaded once by queries.py.
-- Conventions: %(now)s is NULL in production, so coalesce(%(now)s, now()) is the database's
-- clock (workers' clocks never decide anything); tests pass a fake instant instead.
-- Every write after a claim is fenced: WHERE state = 'running' AND lease_token = <token>.
-- {tally} adds the terminal transitions of the CTE "done" to rota_finished_per_minute.

-- name: now
SELECT coalesce(%(now)s::timestamptz, now());

-- name: enqueue
-- One statement for a whole batch. ON CONFLICT DO NOTHING turns a duplicate unique key (or
-- schedule slot) into "not inserted"; the caller then looks up the job that holds it.
INSERT INTO rota_jobs (kind, queue, payload, priority, run_at, max_attempts, tenant,
                       unique_key, timeout_us, schedule, slot_at, created_at)
SELECT i.kind, i.queue, i.payload::json, i.priority,
       coalesce(i.run_at, coalesce(%(now)s::timestamptz, now()) + i.delay_us * interval '1 microsecond'),
       i.max_attempts, i.tenant, i.unique_key, i.timeout_us, i.schedule, i.slot_at,
       coalesce(%(now)s::timestamptz, now())
FROM unnest(%(kind)s::text[], %(queue)s::text[], %(payload)s::text[], %(priority)s::smallint[],
            %(run_at)s::timestamptz[], %(delay_us)s::bigint[], %(max_attempts)s::int[],
            %(tenant)s::text[], %(unique_key)s::text[], %(timeout_us)s::bigint[],
            %(schedule)s::text[], %(slot_at)s::timestamptz[])
     WITH ORDINALITY AS i(kind, queue, payload, priority, run_at, delay_us, max_attempts,
                          tenant, unique_key, timeout_us, schedule, slot_at, ord)
ORDER BY i.ord
ON CONFLICT DO NOTHING
RETURNING {job_columns};

-- name: existing_for_keys
-- The active job holding each unique key, and the job of each schedule slot.
SELECT {job_columns} FROM rota_jobs
WHERE (unique_key = ANY(%(unique_keys)s::text[]) AND state IN ('pending', 'running'))
   OR (schedule, slot_at) IN (SELECT * FROM unnest(%(schedules)s::text[], %(slots)s::timestamptz[]));

-- name: reserve_ids
-- Ids and the store's clock for a bulk COPY: identity values are taken up front, in order.
SELECT coalesce(%(now)s::timestamptz, now()),
       array(SELECT nextval(pg_get_serial_sequence('rota_jobs', 'id'))
             FROM generate_series(1, %(count)s));

-- name: notify
SELECT pg_notify('rota_jobs', q) FROM unnest(%(queues)s::text[]) AS q;

-- name: claim
-- Lock candidates first, in MATERIALIZED CTEs with FOR UPDATE SKIP LOCKED and a LIMIT, then
-- update exactly those rows: the planner can neither re-run the locking subquery nor claim
-- more rows than asked. One lateral probe per queue keeps each scan on rota_jobs_due in index
-- order (an = ANY(queues) condition would force a sort of every due row).
WITH due AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at
    FROM unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM rota_jobs j
        WHERE j.state = 'pending' AND j.queue = q.name
          AND j.run_at <= coalesce(%(now)s::timestamptz, now())
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) c
), expired AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at FROM rota_jobs j
    WHERE j.state = 'running' AND j.lease_until < coalesce(%(now)s::timestamptz, now())
      AND j.attempt < j.max_attempts AND j.queue = ANY(%(queues)s::text[])
    -- Expired leases are few; sorting them in claim order keeps one order for all jobs.
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), chosen AS MATERIALIZED (
    SELECT id FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) AS candidates
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
)
UPDATE rota_jobs j SET
    state = 'running',
    attempt = j.attempt + 1,
    lease_token = nextval('rota_lease_token_seq'),
    lease_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
    worker = %(worker)s,
    started_at = coalesce(%(now)s::timestamptz, now()),
    finished_at = NULL,
    -- Taking over an expired lease ends the silent worker's attempt in the history.
    history = CASE WHEN j.state = 'running' THEN
        coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'token', j.lease_token, 'worker', j.worker,
            'started_us', (extract(epoch FROM j.started_at) * 1000000)::bigint,
            'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
            'outcome', 'lease_expired', 'error', 'lease expired'))
        ELSE j.history END,
    last_error = CASE WHEN j.state = 'running' THEN 'lease expired' ELSE j.last_error END
FROM chosen
WHERE j.id = chosen.id
RETURNING {j.job_columns};

-- name: heartbeat
-- One statement renews all of a worker's leases; ids missing from the result are lost.
UPDATE rota_jobs j SET lease_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS l(id, token)
WHERE j.id = l.id AND j.state = 'running' AND j.lease_token = l.token
RETURNING j.id;

-- name: complete
-- A whole batch of leases in one statement; every row still checks its own token.
WITH done AS (
    UPDATE rota_jobs j SET state = 'succeeded', lease_until = NULL,
                           finished_at = coalesce(%(now)s::timestamptz, now())
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS l(id, token)
    WHERE j.id = l.id AND j.state = 'running' AND j.lease_token = l.token
    RETURNING j.id, j.state
), tally AS ({tally})
SELECT id FROM done;

-- name: fail
WITH done AS (
UPDATE rota_jobs SET
    state = CASE WHEN %(permanent)s OR attempt >= max_attempts THEN 'dead' ELSE 'pending' END,
    run_at = CASE WHEN %(permanent)s OR attempt >= max_attempts THEN run_at
                  ELSE coalesce(%(now)s::timestamptz, now()) + %(retry_in)s::interval END,
    finished_at = CASE WHEN %(permanent)s OR attempt >= max_attempts
                       THEN coalesce(%(now)s::timestamptz, now()) END,
    lease_until = NULL,
    last_error = %(error)s,
    history = coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'token', lease_token, 'worker', worker,
        'started_us', (extract(epoch FROM started_at) * 1000000)::bigint,
        'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
        'outcome', 'failed', 'error', %(error)s::text, 'traceback', %(traceback)s::text))
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id, state
), tally AS ({tally})
SELECT state FROM done;

-- name: give_back
-- Snooze and release: pending again at run_at, and the attempt does not count.
UPDATE rota_jobs SET
    state = 'pending',
    run_at = coalesce(%(now)s::timestamptz, now()) + %(delay)s::interval,
    attempt = attempt - 1,
    lease_until = NULL,
    history = coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'token', lease_token, 'worker', worker,
        'started_us', (extract(epoch FROM started_at) * 1000000)::bigint,
        'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
        'outcome', %(outcome)s::text))
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: retry
UPDATE rota_jobs SET state = 'pending', run_at = coalesce(%(now)s::timestamptz, now()),
    attempt = 0, max_attempts = greatest(max_attempts, %(max_attempts)s::int),
    lease_until = NULL, finished_at = NULL
WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('dead', 'cancelled')
RETURNING {job_columns};

-- name: cancel
WITH done AS (
UPDATE rota_jobs SET state = 'cancelled', lease_until = NULL,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    history = CASE WHEN state = 'running' THEN
        coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
            'attempt', attempt, 'token', lease_token, 'worker', worker,
            'started_us', (extract(epoch FROM started_at) * 1000000)::bigint,
            'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
            'outcome', 'cancelled'))
        ELSE history END
WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('pending', 'running')
RETURNING {job_columns}
), tally AS ({tally})
SELECT * FROM done;

-- name: get
SELECT {job_columns} FROM rota_jobs WHERE id = %(id)s;

-- name: state_of
SELECT state FROM rota_jobs WHERE id = %(id)s;

-- name: attempts
SELECT state, attempt, lease_token, worker, started_at, finished_at, history
FROM rota_jobs WHERE id = %(id)s;

-- name: rescue
-- Lock the expired rows and rewrite them in one statement, each only if it still carries the
-- token observed: a rescue can never overwrite a job that completed or was re-claimed.
WITH expired AS MATERIALIZED (
    SELECT id, lease_token FROM rota_jobs
    WHERE state = 'running' AND lease_until < coalesce(%(now)s::timestamptz, now())
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), done AS (
UPDATE rota_jobs j SET
    state = CASE WHEN j.attempt >= j.max_attempts THEN 'dead' ELSE 'pending' END,
    run_at = CASE WHEN j.attempt >= j.max_attempts THEN j.run_at
                  ELSE coalesce(%(now)s::timestamptz, now()) END,
    finished_at = CASE WHEN j.attempt >= j.max_attempts
                       THEN coalesce(%(now)s::timestamptz, now()) END,
    lease_until = NULL,
    last_error = CASE WHEN j.attempt >= j.max_attempts
                      THEN 'lease expired on the last attempt' ELSE 'lease expired' END,
    history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'token', j.lease_token, 'worker', j.worker,
        'started_us', (extract(epoch FROM j.started_at) * 1000000)::bigint,
        'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
        'outcome', 'lease_expired',
        'error', CASE WHEN j.attempt >= j.max_attempts
                      THEN 'lease expired on the last attempt' ELSE 'lease expired' END))
FROM expired
WHERE j.id = expired.id AND j.state = 'running' AND j.lease_token = expired.lease_token
RETURNING j.id, j.state
), tally AS ({tally})
SELECT id, state FROM done;

-- name: prune
WITH gone_stats AS (
    DELETE FROM rota_finished_per_minute WHERE minute < %(older_than)s - interval '1 minute'
)
DELETE FROM rota_jobs WHERE id IN (
    SELECT id FROM rota_jobs
    WHERE state IN ('succeeded', 'dead', 'cancelled') AND finished_at < %(older_than)s
    ORDER BY state, id
    LIMIT %(limit)s
);

-- name: count_jobs
SELECT count(*) FROM (SELECT 1 FROM rota_jobs WHERE {where} LIMIT %(limit)s) AS capped;

-- name: throughput
SELECT minute, state, n FROM rota_finished_per_minute
WHERE minute >= date_trunc('minute', %(since)s::timestamptz)
  AND minute < coalesce(%(now)s::timestamptz, now());

-- name: counts_exact
SELECT queue, state, count(*) FROM rota_jobs GROUP BY queue, state;

-- name: counts_active
SELECT queue, state, count(*) FROM rota_jobs
WHERE state IN ('pending', 'running') GROUP BY queue, state;

-- name: counts_sampled
-- Terminal states of a large table, from a block sample scaled to the table's size.
SELECT queue, state, count(*) FROM rota_jobs TABLESAMPLE SYSTEM (%(percent)s)
WHERE state IN ('succeeded', 'dead', 'cancelled') GROUP BY queue, state;

-- name: table_size_estimate
SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'rota_jobs'::regclass;

-- name: oldest_due
SELECT min(run_at) FROM rota_jobs
WHERE state = 'pending' AND run_at <= coalesce(%(now)s::timestamptz, now());

-- name: register_worker
INSERT INTO rota_workers (name, host, pid, queues, concurrency, started_at, beat_at)
VALUES (%(name)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (name) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    queues = excluded.queues, concurrency = excluded.concurrency,
    started_at = excluded.started_at, beat_at = excluded.beat_at;

-- name: beat_worker
UPDATE rota_workers SET beat_at = coalesce(%(now)s::timestamptz, now()) WHERE name = %(name)s
RETURNING name;

-- name: deregister_worker
DELETE FROM rota_workers WHERE name = %(name)s;

-- name: list_workers
SELECT w.name, w.host, w.pid, w.queues, w.concurrency, w.started_at, w.beat_at,
       (SELECT count(*) FROM rota_jobs j WHERE j.state = 'running' AND j.worker = w.name)
FROM rota_workers w ORDER BY w.name;

-- name: prune_workers
DELETE FROM rota_workers WHERE beat_at < %(older_than)s;

-- name: schedule_for_update
-- Schedules: each read returns the schedule's columns (s) and its last job's state (j).
-- Locks the row (upsert, run-now): a concurrent firing skips it, a concurrent upsert waits.
SELECT {schedule_columns}, coalesce(%(now)s::timestamptz, now())
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
WHERE s.name = %(name)s
FOR UPDATE OF s;

-- name: insert_schedule
-- DO NOTHING: a schedule of the same name created meanwhile wins; the caller then locks it.
INSERT INTO rota_schedules (name, kind, payload, queue, priority, tenant, max_attempts,
    every_us, cron, timezone, anchor, jitter_us, misfire, misfire_limit, grace_us, overlap,
    paused, next_run_at, due_at, last_run_at, last_job_id, created_at, updated_at)
VALUES (%(name)s, %(kind)s, %(payload)s::json, %(queue)s, %(priority)s, %(tenant)s,
    %(max_attempts)s, %(every_us)s, %(cron)s, %(timezone)s, %(anchor)s, %(jitter_us)s,
    %(misfire)s, %(misfire_limit)s, %(grace_us)s, %(overlap)s, %(paused)s, %(next_run_at)s,
    %(due_at)s, %(last_run_at)s, %(last_job_id)s, %(created_at)s, %(updated_at)s)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: update_schedule
UPDATE rota_schedules SET kind = %(kind)s, payload = %(payload)s::json, queue = %(queue)s,
    priority = %(priority)s, tenant = %(tenant)s, max_attempts = %(max_attempts)s,
    every_us = %(every_us)s, cron = %(cron)s, timezone = %(timezone)s, anchor = %(anchor)s,
    jitter_us = %(jitter_us)s, misfire = %(misfire)s, misfire_limit = %(misfire_limit)s,
    grace_us = %(grace_us)s, overlap = %(overlap)s, next_run_at = %(next_run_at)s,
    due_at = %(due_at)s, updated_at = %(updated_at)s
WHERE name = %(name)s;

-- name: get_schedule
SELECT {schedule_columns}
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
WHERE s.name = %(name)s;

-- name: list_schedules
SELECT {schedule_columns}
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
ORDER BY s.name;

-- name: set_schedule_paused
WITH s AS (
    UPDATE rota_schedules SET paused = %(paused)s,
        updated_at = coalesce(%(now)s::timestamptz, now())
    WHERE name = %(name)s
    RETURNING *
)
SELECT {schedule_columns} FROM s LEFT JOIN rota_jobs j ON j.id = s.last_job_id;

-- name: delete_schedule
DELETE FROM rota_schedules WHERE name = %(name)s RETURNING name;

-- name: set_schedule_last_job
UPDATE rota_schedules SET last_job_id = %(job_id)s WHERE name = %(name)s;

-- name: due_schedules
-- Lock the due rows; SKIP LOCKED lets concurrent firers take other schedules instead of
-- queueing behind this one, and makes each due schedule fire in exactly one transaction.
SELECT {schedule_columns}, coalesce(%(now)s::timestamptz, now())
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
WHERE NOT s.paused AND s.due_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY s.due_at, s.name
LIMIT %(limit)s
FOR UPDATE OF s SKIP LOCKED;

-- name: advance_schedules
-- Runs in the transaction that locked the rows (due_schedules) and inserted their jobs.
UPDATE rota_schedules s SET next_run_at = a.next_run_at, due_at = a.due_at,
    last_run_at = a.last_run_at, last_job_id = a.last_job_id
FROM unnest(%(names)s::text[], %(next_run_at)s::timestamptz[], %(due_at)s::timestamptz[],
            %(last_run_at)s::timestamptz[], %(last_job_id)s::bigint[])
     AS a(name, next_run_at, due_at, last_run_at, last_job_id)
WHERE s.name = a.name;

-- name: next_fire_at
SELECT min(due_at) FROM rota_schedules WHERE NOT paused;
