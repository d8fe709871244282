"""Network namespaces for partition tests: a worker cut off from the database for real.

``Netns.create()`` adds a namespace joined to the host by a veth pair with link-local
addresses (169.254.77.0/24, one /30 per namespace: traffic never leaves this machine).
``prefix()`` runs a command inside it (``ip netns exec``, which execs, so the PID is the
command's own), ``cut()`` takes the host end down (packets are dropped: no RST, no FIN, a
half-open partition) and ``heal()`` brings it back. ``destroy()`` removes both; the fixture
that creates one always calls it. ``unavailable()`` names why namespaces cannot be made here
(not root, no ``ip``, a kernel that refuses), for a clear skip.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass

_SUBNETS = itertools.count(1)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """None if network namespaces work here, else the reason they do not."""
    if shutil.which("ip") is None:
        return "network namespaces need iproute2 (`apt-get install -y iproute2`)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"rota-probe-{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"the kernel refused `ip netns add`: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Netns:
    name: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str

    @classmethod
    def create(cls) -> Netns:
        tag = uuid.uuid4().hex[:6]
        subnet = next(_SUBNETS) % 60
        base = 4 * subnet
        ns = cls(
            name=f"rota-{tag}",
            host_if=f"rvh{tag}",
            ns_if=f"rvn{tag}",
            host_ip=f"169.254.77.{base + 1}",
            ns_ip=f"169.254.77.{base + 2}",
        )
        try:
            _ip("netns", "add", ns.name)
            _ip("link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if)
            _ip("link", "set", ns.ns_if, "netns", ns.name)
            _ip("addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if)
            _ip("link", "set", ns.host_if, "up")
            inside = ("netns", "exec", ns.name, "ip")
            _ip(*inside, "addr", "add", f"{ns.ns_ip}/30", "dev", ns.ns_if)
            _ip(*inside, "link", "set", ns.ns_if, "up")
            _ip(*inside, "link", "set", "lo", "up")
        except subprocess.CalledProcessError:
            ns.destroy()
            raise
        return ns

    def prefix(self) -> list[str]:
        """Put before a command to run it inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Drop every packet between the namespace and the host (no RST, no FIN)."""
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            _ip("link", "del", self.host_if, check=False)
            _ip("netns", "del", self.name, check=False)
