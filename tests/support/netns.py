"""Network namespaces for partition tests: a worker cut off from the database for real.

``Netns.create()`` adds a namespace joined to the host by a veth pair with link-local
addresses (one /30 of 169.254.0.0/16 per namespace, chosen among those no interface of the
machine uses yet, under a file lock, so test processes running side by side never share one:
traffic never leaves this machine).
``prefix()`` runs a command inside it (``ip netns exec``, which execs, so the PID is the
command's own), ``cut()`` takes the host end down (packets are dropped: no RST, no FIN, a
half-open partition) and ``heal()`` brings it back. ``destroy()`` removes both; the fixture
that creates one always calls it. ``unavailable()`` names why namespaces cannot be made here
(not root, no ``ip``, a kernel that refuses), for a clear skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

#: Third octets of the 169.254.X.0/24 blocks namespaces take their /30s from.
_BLOCKS = range(100, 200)
_LOCK = "/tmp/rota-netns.lock"


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
        with _allocation() as subnet:
            host_ip, ns_ip = (str(address) for address in subnet.hosts())
            ns = cls(f"rota-{tag}", f"rvh{tag}", f"rvn{tag}", host_ip, ns_ip)
            inside = ("netns", "exec", ns.name, "ip")
            try:
                _ip("netns", "add", ns.name)
                _ip("link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if)
                _ip("link", "set", ns.ns_if, "netns", ns.name)
                _ip("addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if)
                _ip("link", "set", ns.host_if, "up")
                _ip(*inside, "addr", "add", f"{ns.ns_ip}/30", "dev", ns.ns_if)
                _ip(*inside, "link", "set", ns.ns_if, "up")
                _ip(*inside, "link", "set", "lo", "up")
            except subprocess.CalledProcessError:
                ns.destroy()
                raise
        return ns

    @property
    def cidr(self) -> str:
        """The namespace's own address as a /32, e.g. for a pg_hba.conf line."""
        return f"{self.ns_ip}/32"

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


def _in_use() -> set[ipaddress.IPv4Network]:
    """The /30 around every IPv4 address on an interface of the machine now."""
    words = _ip("-4", "-o", "addr", "show").stdout.split()
    return {
        ipaddress.ip_network(f"{ipaddress.ip_interface(word).ip}/30", strict=False)
        for before, word in itertools.pairwise(words)
        if before == "inet"
    }


@contextlib.contextmanager
def _allocation() -> Iterator[ipaddress.IPv4Network]:
    """A free link-local /30, held under a file lock until the caller has put it on its veth."""
    with open(_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        taken = _in_use()
        blocks = list(_BLOCKS)
        random.shuffle(blocks)
        for block in blocks:
            for subnet in ipaddress.ip_network(f"169.254.{block}.0/24").subnets(new_prefix=30):
                if subnet not in taken:
                    yield subnet
                    return
        raise RuntimeError("no free link-local /30 left for a network namespace")
