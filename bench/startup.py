"""How fast rota starts: ``python -m bench.startup``.

Three figures, each the median of ``--runs`` fresh processes (with the range):

- ``import``: ``import rota, rota.cli`` in a fresh interpreter, timed inside it;
- ``--help``: ``rota --help`` from spawn to exit, as a user waits for it;
- ``first claim``: ``rota worker`` on an idle SQLite database holding one due job, from spawn to
  the job's ``started_at`` (its claim, stamped by the worker's own clock on this machine).

``--before DIR`` measures another checkout's ``src`` folder too, alternating with this one run
by run, for a before and after in the same sitting. ``--write`` writes ``bench/startup.md``,
which ``make bench`` splices into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

APP = """\
import os

import rota

app = rota.App(os.environ["ROTA_DATABASE_URL"])


@app.job("noop")
def noop(ctx, payload):
    return None
"""
IMPORT = (
    "import time\nstarted, cpu = time.perf_counter(), time.process_time()\n"
    "import rota, rota.cli\n"
    "print(time.perf_counter() - started, time.process_time() - cpu)"
)


def environment(src: str | None, **extra: str) -> dict[str, str]:
    env = dict(os.environ, **extra)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


def import_s(src: str | None) -> tuple[float, float]:
    """Wall and CPU seconds of ``import rota, rota.cli`` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT],
        env=environment(src),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def help_s(src: str | None) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "rota", "--help"],
        env=environment(src),
        capture_output=True,
        check=True,
        timeout=60,
    )
    return time.perf_counter() - started


def first_claim_s(src: str | None, directory: Path) -> float:
    """Spawn to the claim of the one due job, by the wall clock the worker stamps it with."""
    db = directory / "rota.db"
    for leftover in (db, db.with_name("rota.db-wal"), db.with_name("rota.db-shm")):
        leftover.unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    env = environment(src, ROTA_DATABASE_URL=url)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), env.get("PYTHONPATH")]))
    subprocess.run(
        [sys.executable, "-m", "rota", "enqueue", "noop", "--app", "startapp:app"],
        env=env,
        cwd=directory,
        capture_output=True,
        check=True,
        timeout=60,
    )
    spawned = time.time()
    worker = subprocess.Popen(
        [sys.executable, "-m", "rota", "worker", "--app", "startapp:app"],
        env=env,
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        with sqlite3.connect(db) as connection:
            while time.monotonic() < deadline:
                row = connection.execute("SELECT started_at FROM rota_jobs").fetchone()
                if row and row[0]:
                    return _instant(row[0]) - spawned
                time.sleep(0.01)  # the measuring loop's poll, off the worker's path
        raise TimeoutError("the worker did not claim within 60 s")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def _instant(value: object) -> float:
    if isinstance(value, int | float):  # stored as epoch seconds or microseconds
        return float(value) / (1e6 if value > 1e11 else 1)
    return datetime.fromisoformat(str(value)).timestamp()


def measure(src: str | None, directory: Path) -> dict[str, float]:
    wall, cpu = import_s(src)
    return {
        "import": wall,
        "import (CPU)": cpu,
        "--help": help_s(src),
        "first claim": first_claim_s(src, directory),
    }


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    return f"{cpu}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"


def report(runs: int, results: dict[str, list[dict[str, float]]], load: str) -> str:
    """A markdown section: one row a figure, one column a checkout, median and range."""
    names = list(results)
    lines = [
        "## Startup: import, --help and a worker's first claim",
        "",
        f"- **Date:** {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- **Command:** `python -m bench.startup --runs {runs}"
        + (f" --before {names[0].split()[0]}`" if len(names) > 1 else "`"),
        f"- **Machine:** {machine()}; load average {load} as the run ended",
        "- **How:** each figure is the median of the runs in fresh processes (range in "
        "brackets), checkouts alternating run by run. `import` is `import rota, rota.cli` "
        "timed inside the interpreter, wall and CPU (the CPU time is the steadier figure on a "
        "busy machine); `--help` is `rota --help` from spawn to exit; `first "
        "claim` is `rota worker` on an idle SQLite database holding one due job, from spawn "
        "to the job's `started_at`.",
        "",
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for figure in ("import", "import (CPU)", "--help", "first claim"):
        cells = []
        for name in names:
            ms = sorted(run[figure] * 1000 for run in results[name])
            cells.append(f"{statistics.median(ms):.0f} ms ({ms[0]:.0f}-{ms[-1]:.0f})")
        lines.append(f"| {figure} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _head() -> str:
    done = subprocess.run(
        ["git", "log", "-1", "--format=%h"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "?"


def label(src: str) -> str:
    """``src`` named by its checkout's commit, when it has one."""
    done = subprocess.run(
        ["git", "-C", src, "log", "-1", "--format=%h %cs"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{src} ({done.stdout.strip()})" if done.returncode == 0 else src


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--before", help="another checkout's src folder, measured alongside")
    parser.add_argument("--write", action="store_true", help="write bench/startup.md")
    args = parser.parse_args()
    sources: dict[str, str | None] = {}
    if args.before:
        sources[label(args.before)] = args.before
    sources[f"this checkout ({_head()})"] = None
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
    with tempfile.TemporaryDirectory(prefix="rota-startup-") as folder:
        directory = Path(folder)
        (directory / "startapp.py").write_text(APP)
        for _ in range(args.runs):
            for name, src in sources.items():
                results[name].append(measure(src, directory))
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    text = report(args.runs, results, load)
    print(text)
    if args.write:
        (Path(__file__).parent / "startup.md").write_text(text)


if __name__ == "__main__":
    main()
