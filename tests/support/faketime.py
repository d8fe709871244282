"""libfaketime for black-box clock skew of worker processes (Debian package ``faketime``).

Names confirmed against the installed 0.9.10 README (/usr/share/doc/libfaketime/README.gz):
``LD_PRELOAD`` of ``libfaketimeMT.so.1`` (the build for threaded programs), the offset in
``FAKETIME_TIMESTAMP_FILE`` (e.g. ``-120``, ``+120 x1.5``) re-read on every call with
``FAKETIME_NO_CACHE=1``, so a test changes a running process's clock by rewriting the file,
and ``FAKETIME_DONT_FAKE_MONOTONIC=1`` to leave CLOCK_MONOTONIC real.
"""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

INSTALL_HINT = "libfaketime is missing: `apt-get install -y faketime`"


def library() -> str | None:
    """The path of libfaketimeMT.so.1, or None when the package is not installed."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


class FakeTime:
    """A clock-control file and the environment that makes a process follow it."""

    def __init__(self, path: Path, spec: str = "+0", *, fake_monotonic: bool = False) -> None:
        lib = library()
        if lib is None:
            raise RuntimeError(INSTALL_HINT)
        self.lib = lib
        self.path = path
        self.fake_monotonic = fake_monotonic
        self.set(spec)

    def set(self, spec: str) -> None:
        """A libfaketime spec: ``-120``, ``+3600``, ``+120 x1.5``; applies at once."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(spec + "\n")
        os.replace(tmp, self.path)  # readers never see a half-written file

    def env(self) -> dict[str, str]:
        env = {
            "LD_PRELOAD": self.lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
        }
        if not self.fake_monotonic:
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        return env


def faked_epoch(fake: FakeTime) -> float:
    """What a process under ``fake`` reads as the current epoch time (for checks)."""
    out = subprocess.run(
        ["date", "+%s.%N"],
        env={**os.environ, **fake.env()},
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return float(out.stdout.strip())
