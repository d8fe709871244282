"""Durable jobs of 10 steps beside DBOS (``bench.durable``), in the same run as the rest:
rota's figure goes into the results table, DBOS's (a peer of durable steps, not of the queue
scenarios' columns) beside it in the notes, with the ratio run by run."""

from __future__ import annotations

import importlib.util
import statistics

from bench.durable import measure_all
from bench.harness import Bench, Skip

NAME = "durable"
TITLE = "Durable jobs of 10 steps, beside DBOS"
METRIC = "10-step durable jobs, 1 process"


async def run(bench: Bench) -> None:
    if "rota" not in bench.settings.systems:
        raise Skip("rota is not among the systems measured")
    if importlib.util.find_spec("dbos") is None:
        raise Skip("dbos is not installed (make setup-bench)")
    count = bench.settings.size(2_000, 200)
    rates = await measure_all(bench.settings, ["rota", "dbos"], count, bench.runs)
    for value in rates["rota"]:
        bench.record(NAME, METRIC, "rota", value, unit="jobs/s", note=f"{count:,} jobs")
    theirs = rates["dbos"]
    ratios = [a / b for a, b in zip(rates["rota"], theirs, strict=False)]
    bench.note(
        NAME,
        f"DBOS (queue and steps at its documented defaults) ran "
        f"{statistics.median(theirs):,.0f} ({min(theirs):,.0f}-{max(theirs):,.0f}) 10-step "
        f"jobs/s in the same runs; rota / DBOS run by run {statistics.median(ratios):.1f}x "
        f"({min(ratios):.1f}-{max(ratios):.1f}), goal at least 2x",
    )
