"""Low-level network plumbing for namespace nodes: ``ip`` commands, subnet choice, bridge and veths."""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
from typing import Iterable, Optional, Sequence

__all__ = ["ClusterError", "ip", "used_networks", "choose_subnet", "create_bridge", "create_node_link"]


class ClusterError(RuntimeError):
    """Building or driving a namespace cluster failed; the message says what, where and the fix."""


def run(argv: Sequence[str], *, timeout: float = 20.0, check: bool = True, input: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run ``argv`` (no shell), capture text output; raise :class:`ClusterError` with stderr when ``check``."""
    try:
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False, input=input)
    except FileNotFoundError:
        raise ClusterError(f"{argv[0]} not found: install it (apt-get install iproute2 openssh-server nftables)") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from None
    if check and res.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed (exit {res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    return res


def ip(*args: str, netns: Optional[str] = None, check: bool = True) -> subprocess.CompletedProcess:
    """``ip [-n NETNS] ARGS...``."""
    return run(["ip", *(["-n", netns] if netns else []), *args], check=check)


def used_networks(netns: Optional[str] = None) -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine already addresses or routes (default routes left out)."""
    nets: list[ipaddress.IPv4Network] = []
    for entry in json.loads(ip("-j", "-4", "addr", netns=netns).stdout or "[]"):
        for info in entry.get("addr_info", []):
            if info.get("family") == "inet":
                nets.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
    for entry in json.loads(ip("-j", "-4", "route", "show", "table", "all", netns=netns).stdout or "[]"):
        dst = entry.get("dst", "")
        if dst in ("default", ""):
            continue
        try:
            nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
        except ValueError:
            continue
    return nets


def choose_subnet(exclude: Iterable[str] = (), *, rng: Optional[random.Random] = None) -> ipaddress.IPv4Network:
    """A random 10.X.Y.0/24 that overlaps nothing routed or addressed here, nor any of ``exclude``."""
    taken = used_networks() + [ipaddress.ip_network(s) for s in exclude if s]
    rng = rng or random.Random()
    for _ in range(2000):
        candidate = ipaddress.ip_network(f"10.{rng.randrange(64, 250)}.{rng.randrange(0, 256)}.0/24")
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise ClusterError("no free 10.X.Y.0/24 subnet found: this machine routes most of 10.0.0.0/8")


def create_bridge(name: str, address: str, prefixlen: int) -> None:
    """A bridge in the root namespace holding ``address`` so the controller reaches the nodes."""
    ip("link", "add", name, "type", "bridge")
    # No STP and no forwarding delay: ports forward at once, so nodes answer as soon as they are up.
    ip("link", "set", name, "type", "bridge", "stp_state", "0", "forward_delay", "0")
    ip("addr", "add", f"{address}/{prefixlen}", "dev", name)
    ip("link", "set", name, "up")


def create_node_link(netns: str, host_veth: str, bridge: str, address: str, prefixlen: int, iface: str = "eth0") -> None:
    """Namespace ``netns`` with lo up and a veth: ``iface`` inside (holding ``address``), ``host_veth`` on ``bridge``."""
    ip("netns", "add", netns)
    # The peer is created directly inside the namespace, so its name never clashes with the root eth0.
    ip("link", "add", host_veth, "type", "veth", "peer", "name", iface, "netns", netns)
    ip("link", "set", host_veth, "master", bridge)
    ip("link", "set", host_veth, "up")
    ip("addr", "add", f"{address}/{prefixlen}", "dev", iface, netns=netns)
    ip("link", "set", iface, "up", netns=netns)
    ip("link", "set", "lo", "up", netns=netns)


NEIGH_SYSCTL = "/proc/sys/net/ipv4/neigh/default/gc_thresh{}"


def ensure_neighbour_room(entries: int) -> list[str]:
    """Raise the kernel's ARP table limits (never lower them) so ``entries`` more neighbours fit.

    The IPv4 neighbour table is one table for every namespace of the machine, with a hard limit of
    ``gc_thresh3`` (1024 by default): a 64-node mesh has every node resolve its 63 peers, 4032 entries,
    and past the limit the kernel drops packets ("neighbor table overflow" in dmesg), so most of the
    mesh's connects time out. Returns what was changed.
    """
    changed = []
    want = {1: 1024, 2: 4 * (entries + 1024), 3: 8 * (entries + 1024)}
    for index, value in want.items():
        path = NEIGH_SYSCTL.format(index)
        try:
            with open(path) as handle:
                current = int(handle.read().strip())
            if current < value:
                with open(path, "w") as handle:
                    handle.write(str(value))
                changed.append(f"gc_thresh{index} {current} -> {value}")
        except (OSError, ValueError):
            continue
    return changed
