-- Every statement rota runs on PostgreSQL, by name. Loaded once by queries.py.
-- Conventions: %(now)s is NULL in production, so coalesce(%(now)s, now()) is the database's
-- clock (workers' clocks never decide anything); tests pass a fake instant instead.
-- Every write after a claim is fenced: WHERE state = 'running' AND lease_token = <token>.
-- Arrays are sent in binary (%(name)b): as text, psycopg spells an array by escaping every
-- element and PostgreSQL parses it back, several µs a job for the payloads of a batch.
-- {tally} adds the terminal transitions of the CTE "done" to rota_finished_per_minute;
-- {activity} adds the attempts "done" ended (its rows carry queue, kind, started_at and the
-- due time before the attempt, due_at) to rota_activity (029_activity);
-- {wake} notifies workers of the jobs "done" made pending (due now or later), on commit;
-- {finished} notifies result waiters when "done" made jobs they wait for terminal (one NOTIFY,
-- on commit; none when nobody waits for them).
-- {expiry_*} spell rota.domain.blame.expire for the expired lease of the row j: whether it
-- makes the job dead, whether the attempt is given back, the new crash count, the error;
-- {alone_next} and {alone_after_expiry} whether the row's next attempt runs alone.

-- name: now
SELECT coalesce(%(now)s::timestamptz, now());

-- name: enqueue
-- One statement for a whole batch. ON CONFLICT DO NOTHING turns a duplicate unique key (or
-- schedule slot) into "not inserted"; the caller then looks up the job that holds it.
INSERT INTO rota_jobs (kind, queue, payload, priority, run_at, max_attempts, tenant,
                       unique_key, timeout_us, schedule, slot_at, created_at, trace_context,
                       expires_at, unique_until, unique_states)
SELECT i.kind, i.queue, i.payload::json, i.priority,
       coalesce(i.run_at, coalesce(%(now)s::timestamptz, now()) + i.delay_us * interval '1 microsecond'),
       i.max_attempts, i.tenant, i.unique_key, i.timeout_us, i.schedule, i.slot_at,
       coalesce(%(now)s::timestamptz, now()), i.trace_context::json,
       coalesce(i.expires_at, coalesce(%(now)s::timestamptz, now()) + i.expire_after_us * interval '1 microsecond'),
       CASE WHEN i.unique_states IS NOT NULL
            THEN coalesce(coalesce(%(now)s::timestamptz, now()) + i.unique_for_us * interval '1 microsecond',
                          'infinity') END,
       i.unique_states
FROM unnest(%(kind)b::text[], %(queue)b::text[], %(payload)b::text[], %(priority)b::smallint[],
            %(run_at)b::timestamptz[], %(delay_us)b::bigint[], %(max_attempts)b::int[],
            %(tenant)b::text[], %(unique_key)b::text[], %(timeout_us)b::bigint[],
            %(schedule)b::text[], %(slot_at)b::timestamptz[], %(trace_context)b::text[],
            %(expires_at)b::timestamptz[], %(expire_after_us)b::bigint[],
            %(unique_for_us)b::bigint[], %(unique_states)b::smallint[])
     WITH ORDINALITY AS i(kind, queue, payload, priority, run_at, delay_us, max_attempts,
                          tenant, unique_key, timeout_us, schedule, slot_at, trace_context,
                          expires_at, expire_after_us, unique_for_us, unique_states, ord)
ORDER BY i.ord
ON CONFLICT DO NOTHING
RETURNING id, run_at, created_at, unique_key, schedule, slot_at, expires_at;

-- name: enqueue_one
-- "enqueue" for one job, its values sent as they are: no arrays to build, send and unnest.
INSERT INTO rota_jobs (kind, queue, payload, priority, run_at, max_attempts, tenant,
                       unique_key, timeout_us, schedule, slot_at, created_at, trace_context,
                       expires_at, unique_until, unique_states)
VALUES (%(kind)s::text, %(queue)s::text, %(payload)s::text::json, %(priority)s::smallint,
        coalesce(%(run_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + %(delay_us)s::bigint * interval '1 microsecond'),
        %(max_attempts)s::int, %(tenant)s::text, %(unique_key)s::text, %(timeout_us)s::bigint,
        %(schedule)s::text, %(slot_at)s::timestamptz,
        coalesce(%(now)s::timestamptz, now()), %(trace_context)s::text::json,
        coalesce(%(expires_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + %(expire_after_us)s::bigint * interval '1 microsecond'),
        CASE WHEN %(unique_states)s::smallint IS NOT NULL
             THEN coalesce(coalesce(%(now)s::timestamptz, now()) + %(unique_for_us)s::bigint * interval '1 microsecond',
                           'infinity') END,
        %(unique_states)s::smallint)
ON CONFLICT DO NOTHING
RETURNING id, run_at, created_at, unique_key, schedule, slot_at, expires_at;

-- name: enqueue_plain
-- "enqueue_one" for the common job: no unique key, schedule, expiry or trace context. Fewer
-- values to send and bind, and nothing to conflict on. It is always pending, so it goes
-- straight into rota_jobs_active: a statement on a partition fires none of rota_jobs'
-- statement triggers (each sets up a PL/pgSQL call and a query of its transition table, a
-- good part of a one-row insert's server time); this statement does their work for its one
-- row itself: its count delta (rota_count_inserted, 017) and its wake-up (rota_notify_due,
-- 001, the same text). A change to what those triggers write is a change here too.
WITH job AS (
    INSERT INTO rota_jobs_active (kind, queue, payload, priority, run_at, max_attempts, tenant,
                                  timeout_us, created_at)
    VALUES (%(kind)s::text, %(queue)s::text, %(payload)s::text::json, %(priority)s::smallint,
            coalesce(%(run_at)s::timestamptz,
                     coalesce(%(now)s::timestamptz, now())
                     + %(delay_us)s::bigint * interval '1 microsecond'),
            %(max_attempts)s::int, %(tenant)s::text, %(timeout_us)s::bigint,
            coalesce(%(now)s::timestamptz, now()))
    RETURNING id, queue, kind, run_at, created_at
), counted AS (
    INSERT INTO rota_count_deltas (queue, kind, state, n)
    SELECT queue, kind, 'pending', 1 FROM job
)
SELECT id, run_at, created_at,
       pg_notify('rota_jobs', queue || ' ' || (extract(epoch FROM run_at) * 1000000)::bigint)
FROM job;

-- name: lock_slots
-- Enqueues of schedule slots take turns on each slot until they commit: a slot is unique
-- across every state, and no index spans the partitions of finished jobs (019), so the
-- lookup that follows and the insert are one step. In a key's order: no two enqueues of
-- the same slots can deadlock. The key does not depend on the session's time zone.
SELECT count(pg_advisory_xact_lock(k)) FROM (
    SELECT DISTINCT hashtextextended(
        s.schedule || ' ' || (extract(epoch FROM s.slot_at) * 1000000)::bigint, 7262) AS k
    FROM unnest(%(schedules)b::text[], %(slots)b::timestamptz[]) AS s(schedule, slot_at)
    ORDER BY 1
) AS keys;

-- name: slot_jobs
-- The job of each slot, whatever its state.
SELECT {job_columns} FROM rota_jobs
WHERE schedule IS NOT NULL
  AND (schedule, slot_at) IN (SELECT * FROM unnest(%(schedules)b::text[], %(slots)b::timestamptz[]));

-- name: existing_for_keys
-- The active job holding each unique key, and the job of each schedule slot.
SELECT {job_columns} FROM rota_jobs
WHERE (unique_key = ANY(%(unique_keys)b::text[]) AND state IN ({keeps_key}))
   OR (schedule, slot_at) IN (SELECT * FROM unnest(%(schedules)b::text[], %(slots)b::timestamptz[]));

-- name: lock_unique_key
-- Enqueues of a key held beyond the active states take turns on it until they commit, so
-- looking up its holder and inserting are one step: two enqueues never both find it free.
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 7261));

-- name: held_unique_key
-- The job holding the key: an active one, or one in a state its hold names, in its period.
SELECT {job_columns} FROM rota_jobs
WHERE unique_key = %(key)s
  AND (state IN ({keeps_key})
       OR (unique_until IS NOT NULL AND unique_until > coalesce(%(now)s::timestamptz, now())
           AND (unique_states & {state_bit}) <> 0))
ORDER BY id DESC
LIMIT 1;

-- name: replace_held
-- on_conflict="replace": a holder still pending takes the new payload and run_at; one
-- claimed meanwhile is left alone (no row comes back).
WITH done AS (
UPDATE rota_jobs SET payload = %(payload)s::json,
    run_at = coalesce(%(run_at)s::timestamptz,
                      coalesce(%(now)s::timestamptz, now()) + %(delay_us)s * interval '1 microsecond')
WHERE id = %(id)s AND state = 'pending'
RETURNING {job_columns}
), {wake}
SELECT done.* FROM done, woke;

-- name: reserve_ids
-- Ids and the store's clock for a bulk COPY: identity values are taken up front, in order.
-- The sequence by name (019): looked up per row (pg_get_serial_sequence), 20,000 ids took
-- 45 ms of server time instead of 7.
SELECT coalesce(%(now)s::timestamptz, now()),
       array(SELECT nextval('rota_jobs_id_seq'::regclass) FROM generate_series(1, %(count)s));

-- name: copy_jobs
-- Keyless jobs are pending: straight into rota_jobs_active, which fires none of rota_jobs'
-- statement triggers (their transition tables would hold every row of the COPY); "copied"
-- does their work once it is done.
COPY rota_jobs_active (id, kind, queue, payload, priority, run_at, max_attempts, tenant,
                       timeout_us, created_at, trace_context, expires_at, schedule, slot_at)
FROM STDIN;

-- name: copy_jobs_now
-- "copy_jobs" for keyless jobs due now by the store's clock (no clock given): run_at and
-- created_at are left to their default (022), the transaction's now(), which is the instant
-- reserve_ids returned in the same transaction; the server parses two instants fewer a row.
COPY rota_jobs_active (id, kind, queue, payload, priority, max_attempts, tenant, timeout_us,
                       trace_context, expires_at, schedule, slot_at)
FROM STDIN;

-- name: copied
-- What rota_jobs' insert triggers would have written for a "copy_jobs", in the same
-- transaction: the count deltas per (queue, kind) (rota_count_inserted, 017) and one wake-up
-- per queue with its earliest run_at (rota_notify_due, 001, the same text).
WITH counted AS (
    INSERT INTO rota_count_deltas (queue, kind, state, n)
    SELECT queue, kind, 'pending', n
    FROM unnest(%(queues)s::text[], %(kinds)s::text[], %(counts)s::bigint[]) AS c(queue, kind, n)
)
SELECT pg_notify('rota_jobs', queue || ' ' || (extract(epoch FROM due) * 1000000)::bigint)
FROM unnest(%(due_queues)s::text[], %(due)s::timestamptz[]) AS d(queue, due);

-- name: _beats
-- The heartbeats of the attempt a history entry records, as its job's row counted them (030).
'heartbeats', heartbeats,
        'last_heartbeat_us', (extract(epoch FROM last_heartbeat_at) * 1000000)::bigint

-- name: _candidates
-- The jobs a claim may take, locked, as the CTE "chosen" (ids, in claim order) over
-- "candidates".
-- Groups: a loose index scan over rota_jobs_due finds each (tenant, priority) group with
-- pending jobs, one descent per group (the index keys -priority, so (tenant, -priority)
-- ascends in claim order and the next group is the first entry beyond the last: 020). Each
-- queue's walk starts after the tenant this store served last (phase 1) and, past the last
-- group, wraps around to the first (phase 2), stopping at that tenant or after max_groups
-- groups: as many as the batch asks for jobs (64 at least, 1,000 at most), so a batch fills
-- one job per tenant where each tenant holds few. Each group is read in run_at order up to
-- the first job not yet due, so future jobs cost nothing. Locks are taken in MATERIALIZED
-- CTEs with FOR UPDATE SKIP LOCKED and a LIMIT, so two claimers never share a row and the
-- planner can neither re-run a locking subquery nor take more than asked.
WITH RECURSIVE open_queues AS MATERIALIZED (
{_open_queues}
), {_due}
), expired AS MATERIALIZED (
    SELECT j.id, j.ctid AS loc, j.priority, j.run_at, j.queue, coalesce(j.tenant, '') AS tenant,
           {alone_after_expiry} AS alone
    FROM rota_jobs j
    WHERE {_taken_over} AND j.queue IN (SELECT name FROM open_queues)
    -- Expired leases are few; sorting them in claim order keeps one order for all jobs.
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(take)s
    FOR UPDATE SKIP LOCKED
), candidates AS MATERIALIZED (
    SELECT id, loc, priority, run_at, alone,
           row_number() OVER (PARTITION BY queue, tenant ORDER BY priority DESC, run_at, id) AS turn
    FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) AS locked
), {_chosen}

-- name: _fresh_candidates
-- "_candidates" when no lease the claim could take over has expired ("_unstale_queues"): then
-- there is no takeover to look for, and the candidates are the due jobs alone. When one has,
-- no queue is open and nothing is locked.
WITH RECURSIVE {_unstale_queues}, {_due}
), candidates AS MATERIALIZED (
    SELECT id, loc, priority, run_at, alone,
           row_number() OVER (PARTITION BY queue, tenant ORDER BY priority DESC, run_at, id) AS turn
    FROM due AS locked
), {_chosen}

-- name: _unstale_queues
-- "stale": whether a lease the claim could take over has expired (what "expired" would lock:
-- _taken_over, in the queues asked for); "open_queues": the queues asked for that the claim
-- may take from, none while "stale" holds.
stale AS MATERIALIZED (
    -- The soonest such lease, not EXISTS: its order is rota_jobs_leases' (running leases by
    -- their end), so the read starts at the oldest lease and stops at the first expired one
    -- it may take or at the first not yet expired. EXISTS drops an ORDER BY, and its plan,
    -- made while few jobs ran, read every running job's entry of the (state, id) index on
    -- every claim: a claim cost more the more jobs ran.
    SELECT (SELECT j.lease_until FROM rota_jobs j
            WHERE {_taken_over} AND j.queue = ANY(%(queues)b::text[])
            ORDER BY j.lease_until LIMIT 1) IS NOT NULL AS found
), open_queues AS MATERIALIZED (
{_open_queues}
      AND NOT (SELECT found FROM stale)
)

-- name: _open_queues
    SELECT q.name FROM unnest(%(queues)b::text[]) AS q(name)
    WHERE NOT EXISTS (SELECT 1 FROM rota_queues p WHERE p.name = q.name AND p.paused)
      AND (%(limited)s OR NOT EXISTS (SELECT 1 FROM rota_limits))

-- name: _due
walk(queue, tenant, rank, phase, steps) AS (
    SELECT q.name, g.tenant, g.rank, g.phase, 1
    FROM open_queues q
    CROSS JOIN LATERAL (
        (SELECT coalesce(j.tenant, '') AS tenant, -j.priority AS rank, 1 AS phase
         FROM rota_jobs j
         WHERE j.state = 'pending' AND j.queue = q.name AND coalesce(j.tenant, '') > %(after)s
         ORDER BY coalesce(j.tenant, ''), -j.priority LIMIT 1)
        UNION ALL
        (SELECT coalesce(j.tenant, ''), -j.priority, 2 FROM rota_jobs j
         WHERE j.state = 'pending' AND j.queue = q.name
         ORDER BY coalesce(j.tenant, ''), -j.priority LIMIT 1)
        LIMIT 1
    ) AS g
  UNION ALL
    SELECT w.queue, g.tenant, g.rank, g.phase, w.steps + 1
    FROM walk w
    CROSS JOIN LATERAL (
        (SELECT coalesce(j.tenant, '') AS tenant, -j.priority AS rank, w.phase AS phase
         FROM rota_jobs j
         WHERE j.state = 'pending' AND j.queue = w.queue
           AND (coalesce(j.tenant, ''), -j.priority) > (w.tenant, w.rank)
         ORDER BY coalesce(j.tenant, ''), -j.priority LIMIT 1)
        UNION ALL
        (SELECT coalesce(j.tenant, ''), -j.priority, 2 FROM rota_jobs j
         WHERE w.phase = 1 AND j.state = 'pending' AND j.queue = w.queue
         ORDER BY coalesce(j.tenant, ''), -j.priority LIMIT 1)
        LIMIT 1
    ) AS g
    WHERE w.steps < %(max_groups)s AND (g.phase = 1 OR g.tenant <= %(after)s)
), groups AS MATERIALIZED (
    SELECT queue, tenant, rank FROM walk
), quota AS MATERIALIZED (
    -- Rows to lock per group: the whole batch in plain claim order; a fair share when tenants
    -- take turns (twice it, so a tenant with fewer due jobs does not leave the batch short).
    SELECT CASE WHEN %(fair)s
                THEN least(%(take)s, 2 * ceil(%(take)s::numeric
                                              / greatest(1, count(DISTINCT (queue, tenant))))::int)
                ELSE %(take)s END AS n
    FROM groups
), due AS MATERIALIZED (
    SELECT c.id, c.loc, c.priority, c.run_at, g.queue, g.tenant, c.alone
    FROM groups g
    CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS loc, j.priority, j.run_at, {alone_next} AS alone FROM rota_jobs j
        WHERE j.state = 'pending' AND j.queue = g.queue AND coalesce(j.tenant, '') = g.tenant
          AND -j.priority = g.rank
          AND j.run_at <= coalesce(%(now)s::timestamptz, now())
          -- An expired job is never started, whether or not the rescuer cancelled it yet.
          AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
          AND j.kind <> ALL(%(blocked_kinds)b::text[])
          -- A kind the claiming worker does not run is left for a worker that does.
          AND (%(kinds)b::text[] IS NULL OR j.kind = ANY(%(kinds)b::text[]))
          AND coalesce(j.tenant, '') <> ALL(%(blocked_tenants)b::text[])
        ORDER BY j.run_at, j.id
        LIMIT (SELECT n FROM quota)
        FOR UPDATE SKIP LOCKED
    ) AS c

-- name: _chosen
chosen AS MATERIALIZED (
    SELECT id, loc, turn, alone,
           row_number() OVER (ORDER BY CASE WHEN %(fair)s THEN turn ELSE 0 END,
                                       priority DESC, run_at, id) AS pos
    FROM candidates
    ORDER BY pos
    LIMIT %(take)s
)

-- name: _taken_over
-- A job j whose lease a claim may take over: running, its lease expired, not at its last
-- crash already, of a kind and tenant the claim may take.
j.state = 'running' AND j.lease_until < coalesce(%(now)s::timestamptz, now())
      AND NOT {expiry_dead}
      AND j.kind <> ALL(%(blocked_kinds)b::text[])
      AND (%(kinds)b::text[] IS NULL OR j.kind = ANY(%(kinds)b::text[]))
      AND coalesce(j.tenant, '') <> ALL(%(blocked_tenants)b::text[])

-- name: _take
-- Lease the rows of "batch": attempt + 1, a new fencing token, lease_until from the store
-- clock. Taking over an expired lease settles it first (blame: its attempt may be given back)
-- and ends the silent worker's attempt in the history. An attempt that runs alone has not
-- started yet: its worker says when (begin).
UPDATE rota_jobs j SET
    state = 'running',
    attempt = j.attempt + 1
        - CASE WHEN j.state = 'running' AND {expiry_given_back} THEN 1 ELSE 0 END,
    crashes = CASE WHEN j.state = 'running' THEN {expiry_crashes} ELSE j.crashes END,
    lease_started = NOT CASE WHEN j.state = 'running' THEN {alone_after_expiry} ELSE {alone_next} END,
    {_lease},
    history = CASE WHEN j.state = 'running' THEN
        coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'token', j.lease_token, 'worker', j.worker,
            'started_us', (extract(epoch FROM j.started_at) * 1000000)::bigint,
            'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
            {_beats},
            'lease_until_us', (extract(epoch FROM j.lease_until) * 1000000)::bigint,
            'outcome', 'lease_expired', 'error', {expiry_error}))
        ELSE j.history END,
    last_error = CASE WHEN j.state = 'running' THEN {expiry_error} ELSE j.last_error END
-- The statement that splices this in names the rows, and their active states: the states
-- name the partition (019), so the update reads rota_jobs_active alone.

-- name: _take_pending
-- Lease pending rows, for a claim that takes over no lease ("_take" without the takeover).
UPDATE rota_jobs_active j SET
    state = 'running',
    attempt = j.attempt + 1,
    lease_started = NOT {alone_next},
    {_lease}

-- name: _lease
-- A new lease: its fencing token, its end on the store's clock, its worker; no progress or
-- heartbeats yet.
lease_token = nextval('rota_lease_token_seq'),
    lease_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
    worker = %(worker)s,
    started_at = coalesce(%(now)s::timestamptz, now()),
    finished_at = NULL,
    progress = NULL,
    progress_message = NULL,
    heartbeats = 0,
    last_heartbeat_at = NULL

-- name: claim
-- One statement for a claim when no limit exists. If one does, it claims nothing and returns
-- a row of NULLs, and the store takes the limited path (claim_candidates in a transaction).
-- When the walk was cut short, a last row (NULLs but for its tenant) names the last tenant
-- walked, so the next claim can start beyond it even if this one found nothing due.
{_candidates}, {_batch}, taken AS (
{_take}
-- Each row where its lock found it, in one array: a TID scan. A plan made while the table was
-- empty (rota_claim keeps its plan for the session) otherwise reads the table once per row of
-- the batch, or every pending job's index entry per claim: a join by id with the table outer,
-- or the (state, id) index with the ids as a filter. The states are an OR, which prunes the
-- partitions to rota_jobs_active as an IN list would but which no plain index scan can use,
-- so with rota_claim's settings the TID scan is the only plan left. A row a concurrent write
-- moved after this statement's snapshot is locked at its new place, which the update cannot
-- see: it stays pending for the next claim.
WHERE j.ctid = ANY(ARRAY(SELECT loc FROM batch)) AND (j.state = 'pending' OR j.state = 'running')
RETURNING {j.job_columns}
)
SELECT * FROM taken
UNION ALL
SELECT {null_job_columns} WHERE EXISTS (SELECT 1 FROM rota_limits)
UNION ALL
{_walk_marker};

-- name: claim_fresh
-- "claim" when no lease it could take over has expired, which is nearly always: the same
-- choice of due jobs, without the takeover's lookups and arithmetic (the claim of a worker
-- that finds one job in an idle queue pays for every part of its statement). When one has,
-- it claims nothing and returns a row of NULLs but for the state, 'expired', and the store
-- runs "claim". It names the partition of active jobs, which every row it takes stays in:
-- rota_jobs' statement trigger then does not fire, and "counted" writes the count deltas
-- that trigger would have (017): each row leaves pending and enters running.
{_fresh_candidates}, {_batch}, taken AS (
{_take_pending}
-- The states as in "claim", for its TID scan: the rows, locked pending, are pending still.
WHERE j.ctid = ANY(ARRAY(SELECT loc FROM batch)) AND (j.state = 'pending' OR j.state = 'running')
RETURNING {j.job_columns}
), {_counted}
{_taken_and_markers}
UNION ALL
{_walk_marker};

-- name: claim_all
-- "claim_fresh" when every due job fits in the batch, which is how a worker finds a queue it
-- keeps up with: the fair choice is then all of them, so there is no walk, quota or ranking,
-- and its plan is much smaller than "claim_fresh"'s (PostgreSQL sets up every node of a
-- plan on each call: for a claim of one job from an idle queue, that set-up is much of what
-- it costs). "few" reads the first take + 1 due jobs of every queue, by run_at, from
-- rota_jobs_pending_run_at, without locking them: at most that many entries, whatever waits
-- elsewhere or later. When it finds more than the batch takes, or an attempt that must run
-- alone among others, nothing is claimed and a row of NULLs but for its state, 'crowded',
-- says so: the store then runs "claim_fresh". Paused queues, limits and expired leases as
-- in "claim_fresh" (their markers too); each row taken is counted as there.
WITH {_unstale_queues}, few AS MATERIALIZED (
    SELECT j.ctid AS loc FROM rota_jobs_active j
    WHERE j.state = 'pending' AND j.attempt >= 0
      AND j.run_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY j.run_at
    LIMIT %(take)s + 1
), due AS MATERIALIZED (
    -- Found by tuple id (a row claimed or changed since "few" read it is checked again at
    -- its latest version when locked). Pending spelled as neither other active state, which
    -- no partial index's condition follows from: the TID scan is the only plan left.
    SELECT j.ctid AS loc, {alone_next} AS alone FROM rota_jobs_active j
    WHERE j.ctid = ANY(ARRAY(SELECT loc FROM few))
      AND {pending_among_active}
      AND j.queue IN (SELECT name FROM open_queues)
      AND j.run_at <= coalesce(%(now)s::timestamptz, now())
      AND (j.expires_at IS NULL OR j.expires_at > coalesce(%(now)s::timestamptz, now()))
      AND j.kind <> ALL(%(blocked_kinds)b::text[])
      AND (%(kinds)b::text[] IS NULL OR j.kind = ANY(%(kinds)b::text[]))
      AND coalesce(j.tenant, '') <> ALL(%(blocked_tenants)b::text[])
    FOR UPDATE SKIP LOCKED
), fits AS MATERIALIZED (
    SELECT (SELECT count(*) FROM few) <= %(take)s
           AND (count(*) <= 1 OR NOT coalesce(bool_or(alone), false)) AS ok
    FROM due
), taken AS (
{_take_pending}
WHERE j.ctid = ANY(ARRAY(SELECT loc FROM due WHERE (SELECT ok FROM fits)))
  AND (j.state = 'pending' OR j.state = 'running')
RETURNING {j.job_columns}
), {_counted}
{_taken_and_markers}
UNION ALL
SELECT {crowded_marker_columns} WHERE NOT (SELECT ok FROM fits);

-- name: _taken_and_markers
-- The rows "taken" leased, then a row of NULLs if a limit exists (the store claims under its
-- budget instead) and the marker row of "stale" (the store runs "claim" instead).
SELECT * FROM taken
UNION ALL
SELECT {null_job_columns} WHERE EXISTS (SELECT 1 FROM rota_limits)
UNION ALL
SELECT {expired_marker_columns} WHERE (SELECT found FROM stale)

-- name: _counted
-- The count deltas of the rows "taken" moved from pending to running (017), for a claim that
-- names rota_jobs_active and so fires none of rota_jobs' statement triggers.
counted AS (
    INSERT INTO rota_count_deltas (queue, kind, state, n)
    SELECT t.queue, t.kind, s.state, s.sign * t.n
    FROM (SELECT queue, kind, count(*) AS n FROM taken GROUP BY queue, kind) AS t
    CROSS JOIN (VALUES ('pending', -1), ('running', 1)) AS s(state, sign)
)

-- name: _batch
batch AS (
    -- An attempt that runs alone is claimed alone: first in line, it is the batch; further
    -- back, the batch ends just before it (rota.domain.flow.select).
    SELECT loc FROM chosen
    WHERE pos < coalesce((SELECT min(pos) FROM chosen WHERE alone), %(take)s + 1)
       OR (pos = 1 AND alone)
)

-- name: _walk_marker
SELECT {walk_marker_columns} FROM (
    SELECT CASE WHEN count(*) FILTER (WHERE tenant <= %(after)s) > 0
                THEN max(tenant) FILTER (WHERE tenant <= %(after)s)
                ELSE max(tenant) END AS last
    FROM groups
    HAVING count(*) >= %(max_groups)s
) AS g

-- name: claim_candidates
-- The limited path: candidates, locked until the transaction ends, for the store to choose
-- among under the limits' budget, each with its tuple id for claim_ids.
{_candidates}
SELECT j.id, j.kind, j.queue, j.tenant, j.priority, j.run_at, j.state, j.attempt,
       j.max_attempts, j.created_at, chosen.alone, chosen.loc::text
FROM chosen JOIN rota_jobs j ON j.id = chosen.id AND j.state IN ('pending', 'running')
ORDER BY chosen.pos;

-- name: claim_ids
-- The chosen candidates, where their locks found them (locked by this transaction since):
-- a TID scan under the claim's settings, as in "claim" (an id list with the states as an IN
-- list let a plan on statistics that said empty filter every pending job's index entry).
{_take}
WHERE j.ctid = ANY(%(locs)s::text[]::tid[]) AND (j.state = 'pending' OR j.state = 'running')
RETURNING {j.job_columns};

-- name: lock_limits
-- Serialises limited claims: concurrent claimers queue here, and each then counts what the
-- ones before it committed.
SELECT scope, key, concurrency, rate, period_us FROM rota_limits ORDER BY scope, key FOR UPDATE;

-- name: running_counts
SELECT queue, kind, tenant, count(*) FROM rota_jobs
WHERE state = 'running' AND lease_until >= coalesce(%(now)s::timestamptz, now())
GROUP BY queue, kind, tenant;

-- name: recent_starts
SELECT scope, key, starts FROM rota_limit_starts
WHERE starts[cardinality(starts)] > coalesce(%(now)s::timestamptz, now()) - %(period)s::interval;

-- name: record_starts
-- Append this claim's starts, keeping only as many as the largest rate can ever count.
INSERT INTO rota_limit_starts AS s (scope, key, starts)
SELECT x.scope, x.key, array_fill(coalesce(%(now)s::timestamptz, now()), ARRAY[x.n])
FROM unnest(%(scopes)b::text[], %(keys)b::text[], %(counts)b::int[]) AS x(scope, key, n)
ON CONFLICT (scope, key) DO UPDATE SET starts =
    (s.starts || excluded.starts)[greatest(1, cardinality(s.starts) + cardinality(excluded.starts) - 9999):];

-- name: pause_queue
INSERT INTO rota_queues (name, paused, updated_at)
VALUES (%(name)s, %(paused)s, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
RETURNING name, paused, updated_at;

-- name: list_queues
SELECT name, paused, updated_at FROM rota_queues ORDER BY name;

-- name: set_limit
INSERT INTO rota_limits (scope, key, concurrency, rate, period_us, updated_at)
VALUES (%(scope)s, %(key)s, %(concurrency)s, %(rate)s, %(period_us)s,
        coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (scope, key) DO UPDATE SET concurrency = excluded.concurrency,
    rate = excluded.rate, period_us = excluded.period_us, updated_at = excluded.updated_at;

-- name: delete_limit
DELETE FROM rota_limits WHERE scope = %(scope)s AND key = %(key)s RETURNING key;

-- name: list_limits
SELECT scope, key, concurrency, rate, period_us FROM rota_limits ORDER BY scope, key;

-- name: all_starts
SELECT scope, key, starts FROM rota_limit_starts;

-- name: running_by_tenant
SELECT tenant, count(*) FROM rota_jobs
WHERE state = 'running' AND tenant IS NOT NULL
  AND lease_until >= coalesce(%(now)s::timestamptz, now())
GROUP BY tenant ORDER BY tenant;

-- name: heartbeat
-- One statement renews all of a worker's leases; ids missing from the result are lost. The
-- store's clock comes back too: the worker measures its own clock against it. Each renewal
-- counts itself on the row (no index covers either column: 030).
WITH renewed AS (
    UPDATE rota_jobs j
    SET lease_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
        heartbeats = j.heartbeats + 1,
        last_heartbeat_at = coalesce(%(now)s::timestamptz, now())
    FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS l(id, token)
    WHERE j.id = l.id AND j.state = 'running' AND j.lease_token = l.token
    RETURNING j.id
)
SELECT coalesce(%(now)s::timestamptz, now()), array(SELECT id FROM renewed);

-- name: heartbeat_progress
-- The heartbeat when handlers reported progress: the same renewal, and each reported
-- progress written onto its row under the same fence (rows without a report keep theirs).
WITH renewed AS (
    UPDATE rota_jobs j
    SET lease_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
        heartbeats = j.heartbeats + 1,
        last_heartbeat_at = coalesce(%(now)s::timestamptz, now()),
        progress = CASE WHEN l.reported THEN l.fraction ELSE j.progress END,
        progress_message = CASE WHEN l.reported THEN l.message ELSE j.progress_message END
    FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(reported)b::boolean[],
                %(fractions)b::double precision[], %(messages)b::text[])
         AS l(id, token, reported, fraction, message)
    WHERE j.id = l.id AND j.state = 'running' AND j.lease_token = l.token
    RETURNING j.id
)
SELECT coalesce(%(now)s::timestamptz, now()), array(SELECT id FROM renewed);

-- name: begin
-- A crash suspect's handler starts: from now on an expiry of this lease counts against it.
UPDATE rota_jobs SET lease_started = true
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: complete
-- A whole batch of leases in one statement; every row still checks its own token, and its
-- result (JSON text, or NULL for none) is written only with its own success; a job that
-- succeeded has done all its work: its progress is 1, whatever it last reported.
WITH done AS (
    UPDATE rota_jobs j SET state = 'succeeded', lease_until = NULL,
                           finished_at = coalesce(%(now)s::timestamptz, now()),
                           result = l.result::json, progress = 1
    FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(results)b::text[])
         AS l(id, token, result)
    WHERE j.id = l.id AND j.state = 'running' AND j.lease_token = l.token
    RETURNING j.id, j.state, j.queue, j.kind, j.started_at, j.run_at AS due_at
), tally AS ({tally}), activity AS ({activity}), {finished}
SELECT id FROM done, told;

-- name: complete_apart
-- "complete" for a batch holding results longer than MAX_RESULT_BYTES: those go to
-- rota_results (025), each only for a job this statement succeeded, and the job's own result
-- stays NULL. A separate statement, so the usual batch pays nothing for it.
WITH done AS (
    UPDATE rota_jobs j SET state = 'succeeded', lease_until = NULL,
                           finished_at = coalesce(%(now)s::timestamptz, now()),
                           result = l.result::json, progress = 1
    FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(results)b::text[])
         AS l(id, token, result)
    WHERE j.id = l.id AND j.state = 'running' AND j.lease_token = l.token
    RETURNING j.id, j.state, j.queue, j.kind, j.started_at, j.run_at AS due_at
), apart AS (
    INSERT INTO rota_results (job_id, token, result)
    SELECT a.id, a.token, a.result::json
    FROM unnest(%(apart_ids)b::bigint[], %(apart_tokens)b::bigint[], %(apart)b::text[])
         AS a(id, token, result)
    WHERE a.id IN (SELECT id FROM done)
    ON CONFLICT (job_id) DO UPDATE SET token = excluded.token, result = excluded.result
), tally AS ({tally}), activity AS ({activity}), {finished}
SELECT id FROM done, told;

-- name: results_apart
-- The results kept in rota_results of these (succeeded) jobs, with the token that wrote them.
SELECT job_id, token, result FROM rota_results WHERE job_id = ANY(%(ids)b::bigint[]);

-- name: prune_results
-- Results whose job is gone (pruned, dropped with its day's table, deleted): rota_jobs is
-- partitioned, so no foreign key removes them. The table holds only long results.
DELETE FROM rota_results r WHERE NOT EXISTS (SELECT 1 FROM rota_jobs j WHERE j.id = r.job_id);

-- name: fail
-- The job's due time before this attempt (the wait the tallies count) is read under the same
-- fenced condition: a running job's run_at never changes, and this statement sets it anew.
WITH was AS (
    SELECT run_at AS due_at FROM rota_jobs
    WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
), done AS (
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
        {_beats}, 'outcome', 'failed', 'error', %(error)s::text, 'traceback', %(traceback)s::text))
FROM was
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id, state, queue, run_at, kind, started_at, was.due_at
), tally AS ({tally}), activity AS ({activity}), errors AS (
    INSERT INTO rota_error_minutes AS e (minute, queue, kind, fingerprint, sample, n)
    SELECT date_trunc('minute', coalesce(%(now)s::timestamptz, now())), queue, kind,
           %(fingerprint)s::text, %(sample)s::text, 1
    FROM done
    ON CONFLICT (minute, queue, kind, fingerprint) DO UPDATE SET
        n = e.n + 1, sample = excluded.sample
), {wake}, {finished}
SELECT state FROM done, woke, told;

-- name: give_back
-- Snooze and release: pending again at run_at, and the attempt does not count.
WITH done AS (
UPDATE rota_jobs SET
    state = 'pending',
    run_at = coalesce(%(now)s::timestamptz, now()) + %(delay)s::interval,
    attempt = attempt - 1,
    lease_until = NULL,
    history = coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'token', lease_token, 'worker', worker,
        'started_us', (extract(epoch FROM started_at) * 1000000)::bigint,
        'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
        {_beats}, 'outcome', %(outcome)s::text))
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id, state, queue, run_at
), {wake}
SELECT id FROM done, woke;

-- name: retry
-- The waits an earlier run left waiting are forgotten with the move: the new run waits afresh,
-- and no signal is delivered meanwhile to a wait nobody will read.
WITH done AS (
UPDATE rota_jobs SET state = CASE WHEN waiting_on > 0 THEN 'waiting' ELSE 'pending' END,
    run_at = coalesce(%(now)s::timestamptz, now()),
    attempt = 0, max_attempts = greatest(max_attempts, %(max_attempts)s::int),
    lease_until = NULL, finished_at = NULL
WHERE id = ANY(%(ids)b::bigint[]) AND {accepts:retry}
RETURNING {job_columns}
), reopened AS (
    DELETE FROM rota_steps WHERE job_id IN (SELECT id FROM done) AND state = 'waiting'
), {wake}
SELECT done.* FROM done, woke;

-- name: rerun
-- The succeeded attempt was described by the row itself: it joins the history before the
-- row starts a new attempt series, so every earlier attempt is kept. Waits left waiting are
-- forgotten, as by retry.
WITH done AS (
UPDATE rota_jobs SET state = 'pending', run_at = coalesce(%(now)s::timestamptz, now()),
    attempt = 0, lease_until = NULL, finished_at = NULL, last_error = NULL,
    history = coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'attempt', attempt, 'token', lease_token, 'worker', worker,
        'started_us', (extract(epoch FROM started_at) * 1000000)::bigint,
        'finished_us', (extract(epoch FROM finished_at) * 1000000)::bigint,
        {_beats}, 'outcome', 'succeeded'))
WHERE id = %(id)s AND {accepts:rerun}
RETURNING {job_columns}
), reopened AS (
    DELETE FROM rota_steps WHERE job_id IN (SELECT id FROM done) AND state = 'waiting'
), {wake}
SELECT done.* FROM done, woke;

-- name: _cancelling
-- What cancelling a job writes, for cancel and cancel_workflow alike: a running job's attempt
-- joins its history as cancelled.
UPDATE rota_jobs SET state = 'cancelled', lease_until = NULL,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    history = CASE WHEN state = 'running' THEN
        coalesce(history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
            'attempt', attempt, 'token', lease_token, 'worker', worker,
            'started_us', (extract(epoch FROM started_at) * 1000000)::bigint,
            'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
            {_beats}, 'outcome', 'cancelled'))
        ELSE history END

-- name: cancel
WITH done AS (
{_cancelling}
WHERE id = ANY(%(ids)b::bigint[]) AND {accepts:cancel}
RETURNING {job_columns}
), tally AS ({tally}), {finished}
SELECT done.* FROM done, told;

-- name: hold
-- Conditional on the job still being waiting or pending, as reschedule is: a claim that
-- locked the row first makes this wait, then find it running, so it is reported, never held.
-- The row stays in rota_jobs_active (028): no trigger of a move fires.
UPDATE rota_jobs SET state = 'held'
WHERE id = ANY(%(ids)b::bigint[]) AND {accepts:hold}
RETURNING {job_columns};

-- name: release_held
WITH done AS (
UPDATE rota_jobs SET state = CASE WHEN waiting_on > 0 THEN 'waiting' ELSE 'pending' END
WHERE id = ANY(%(ids)b::bigint[]) AND {accepts:release_held}
RETURNING {job_columns}
), {wake}
SELECT done.* FROM done, woke;

-- name: delete
-- A running job is never deleted: its worker would write to a row that is gone. The attempt
-- history lives in the row (history), so it goes with it.
DELETE FROM rota_jobs WHERE id = %(id)s AND {accepts:delete}
RETURNING {job_columns};

-- name: reschedule
-- Conditional on the job still being pending: a claim that locked the row first makes this
-- wait, then find it running (READ COMMITTED re-checks the WHERE on the new row version),
-- so a job claimed meanwhile is reported, never changed.
WITH done AS (
UPDATE rota_jobs SET
    run_at = CASE WHEN %(run_now)s THEN coalesce(%(now)s::timestamptz, now())
                  ELSE coalesce(%(run_at)s::timestamptz, run_at) END,
    priority = coalesce(%(priority)s::smallint, priority),
    queue = coalesce(%(queue)s::text, queue)
WHERE id = %(id)s AND {accepts:reschedule}
RETURNING {job_columns}
), {wake}
SELECT done.* FROM done, woke;

-- name: purge
DELETE FROM rota_jobs
WHERE id = ANY(%(ids)b::bigint[]) AND {accepts:purge}
RETURNING id;

-- name: get
SELECT {job_columns} FROM rota_jobs WHERE id = %(id)s;

-- name: expect_finished
-- Someone waits for these jobs: the statement that makes one terminal will NOTIFY. Only
-- active jobs get a row (finished ones have nothing left to announce), and the rows of jobs
-- pruned meanwhile go with them (prune), so the table never outgrows the jobs waited for.
INSERT INTO rota_result_waits (job_id)
SELECT id FROM rota_jobs
WHERE id = ANY(%(ids)b::bigint[]) AND state IN ({unfinished})
ON CONFLICT DO NOTHING;

-- name: get_many
SELECT {job_columns} FROM rota_jobs WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id;

-- name: state_of
SELECT state FROM rota_jobs WHERE id = %(id)s;

-- name: attempts
SELECT state, attempt, lease_token, worker, started_at, finished_at, history, heartbeats,
       last_heartbeat_at
FROM rota_jobs WHERE id = %(id)s;

-- name: rescue
-- Lock the expired rows and rewrite them in one statement, each only if it still carries the
-- token observed: a rescue can never overwrite a job that completed or was re-claimed. Each
-- is settled by the blame rule: dead, or pending with its attempt counted or given back. A job
-- back to pending keeps its run_at, so its place in the claim order: as when a claim takes the
-- expired lease over itself, it goes ahead of the jobs that fell due after it, not behind them.
WITH expired AS MATERIALIZED (
    SELECT id, lease_token FROM rota_jobs
    WHERE state = 'running' AND lease_until < coalesce(%(now)s::timestamptz, now())
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), done AS (
UPDATE rota_jobs j SET
    state = CASE WHEN {expiry_dead} THEN 'dead' ELSE 'pending' END,
    finished_at = CASE WHEN {expiry_dead} THEN coalesce(%(now)s::timestamptz, now()) END,
    lease_until = NULL,
    attempt = j.attempt - CASE WHEN {expiry_given_back} THEN 1 ELSE 0 END,
    crashes = {expiry_crashes},
    last_error = {expiry_error},
    history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'token', j.lease_token, 'worker', j.worker,
        'started_us', (extract(epoch FROM j.started_at) * 1000000)::bigint,
        'finished_us', (extract(epoch FROM coalesce(%(now)s::timestamptz, now())) * 1000000)::bigint,
        {_beats},
        'lease_until_us', (extract(epoch FROM j.lease_until) * 1000000)::bigint,
        'outcome', 'lease_expired', 'error', {expiry_error}))
FROM expired
WHERE j.id = expired.id AND j.state = 'running' AND j.lease_token = expired.lease_token
RETURNING j.id, j.state, j.queue, j.run_at
), tally AS ({tally}), {wake}, {finished}
SELECT id, state FROM done, woke, told;

-- name: expire
-- Pending jobs past their expires_at, by its partial index: cancelled, never started.
WITH expiring AS MATERIALIZED (
    SELECT id FROM rota_jobs
    WHERE {accepts:expire} AND expires_at IS NOT NULL
      AND expires_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), done AS (
UPDATE rota_jobs j SET state = 'cancelled', finished_at = coalesce(%(now)s::timestamptz, now()),
    last_error = %(reason)s
FROM expiring
WHERE j.id = expiring.id AND {j.accepts:expire}
RETURNING j.id, j.state
), tally AS ({tally}), {finished}
SELECT id FROM done, told;

-- name: end_unrunnable
-- Pending jobs due for longer than the grace whose queue has live workers, all of which listed
-- their kinds and none the job's: dead. A scan of each served queue's due jobs (the kind is not
-- indexed), so the rescuer runs it seldom (Rescuer: about once a minute).
WITH live AS MATERIALIZED (
    SELECT unnest(queues) AS queue, kinds FROM rota_workers WHERE beat_at >= %(alive_since)s
), served AS MATERIALIZED (
    SELECT queue, array_agg(DISTINCT k.kind) FILTER (WHERE k.kind IS NOT NULL) AS kinds
    FROM live LEFT JOIN LATERAL unnest(live.kinds) AS k(kind) ON true
    GROUP BY queue HAVING bool_and(live.kinds IS NOT NULL)
), doomed AS MATERIALIZED (
    SELECT d.id FROM served s
    CROSS JOIN LATERAL (
        SELECT j.id FROM rota_jobs j
        WHERE {j.accepts:end_unrunnable} AND j.queue = s.queue AND j.run_at <= %(due_before)s
          AND j.kind <> ALL(coalesce(s.kinds, '{}'::text[]))
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS d
    LIMIT %(limit)s
), done AS (
UPDATE rota_jobs j SET state = 'dead', finished_at = coalesce(%(now)s::timestamptz, now()),
    last_error = replace(%(reason)s, '{kind}', j.kind)
FROM doomed
WHERE j.id = doomed.id AND {j.accepts:end_unrunnable}
RETURNING j.id, j.state
), tally AS ({tally}), {finished}
SELECT id FROM done, told;

-- name: finished_leaves
-- The tables of finished jobs (019_finished_by_day): days, an upgraded table, the default.
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'rota_jobs_finished'::regclass;

-- name: add_days
-- The days ahead of today, made by one caller at a time (others skip: the next call makes
-- what they would have). A lock that waits long for readers of the default partition gives
-- up and the next call tries again.
SELECT CASE WHEN pg_try_advisory_xact_lock(hashtextextended('rota_jobs_add_days', 0))
            THEN rota_jobs_add_days(%(ahead)s) END
FROM (SELECT set_config('lock_timeout', '1s', true)) AS limited;

-- name: active_dead_rows
-- The active jobs' dead and live row versions, as the server's statistics count them.
SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables
WHERE relid = 'rota_jobs_active'::regclass;

-- name: analyze_active
-- The active jobs' statistics, analysed if stale (019's rota_jobs_analyze_active).
SELECT rota_jobs_analyze_active(%(floor)s, %(factor)s);

-- name: prune_rows
-- Finished jobs kept outside the day tables ({leaf}: the default partition, an upgraded
-- table), oldest ids first, at most %(limit)s. The per-minute tally says whether any job
-- finished before the cutoff at all: while none did, the scan does not run. The ids go in as an array,
-- so the rows are deleted by id: "id IN (subquery)" let the planner hash the batch and read
-- the whole table for it, every pass. Through rota_jobs, whose triggers count the rows out
-- and settle the workflows they belonged to.
WITH gone AS (
    DELETE FROM rota_jobs WHERE id = ANY(ARRAY(
        SELECT id FROM {leaf}
        WHERE EXISTS (SELECT 1 FROM rota_finished_per_minute WHERE minute < %(older_than)s)
          AND finished_at < %(older_than)s
        ORDER BY state, id
        LIMIT %(limit)s
    )) AND state IN ('succeeded', 'dead', 'cancelled') AND finished_at < %(older_than)s
    RETURNING id
), gone_waits AS (
    -- A wait recorded as its job finished (so never consumed) goes with the job.
    DELETE FROM rota_result_waits WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone;

-- name: prune_tally
-- Tally minutes older than the cutoff, once a pass came up short (their jobs are gone); the
-- activity tallies of those minutes (029) go with them.
WITH activity AS (
    DELETE FROM rota_activity WHERE minute < %(older_than)s - interval '1 minute'
), errors AS (
    DELETE FROM rota_error_minutes WHERE minute < %(older_than)s - interval '1 minute'
)
DELETE FROM rota_finished_per_minute WHERE minute < %(older_than)s - interval '1 minute';

-- name: drop_day
-- A day's table of finished jobs, dropped whole (019's rota_jobs_drop_day): how many jobs
-- went, or NULL when it skipped or gave up, having changed nothing.
SELECT rota_jobs_drop_day(%(leaf)s, %(day_start)s, %(day_end)s, %(older_than)s);

-- name: count_jobs
SELECT count(*) FROM (SELECT 1 FROM rota_jobs WHERE {where} LIMIT {limit}) AS capped;

-- name: throughput
SELECT minute, state, n FROM rota_finished_per_minute
WHERE minute >= date_trunc('minute', %(since)s::timestamptz)
  AND minute < coalesce(%(now)s::timestamptz, now());

-- name: activity
-- A queue's or kind's activity ({filter}: by one, both or neither) per slot of %(width_s)s
-- seconds from %(since)s, by duration bucket (029_activity), through the index of the filter.
SELECT floor(extract(epoch FROM minute - %(since)s::timestamptz) / %(width_s)s)::int AS slot,
       bucket, sum(succeeded)::bigint, sum(failed)::bigint, sum(dead)::bigint,
       sum(waited)::bigint
FROM rota_activity
WHERE minute >= %(since)s::timestamptz AND minute < %(now)s::timestamptz {filter}
GROUP BY slot, bucket;

-- name: top_errors
-- The most frequent error fingerprints of the window ({filter} as for "activity"), with the
-- latest minute's sample.
SELECT fingerprint, sum(n)::bigint AS total, max(minute),
       (array_agg(sample ORDER BY minute DESC))[1]
FROM rota_error_minutes
WHERE minute >= %(since)s::timestamptz AND minute < %(now)s::timestamptz {filter}
GROUP BY fingerprint ORDER BY total DESC, fingerprint
LIMIT %(limit)s;

-- name: counts
-- The maintained counts (017_counts): folded totals plus the deltas not folded yet, summed in
-- one snapshot; the last column says how many deltas wait to be folded.
SELECT queue, state, sum(n)::bigint, (SELECT count(*) FROM rota_count_deltas) FROM (
    SELECT queue, state, n FROM rota_counts
    UNION ALL
    SELECT queue, state, n FROM rota_count_deltas
) AS c
GROUP BY queue, state HAVING sum(n) <> 0;

-- name: fold_counts
-- The committed deltas into the totals, by one folder at a time (others skip: the next fold
-- takes what they would have); deltas of transactions still open are not visible, so stay.
WITH turn AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtextextended('rota_counts', 0)) AS mine
), moved AS (
    DELETE FROM rota_count_deltas WHERE (SELECT mine FROM turn)
    RETURNING queue, kind, state, n
), folded AS (
    INSERT INTO rota_counts (queue, kind, state, n)
    SELECT queue, kind, state, sum(n) FROM moved GROUP BY queue, kind, state
    ON CONFLICT (queue, kind, state) DO UPDATE SET n = rota_counts.n + excluded.n
    RETURNING 1
)
SELECT count(*) FROM folded;

-- name: drop_zero_counts
-- Keys whose jobs are all gone (a queue no longer used), after a fold. A fold that meets a
-- row being dropped waits for the drop, then inserts it anew.
DELETE FROM rota_counts WHERE n = 0;

-- name: oldest_due
-- The first entry of rota_jobs_pending_run_at, not a pass over every pending job: its
-- predicate (018) needs "attempt >= 0", which holds for every row and no claim states.
SELECT run_at FROM rota_jobs
WHERE state = 'pending' AND attempt >= 0 AND run_at <= coalesce(%(now)s::timestamptz, now())
ORDER BY run_at LIMIT 1;

-- name: register_worker
INSERT INTO rota_workers (name, host, pid, queues, concurrency, started_at, beat_at, kinds,
                          heartbeat_seconds)
VALUES (%(name)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()),
        %(kinds)b::text[], %(heartbeat_seconds)s::double precision)
ON CONFLICT (name) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    queues = excluded.queues, concurrency = excluded.concurrency,
    started_at = excluded.started_at, beat_at = excluded.beat_at, kinds = excluded.kinds,
    heartbeat_seconds = excluded.heartbeat_seconds;

-- name: beat_worker
UPDATE rota_workers SET beat_at = coalesce(%(now)s::timestamptz, now()) WHERE name = %(name)s
RETURNING name;

-- name: deregister_worker
DELETE FROM rota_workers WHERE name = %(name)s;

-- name: list_workers
SELECT w.name, w.host, w.pid, w.queues, w.concurrency, w.started_at, w.beat_at,
       (SELECT count(*) FROM rota_jobs j WHERE j.state = 'running' AND j.worker = w.name),
       w.kinds, w.heartbeat_seconds
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
    workflow, paused, next_run_at, due_at, last_run_at, last_job_id, created_at, updated_at)
VALUES (%(name)s, %(kind)s, %(payload)s::json, %(queue)s, %(priority)s, %(tenant)s,
    %(max_attempts)s, %(every_us)s, %(cron)s, %(timezone)s, %(anchor)s, %(jitter_us)s,
    %(misfire)s, %(misfire_limit)s, %(grace_us)s, %(overlap)s, %(workflow)s, %(paused)s,
    %(next_run_at)s, %(due_at)s, %(last_run_at)s, %(last_job_id)s, %(created_at)s,
    %(updated_at)s)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: update_schedule
UPDATE rota_schedules SET kind = %(kind)s, payload = %(payload)s::json, queue = %(queue)s,
    priority = %(priority)s, tenant = %(tenant)s, max_attempts = %(max_attempts)s,
    every_us = %(every_us)s, cron = %(cron)s, timezone = %(timezone)s, anchor = %(anchor)s,
    jitter_us = %(jitter_us)s, misfire = %(misfire)s, misfire_limit = %(misfire_limit)s,
    grace_us = %(grace_us)s, overlap = %(overlap)s, workflow = %(workflow)s,
    next_run_at = %(next_run_at)s,
    due_at = %(due_at)s, updated_at = %(updated_at)s
WHERE name = %(name)s;

-- name: _schedule_rows
-- A batch of schedule records as rows r (upsert_schedules), one array a column.
unnest(%(name)b::text[], %(kind)b::text[], %(payload)b::text[], %(queue)b::text[],
       %(priority)b::int2[], %(tenant)b::text[], %(max_attempts)b::int4[],
       %(every_us)b::int8[], %(cron)b::text[], %(timezone)b::text[],
       %(anchor)b::timestamptz[], %(jitter_us)b::int8[], %(misfire)b::text[],
       %(misfire_limit)b::int4[], %(grace_us)b::int8[], %(overlap)b::text[],
       %(workflow)b::bool[], %(paused)b::bool[], %(next_run_at)b::timestamptz[],
       %(due_at)b::timestamptz[], %(last_run_at)b::timestamptz[], %(last_job_id)b::int8[],
       %(created_at)b::timestamptz[], %(updated_at)b::timestamptz[])
    AS r(name, kind, payload, queue, priority, tenant, max_attempts, every_us, cron, timezone,
         anchor, jitter_us, misfire, misfire_limit, grace_us, overlap, workflow, paused,
         next_run_at, due_at, last_run_at, last_job_id, created_at, updated_at)

-- name: lock_schedule_batches
-- Batches of upserts take turns (a transaction lock, released on commit): each then locks
-- its existing rows in name order and inserts the rest, so two batches never wait on each
-- other's rows. A single upsert locks one row and waits on nothing after it.
SELECT pg_advisory_xact_lock(hashtext('rota_schedules'));

-- name: schedules_for_update
-- The stored ones of a batch's names, locked in name order (upsert_schedules).
SELECT {schedule_columns}
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
WHERE s.name = ANY(%(names)b::text[])
ORDER BY s.name
FOR UPDATE OF s;

-- name: insert_schedules
-- DO NOTHING: a schedule created meanwhile by a single upsert wins; the batch then locks it.
INSERT INTO rota_schedules (name, kind, payload, queue, priority, tenant, max_attempts,
    every_us, cron, timezone, anchor, jitter_us, misfire, misfire_limit, grace_us, overlap,
    workflow, paused, next_run_at, due_at, last_run_at, last_job_id, created_at, updated_at)
SELECT name, kind, payload::json, queue, priority, tenant, max_attempts, every_us, cron,
    timezone, anchor, jitter_us, misfire, misfire_limit, grace_us, overlap, workflow, paused,
    next_run_at, due_at, last_run_at, last_job_id, created_at, updated_at
FROM {_schedule_rows}
ORDER BY name
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: update_schedules
-- The batch's stored rows, locked (schedules_for_update), as update_schedule writes one.
UPDATE rota_schedules s SET kind = r.kind, payload = r.payload::json, queue = r.queue,
    priority = r.priority, tenant = r.tenant, max_attempts = r.max_attempts,
    every_us = r.every_us, cron = r.cron, timezone = r.timezone, anchor = r.anchor,
    jitter_us = r.jitter_us, misfire = r.misfire, misfire_limit = r.misfire_limit,
    grace_us = r.grace_us, overlap = r.overlap, workflow = r.workflow,
    next_run_at = r.next_run_at, due_at = r.due_at, updated_at = r.updated_at
FROM {_schedule_rows}
WHERE s.name = r.name;

-- name: get_schedule
SELECT {schedule_columns}
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
WHERE s.name = %(name)s;

-- name: list_schedules
-- A keyset page by name in code-point order (COLLATE "C"), as SQLite and memory sort.
SELECT {schedule_columns}
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
WHERE %(after)s::text IS NULL OR s.name COLLATE "C" > %(after)s::text
ORDER BY s.name COLLATE "C"
LIMIT %(limit)s::bigint;

-- name: list_due_schedules
SELECT {schedule_columns}
FROM rota_schedules s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
WHERE NOT s.paused
ORDER BY s.due_at, s.name COLLATE "C"
LIMIT %(limit)s::bigint;

-- name: pause_schedule
WITH s AS (
    UPDATE rota_schedules SET paused = true, missed = %(missed)s,
        updated_at = coalesce(%(now)s::timestamptz, now())
    WHERE name = %(name)s
    RETURNING *
)
SELECT {schedule_columns} FROM s LEFT JOIN rota_jobs j ON j.id = s.last_job_id;

-- name: resume_schedule
-- The row is locked (schedule_for_update) and its next slot worked out by
-- rota.domain.schedule_state.resumed.
UPDATE rota_schedules SET paused = false, next_run_at = %(next_run_at)s, due_at = %(due_at)s,
    updated_at = %(now)s
WHERE name = %(name)s;

-- name: delete_schedule
DELETE FROM rota_schedules WHERE name = %(name)s RETURNING name;

-- name: set_schedule_last_job
UPDATE rota_schedules SET last_job_id = %(job_id)s WHERE name = %(name)s;

-- name: due_schedules
-- Lock the due rows; SKIP LOCKED lets concurrent firers take other schedules instead of
-- queueing behind this one, and makes each due schedule fire in exactly one transaction.
-- A workflow schedule only where this firer knows its builder (the names in %(workflows)b).
-- The batch is picked and locked first, then joined to its last jobs: a batch looks up its
-- own schedules' last jobs only, however many schedules are due.
WITH s AS MATERIALIZED (
    SELECT * FROM rota_schedules
    WHERE NOT paused AND due_at <= coalesce(%(now)s::timestamptz, now())
      AND (NOT workflow OR name = ANY(%(workflows)b::text[]))
    ORDER BY due_at, name
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
SELECT {schedule_columns}, coalesce(%(now)s::timestamptz, now())
FROM s LEFT JOIN rota_jobs j ON j.id = s.last_job_id
ORDER BY s.due_at, s.name;

-- name: advance_schedules
-- Runs in the transaction that locked the rows (due_schedules) and inserted their jobs.
UPDATE rota_schedules s SET next_run_at = a.next_run_at, due_at = a.due_at,
    last_run_at = a.last_run_at, last_job_id = a.last_job_id
FROM unnest(%(names)b::text[], %(next_run_at)b::timestamptz[], %(due_at)b::timestamptz[],
            %(last_run_at)b::timestamptz[], %(last_job_id)b::bigint[])
     AS a(name, next_run_at, due_at, last_run_at, last_job_id)
WHERE s.name = a.name;

-- name: next_fire_at
SELECT min(due_at) FROM rota_schedules
WHERE NOT paused AND (NOT workflow OR name = ANY(%(workflows)b::text[]));

-- name: workflow_parents
-- The existing parents of a graph being written, locked (in id order, so two writers cannot
-- deadlock): a parent that finishes meanwhile waits for this transaction, and its trigger
-- then sees the new edges.
SELECT id, state, workflow FROM rota_jobs WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id FOR UPDATE;

-- name: workflow_reserve_ids
SELECT array(SELECT nextval('rota_jobs_id_seq'::regclass)
             FROM generate_series(1, %(count)s));

-- name: workflow_adopt
UPDATE rota_jobs SET workflow = %(workflow)s WHERE id = ANY(%(ids)b::bigint[]) AND workflow IS NULL;

-- name: workflow_insert
-- A graph's jobs in their planned states (rota.domain.workflow.plan), with ids reserved first.
-- A scheduled graph's first job holds its slot (schedule, slot_at).
INSERT INTO rota_jobs (id, kind, queue, payload, state, priority, run_at, max_attempts, tenant,
                       timeout_us, created_at, trace_context, workflow, waiting_on, blocked_by,
                       last_error, finished_at, schedule, slot_at)
SELECT i.id, i.kind, i.queue, i.payload::json, i.state, i.priority,
       coalesce(i.run_at, coalesce(%(now)s::timestamptz, now()) + i.delay_us * interval '1 microsecond'),
       i.max_attempts, i.tenant, i.timeout_us, coalesce(%(now)s::timestamptz, now()),
       i.trace_context::json, %(workflow)s, i.waiting_on, i.blocked_by, i.last_error,
       CASE WHEN i.state = 'cancelled' THEN coalesce(%(now)s::timestamptz, now()) END,
       i.schedule, i.slot_at
FROM unnest(%(id)b::bigint[], %(kind)b::text[], %(queue)b::text[], %(payload)b::text[],
            %(state)b::text[], %(priority)b::smallint[], %(run_at)b::timestamptz[],
            %(delay_us)b::bigint[], %(max_attempts)b::int[], %(tenant)b::text[],
            %(timeout_us)b::bigint[], %(trace_context)b::text[], %(waiting_on)b::int[],
            %(blocked_by)b::bigint[], %(last_error)b::text[], %(schedule)b::text[],
            %(slot_at)b::timestamptz[])
     AS i(id, kind, queue, payload, state, priority, run_at, delay_us, max_attempts, tenant,
          timeout_us, trace_context, waiting_on, blocked_by, last_error, schedule, slot_at)
ORDER BY i.id
RETURNING {job_columns};

-- name: workflow_edges_insert
INSERT INTO rota_job_deps (parent_id, child_id, on_parent_failure, satisfied)
SELECT * FROM unnest(%(parent)b::bigint[], %(child)b::bigint[], %(policy)b::text[],
                     %(satisfied)b::boolean[]);

-- name: parent_results
SELECT p.id, coalesce(p.result, (SELECT r.result FROM rota_results r
                                 WHERE r.job_id = p.id AND r.token = p.lease_token))
FROM rota_job_deps d JOIN rota_jobs p ON p.id = d.parent_id
WHERE d.child_id = %(id)s;

-- name: workflow_jobs
SELECT {job_columns} FROM rota_jobs WHERE workflow = %(workflow)s ORDER BY id;

-- name: workflow_edges_into
-- The edges into the jobs with ids in [first, last] of a workflow (one page of its jobs), at
-- most "limit": a job with 10,000 parents does not make the page 10,000 edges long.
SELECT d.parent_id, d.child_id, d.on_parent_failure
FROM rota_jobs c JOIN rota_job_deps d ON d.child_id = c.id JOIN rota_jobs p ON p.id = d.parent_id
WHERE c.workflow = %(workflow)s AND c.id BETWEEN %(first)s AND %(last)s
  AND p.workflow = %(workflow)s
ORDER BY d.child_id, d.parent_id LIMIT %(limit)s;

-- name: workflow_states
SELECT state, count(*) FROM rota_jobs WHERE workflow = %(workflow)s GROUP BY state;

-- name: parents_of
-- A page of a job's parents by id: each with its state and the edge's policy.
SELECT d.parent_id, p.state, d.on_parent_failure
FROM rota_job_deps d JOIN rota_jobs p ON p.id = d.parent_id
WHERE d.child_id = %(id)s AND d.parent_id > %(after)s
ORDER BY d.parent_id LIMIT %(limit)s;

-- name: children_of
SELECT d.child_id, c.state, d.on_parent_failure
FROM rota_job_deps d JOIN rota_jobs c ON c.id = d.child_id
WHERE d.parent_id = %(id)s AND d.child_id > %(after)s
ORDER BY d.child_id LIMIT %(limit)s;

-- name: workflow_edges
SELECT d.parent_id, d.child_id, d.on_parent_failure
FROM rota_jobs c JOIN rota_job_deps d ON d.child_id = c.id JOIN rota_jobs p ON p.id = d.parent_id
WHERE c.workflow = %(workflow)s AND p.workflow = %(workflow)s
ORDER BY d.child_id, d.parent_id;

-- name: cancel_workflow
-- Every unfinished job of a workflow, as the cancel statement does for one job; the trigger
-- of 012_workflows finds nothing left to cancel below them.
WITH done AS (
{_cancelling}
WHERE id IN (SELECT id FROM rota_jobs WHERE workflow = %(workflow)s
               AND state IN ({unfinished}) ORDER BY id FOR UPDATE)
  AND state IN ({unfinished})
RETURNING id, state
), tally AS ({tally}), {finished}
SELECT count(*) FROM done, told;

-- name: record_audit
INSERT INTO rota_audit (at, identity, action, target, job_filter, detail, touched)
VALUES (coalesce(%(now)s::timestamptz, now()), %(identity)s, %(action)s, %(target)s,
        %(filter)s::jsonb, %(detail)s::jsonb, %(count)s)
RETURNING id, at, identity, action, target, job_filter, detail, touched;

-- name: list_audit
-- Newest first by keyset on the primary key; a NULL parameter leaves its column unfiltered.
SELECT id, at, identity, action, target, job_filter, detail, touched FROM rota_audit
WHERE (%(after)s::bigint IS NULL OR id < %(after)s)
  AND (%(action)s::text IS NULL OR action = %(action)s)
  AND (%(identity)s::text IS NULL OR identity = %(identity)s)
  AND (%(target)s::text IS NULL OR target = %(target)s)
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR at < %(until)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: prune_audit
-- Oldest first, at most %(limit)s, from the index on "at".
DELETE FROM rota_audit WHERE id IN (
    SELECT id FROM rota_audit WHERE at < %(older_than)s ORDER BY at, id LIMIT %(limit)s
);
