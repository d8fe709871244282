"""The SQLite store: rota's embedded default, one database file shared by local processes.

::

    store.py        SqliteStore: the Store verbs, each one transaction
    admin.py        its verbs for flow control, workers, the audit log and schedules
    connection.py   the connection and its thread: pragmas, BEGIN IMMEDIATE, busy retries
    claims.py       claim and every fenced write after it; rescue
    candidates.py   what a claim chooses among: a walk over (queue, tenant, priority, kind)
    flow.py         paused queues, limits, and the running counts and starts budgets start from
    jobs.py         enqueue, operator verbs, expiry, prune
    reads.py        one job, a page by filter, counts and estimates, throughput, attempts
    workers.py      the workers registry
    rows.py         rows <-> domain objects; instants as integer microseconds
    url.py          what a sqlite:///path.db URL means
    migrations/     the schema as versioned NNN_name.sql files
"""

from rota.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
