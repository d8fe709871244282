"""The signals that stop a worker (or `rota serve`) gracefully.

SIGTERM comes from process managers, SIGINT from Ctrl-C, SIGHUP from a terminal or SSH session
that went away. SIGHUP's default action kills the process on the spot, leaving its running jobs
to wait out their leases; handled, it stops like SIGTERM. A process started with SIGHUP ignored
(``nohup``) asked to outlive its terminal, so it keeps ignoring it.
"""

from __future__ import annotations

import signal


def stop_signals() -> list[signal.Signals]:
    """SIGTERM, SIGINT, and SIGHUP unless it is ignored; read when the handlers are installed."""
    found = [signal.SIGTERM, signal.SIGINT]
    hangup = getattr(signal, "SIGHUP", None)  # absent on Windows
    if hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN:
        found.append(hangup)
    return found
