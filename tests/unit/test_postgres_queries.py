"""The named statements of the PostgreSQL store: fragments shared where two statements must
write the same thing."""

from __future__ import annotations

from rota.store.postgres.queries import queries, query


def test_cancel_and_cancel_workflow_write_one_shared_set_clause() -> None:
    shared = queries()["_cancelling"]
    assert "state = 'cancelled'" in shared
    for name in ("cancel", "cancel_workflow"):
        assert shared in query(name)
        assert "{_cancelling}" not in query(name)
        assert query(name).count("state = 'cancelled'") == 1
