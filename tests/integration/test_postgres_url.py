"""The PostgreSQL URL: rota's own options are taken out, libpq's reach the server intact."""

from __future__ import annotations

import pytest

from rota.domain.errors import InvalidInput
from rota.store.postgres.store import PostgresStore

pytestmark = pytest.mark.postgres


def _with(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


async def test_libpq_options_with_spaces_reach_the_server(pg_url: str) -> None:
    # "-c statement_timeout=12345": a space, which a "+" in the URL would not carry.
    store = PostgresStore.from_url(
        _with(pg_url, "options=-c%20statement_timeout%3D12345&pool_max=2")
    )
    try:
        async with store._connection() as conn:
            cursor = await conn.execute("SHOW statement_timeout")
            assert await cursor.fetchone() == ("12345ms",)
    finally:
        await store.close()


@pytest.mark.parametrize("query", ["pool_max=0", "pool_min=3&pool_max=2", "pool_max=many"])
def test_bad_pool_sizes_are_refused(pg_url: str, query: str) -> None:
    with pytest.raises(InvalidInput):
        PostgresStore.from_url(_with(pg_url, query))
