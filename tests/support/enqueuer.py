"""An enqueuing host: ``python -m tests.support.enqueuer COUNT BATCH IDS_FILE SEED``.

Enqueues COUNT chaosapp ``work`` jobs through the library (``App.enqueue_many``, BATCH at a
time) on ``ROTA_DATABASE_URL``, and appends the ids of each batch to IDS_FILE once the batch
is acknowledged (one ``write(2)`` per batch, so a line is either there whole or not at all).
Payloads come from SEED: sleeps of U(0, 20 ms), one job in twenty failing its first attempt.
Exits 0 when every batch was acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

import rota


async def enqueue(count: int, batch: int, ids_file: str, seed: int) -> None:
    rng = random.Random(seed)
    descriptor = os.open(ids_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        async with rota.App(os.environ["ROTA_DATABASE_URL"]) as app:
            for start in range(0, count, batch):
                specs = [
                    app.spec(
                        "work",
                        {"s": round(rng.uniform(0, 0.02), 4), "fail": rng.random() < 0.05},
                        max_attempts=10,
                    )
                    for _ in range(min(batch, count - start))
                ]
                results = await app.enqueue_many(specs)
                line = " ".join(str(result.job.id) for result in results) + "\n"
                os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


def acknowledged(ids_file: str) -> list[int]:
    """Every id the enqueuer wrote to ``ids_file`` (whole lines only)."""
    try:
        with open(ids_file) as handle:
            text = handle.read()
    except FileNotFoundError:
        return []
    lines = text.splitlines(keepends=True)
    return [int(word) for line in lines if line.endswith("\n") for word in line.split()]


if __name__ == "__main__":
    total, size, path, salt = sys.argv[1:5]
    asyncio.run(enqueue(int(total), int(size), path, int(salt)))
