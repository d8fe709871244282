"""Migrating a database from synchronous test code."""

from __future__ import annotations

import asyncio

from rota.store import open_store


def migrate_url(url: str) -> list[str]:
    async def run() -> list[str]:
        store = open_store(url)
        try:
            return await store.migrate()
        finally:
            await store.close()

    return asyncio.run(run())
