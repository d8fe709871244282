"""The supervisor's pure parts: settings passed to children, metrics summed, the app found."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client import generate_latest

import rota
from rota.domain.errors import InvalidInput
from rota.observability.fleet import merge
from rota.runtime.supervisor import child_environment
from rota.verbs.workers import app_reference

#: Found by app_reference: a module-level App of an importable module.
module_app = rota.App("sqlite:///unused.db")

CHILD = """\
# HELP rota_claims_total Claim attempts.
# TYPE rota_claims_total counter
rota_claims_total{{result="claimed"}} {claims}
# HELP rota_claims_created Claim attempts.
# TYPE rota_claims_created gauge
rota_claims_created{{result="claimed"}} 1.7e9
# HELP rota_store_clock_rate_ratio Clock rate.
# TYPE rota_store_clock_rate_ratio gauge
rota_store_clock_rate_ratio {rate}
# HELP rota_job_duration_seconds Run time.
# TYPE rota_job_duration_seconds histogram
rota_job_duration_seconds_bucket{{kind="a",le="1.0"}} {claims}
rota_job_duration_seconds_bucket{{kind="a",le="+Inf"}} {claims}
rota_job_duration_seconds_count{{kind="a"}} {claims}
rota_job_duration_seconds_sum{{kind="a"}} 0.5
"""


def test_child_environment_carries_every_setting_as_its_cli_variable() -> None:
    env = child_environment(
        {
            "name": "ignored",
            "queues": ["a", "b"],
            "concurrency": 4,
            "lease": timedelta(seconds=2),
            "heartbeat": 0.5,
            "poll": None,
            "retention": "off",
        }
    )
    assert env == {
        "ROTA_QUEUES": "a,b",
        "ROTA_CONCURRENCY": "4",
        "ROTA_LEASE_SECONDS": "2.0",
        "ROTA_HEARTBEAT_SECONDS": "0.5",
        "ROTA_RETENTION": "off",
    }


def test_merged_metrics_sum_counters_and_histograms_and_take_the_highest_clock_rate() -> None:
    merged = merge([CHILD.format(claims=3, rate=1.0), CHILD.format(claims=4, rate=1.25)])

    class Registry:
        def collect(self) -> list[object]:
            return list(merged)

    text = generate_latest(Registry()).decode()  # type: ignore[arg-type]
    assert 'rota_claims_total{result="claimed"} 7.0' in text
    assert 'rota_job_duration_seconds_bucket{kind="a",le="+Inf"} 7.0' in text
    assert 'rota_job_duration_seconds_sum{kind="a"} 1.0' in text
    assert "rota_store_clock_rate_ratio 1.25" in text
    assert "_created" not in text


def test_app_reference_finds_a_module_level_app_and_refuses_a_local_one() -> None:
    assert app_reference(module_app) == f"{__name__}:module_app"
    with pytest.raises(InvalidInput, match="module level"):
        app_reference(rota.App("memory://"))


async def test_worker_processes_refuse_a_memory_store() -> None:
    app = rota.App("memory://")
    with pytest.raises(InvalidInput, match="one process"):
        await app.run_worker(processes=2, app_ref="x:app")
