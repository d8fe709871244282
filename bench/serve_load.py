"""`rota serve` under API load (C10, docs/decisions/0004): /healthz latency and lease safety.

3,000 schedules with sparse cron rules (leap days, new year, month ends, in zones with DST) on
an embedded SQLite file; `rota serve` with the demo's timing (lease 3 s, heartbeat 1 s) and a
`hold` kind whose handler runs 20 s; 20 clients page through /api/schedules without pause for
30 s while a probe asks /healthz every 50 ms. Prints the /healthz latency percentiles (target:
at most 100 ms throughout), the schedule pages served, and the hold job's attempts (one means
it kept its lease).

    python -m bench.serve_load [--seconds 30] [--clients 20] [--schedules 3000]

These twenty clients are one identity (anonymous, one address): the server lifts the per-identity
read share for this scenario, which measures the request gate and the leases.

With ``--greedy-reader``, one read-only identity runs ``--clients`` threads (30 is the trial of
issue 41) of 500-schedule pages (a refused thread waits what Retry-After says; with
``--hammer`` it retries at once), while an admin enqueues a
job every 200 ms and the probe asks /healthz: it prints the admin's write latency and /healthz
beside the reader's pages and refusals. ``--lift-shares`` runs the same with the share lifted,
to compare (issue 41, point 4; rota.api.shares); so does an older rota, with its src first on
PYTHONPATH (the reader is then its ROTA_READ_TOKEN):

    python -m bench.serve_load --greedy-reader --clients 30 [--lift-shares]

``--greedy-reader --clients 0`` runs the admin's writes and the probe with no reader: what the
machine gives them on its own, to read the others against. Each run prints how many writes
and probes answered within 200 ms, and the load average.

Everything runs on 127.0.0.1; the server is a child process, stopped by its PID. The schedules
and the paging clients are those of `integration/test_serve_load.py` (tests/support/schedule_load.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.schedule_load import call, paging, populate

HOLD_SECONDS = 20.0
PROBE_EVERY_S = 0.05
TARGET_MS = 100.0
WRITE_EVERY_S = 0.2
WRITE_TARGET_MS = 200.0
ADMIN_TOKEN = "bench-admin-token-0123456789"
READER_TOKEN = "bench-reader-token-0123456789"
#: The greedy reader's share of reads a second, as published (the default is higher: 100).
GREEDY_RATE = 20.0
#: Read shares no client of this bench reaches.
LIFTED = {"max_reads_per_identity": 100_000, "read_rate_per_identity": 1e9}


def serve_child(directory: str, port: int, mode: str = "anonymous") -> None:
    """The server: what `rota serve` runs for the demo, plus the 20 s `hold` kind."""
    from rota.api import ApiSettings
    from rota.app import App
    from rota.cli.serve import _listen, _serve  # `rota serve` itself, minus argument parsing
    from rota.demo import DEMO_HEARTBEAT, DEMO_LEASE, DEMO_RESCUE, add_demo_kinds
    from rota.runtime.context import JobContext

    os.chdir(directory)
    app = add_demo_kinds(App("sqlite:///rota.db"))

    @app.job("hold", max_attempts=3)
    async def hold(ctx: JobContext, payload: Any) -> None:
        await asyncio.sleep(HOLD_SECONDS)

    app.database.auto_migrate = True
    timing = {"lease": DEMO_LEASE, "heartbeat": DEMO_HEARTBEAT, "rescue": DEMO_RESCUE, "poll": 0.2}
    options: dict[str, Any] = {"heartbeat_interval_seconds": DEMO_HEARTBEAT.total_seconds()}
    if mode != "anonymous":
        options |= {"auth_token": ADMIN_TOKEN, "read_token": READER_TOKEN}
    if mode != "greedy" and "read_rate_per_identity" in ApiSettings.__dataclass_fields__:
        options |= LIFTED  # an older rota (PYTHONPATH=its src) has no read shares to lift
    if mode == "greedy" and "read_rate_per_identity" in ApiSettings.__dataclass_fields__:
        options["read_rate_per_identity"] = GREEDY_RATE
    settings = ApiSettings(**options)
    aborted = asyncio.run(
        _serve(
            app,
            settings,
            listener=_listen("127.0.0.1", port),
            workers=3,
            concurrency=10,
            demo=True,
            shutdown_timeout=5.0,
            timing=timing,
        )
    )
    sys.stdout.flush()
    os._exit(1 if aborted else 0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the server exited early")
        try:
            call(url + "/healthz")
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise SystemExit("the server did not answer /healthz")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(
    seconds: float, clients: int, schedules: int, mode: str = "anonymous", hammer: bool = False
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rota-serve-load-") as directory:
        started = time.perf_counter()
        asyncio.run(populate(Path(directory) / "rota.db", schedules))
        populate_s = time.perf_counter() - started
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = (Path(directory) / "serve.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.serve_load", "--child", directory, str(port), mode],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_healthy(url, process, timeout=60)
            if mode != "anonymous":
                return _greedy(url, seconds, clients, hammer) | {"populate_s": populate_s}
            return _load(url, seconds, clients) | {"populate_s": populate_s}
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait()
            log.close()


def _load(url: str, seconds: float, clients: int) -> dict[str, Any]:
    with paging(url, clients) as load:
        job = call(url + "/api/jobs", {"kind": "hold"})
        # The probe runs in a process of its own: in this one it would wait for the pollers'
        # threads to hand over the GIL, and measure that instead of the server.
        probe = subprocess.run(
            [sys.executable, "-m", "bench.serve_load", "--probe", url, str(seconds)],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + 60,
        )
    health, probe_errors = json.loads(probe.stdout)
    pages, errors = load.pages, load.errors + probe_errors
    deadline = time.monotonic() + HOLD_SECONDS + 30
    detail = call(f"{url}/api/jobs/{job['id']}")
    while detail["state"] not in ("succeeded", "dead") and time.monotonic() < deadline:
        time.sleep(0.2)
        detail = call(f"{url}/api/jobs/{job['id']}")
    return {
        "seconds": seconds,
        "clients": clients,
        "pages": len(pages),
        "pages_per_s": len(pages) / seconds,
        "page_p50_ms": statistics.median(pages) * 1000 if pages else None,
        "errors": len(errors),
        "healthz_samples": len(health),
        "healthz_p50_ms": statistics.median(health),
        "healthz_p99_ms": _percentile(health, 0.99),
        "healthz_max_ms": max(health),
        "hold_state": detail["state"],
        "hold_attempts": [(a["attempt"], a["outcome"]) for a in detail["attempts"]],
    }


def _authorized(url: str, token: str, body: Any = None) -> tuple[int, float, float]:
    """(status, seconds, Retry-After seconds) of a GET (a POST of ``body``) with ``token``;
    refusals included."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    began = time.perf_counter()
    retry_after = 0.0
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        error.read()
        status = error.code
        retry_after = float(error.headers.get("Retry-After") or 0)
    return status, time.perf_counter() - began, retry_after


def _greedy(url: str, seconds: float, clients: int, hammer: bool = False) -> dict[str, Any]:
    """One read-only identity's ``clients`` threads read 500-schedule pages without pause
    (a refused thread waits its Retry-After, or with ``hammer`` retries at once) while an
    admin enqueues every WRITE_EVERY_S."""
    stop = threading.Event()
    reads: list[tuple[int, float, float]] = []
    writes: list[tuple[int, float, float]] = []

    def reader() -> None:
        while not stop.is_set():
            read = _authorized(url + "/api/schedules?limit=500", READER_TOKEN)
            reads.append(read)
            if read[0] == 429 and not hammer:
                stop.wait(read[2])

    def writer() -> None:
        while not stop.is_set():
            writes.append(_authorized(url + "/api/jobs", ADMIN_TOKEN, {"kind": "email"}))
            stop.wait(WRITE_EVERY_S)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(clients)]
    threads.append(threading.Thread(target=writer, daemon=True))
    for thread in threads:
        thread.start()
    try:
        probe_run = subprocess.run(
            [sys.executable, "-m", "bench.serve_load", "--probe", url, str(seconds)],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + 60,
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    health, probe_errors = json.loads(probe_run.stdout)
    write_ms = [elapsed * 1000 for status, elapsed, _ in writes if status == 201]
    served = [elapsed for status, elapsed, _ in reads if status == 200]
    return {
        "seconds": seconds,
        "clients": clients,
        "pages": len(served),
        "pages_per_s": len(served) / seconds,
        "page_p50_ms": statistics.median(served) * 1000 if served else None,
        "refused": sum(1 for status, _, _ in reads if status == 429),
        "other_read_errors": sum(1 for status, _, _ in reads if status not in (200, 429)),
        "writes": len(write_ms),
        "write_errors": len(writes) - len(write_ms),
        "write_p50_ms": statistics.median(write_ms),
        "write_p99_ms": _percentile(write_ms, 0.99),
        "write_max_ms": max(write_ms),
        "writes_within": sum(1 for ms in write_ms if ms <= WRITE_TARGET_MS),
        "healthz_within": sum(1 for ms in health if ms <= WRITE_TARGET_MS),
        "load": os.getloadavg(),
        "errors": len(probe_errors),
        "healthz_samples": len(health),
        "healthz_p50_ms": statistics.median(health),
        "healthz_p99_ms": _percentile(health, 0.99),
        "healthz_max_ms": max(health),
    }


def probe(url: str, seconds: float) -> None:
    """Ask /healthz every PROBE_EVERY_S for ``seconds``; print the latencies (ms) and errors."""
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.perf_counter()
        try:
            call(url + "/healthz")
        except (urllib.error.URLError, OSError) as error:
            errors.append(repr(error))
        latencies.append((time.perf_counter() - began) * 1000)
        time.sleep(PROBE_EVERY_S)
    print(json.dumps([latencies, errors]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--schedules", type=int, default=3000)
    parser.add_argument("--greedy-reader", action="store_true")
    parser.add_argument("--lift-shares", action="store_true")
    parser.add_argument("--hammer", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("DIR", "PORT", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=2, metavar=("URL", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        serve_child(args.child[0], int(args.child[1]), args.child[2])
        return
    if args.probe:
        probe(args.probe[0], float(args.probe[1]))
        return
    if args.greedy_reader:
        mode = "lifted" if args.lift_shares else "greedy"
        result = measure(args.seconds, args.clients, args.schedules, mode, args.hammer)
        report_greedy(result, mode, args.hammer)
        return
    result = measure(args.seconds, args.clients, args.schedules)
    held = result["hold_attempts"] == [(1, "succeeded")]
    print(f"rota serve under API load: {args.schedules} sparse schedules, {args.clients} clients")
    print(f"  schedules set up in           {result['populate_s']:.1f} s")
    print(f"  /api/schedules pages served   {result['pages']} ({result['pages_per_s']:.0f}/s)")
    print(f"  /api/schedules page p50       {result['page_p50_ms']:.1f} ms")
    print(
        f"  /healthz p50 / p99 / max      {result['healthz_p50_ms']:.1f} / "
        f"{result['healthz_p99_ms']:.1f} / {result['healthz_max_ms']:.1f} ms "
        f"({result['healthz_samples']} probes; target <= {TARGET_MS:.0f} ms)"
    )
    print(f"  request errors                {result['errors']}")
    print(
        f"  20 s job, lease 3 s           {result['hold_state']}, attempts "
        f"{result['hold_attempts']} ({'kept its lease' if held else 'LOST ITS LEASE'})"
    )


def report_greedy(result: dict[str, Any], mode: str, hammer: bool) -> None:
    shares = "lifted" if mode == "lifted" else "default shares (16 in flight, 20/s)"
    retry = "retrying refusals at once" if hammer else "waiting Retry-After when refused"
    print(
        f"one read-only identity, {result['clients']} threads of 500-row pages ({shares}; {retry})"
    )
    print(
        f"  admin POST /api/jobs p50 / p99 / max  {result['write_p50_ms']:.1f} / "
        f"{result['write_p99_ms']:.1f} / {result['write_max_ms']:.1f} ms "
        f"({result['writes']} writes, {result['write_errors']} failed; "
        f"target <= {WRITE_TARGET_MS:.0f} ms: {result['writes_within']} within)"
    )
    print(
        f"  /healthz p50 / p99 / max              {result['healthz_p50_ms']:.1f} / "
        f"{result['healthz_p99_ms']:.1f} / {result['healthz_max_ms']:.1f} ms "
        f"({result['healthz_samples']} probes, {result['errors']} errors; "
        f"{result['healthz_within']} within {WRITE_TARGET_MS:.0f} ms)"
    )
    print(
        "  load average at the end               " + ", ".join(f"{v:.2f}" for v in result["load"])
    )
    print(
        f"  reader pages served / refused (429)   {result['pages']} ({result['pages_per_s']:.0f}/s)"
        f" / {result['refused']}; other errors {result['other_read_errors']}"
    )


if __name__ == "__main__":
    main()
