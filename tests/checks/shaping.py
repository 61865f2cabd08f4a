"""Shape namespace-cluster links with ``tc``: a token bucket on one node's link (both directions) and a
netem delay on the path between two nodes. Used by the mesh and sync-forecast cluster tests and the bench.

Both directions of a node's link: ``tbf`` on ``eth0`` inside the node's namespace limits what it sends,
``tbf`` on its veth peer on the bridge side (root namespace) limits what it receives. This kernel has no
``sch_netem`` (nor prio/sfq/fq), so the delay is a userspace relay on the one path
(:mod:`tests.checks.delayrelay`) instead of ``netem delay``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_RELAYS: dict[str, list[subprocess.Popen]] = {}

__all__ = ["clear", "delay_pair", "shape_node"]


def _tc(argv: Sequence[str], netns: str | None = None) -> None:
    full = (["ip", "netns", "exec", netns] if netns else []) + ["tc", *argv]
    done = subprocess.run(full, capture_output=True, text=True, timeout=20, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed: {done.stderr.strip()}")


def shape_node(node, mbit: float) -> None:
    """Limit ``node``'s link to ``mbit`` Mbit/s both ways (replaces any root qdisc on both ends)."""
    rate = f"{mbit:g}mbit"
    # burst: 10 ms of traffic at the rate (at least 32 kB); queue: 200 ms (a shallow queue drops the
    # gradient bursts of a ring all-reduce and TCP then waits out 200 ms retransmission timeouts)
    burst = f"{max(32, int(mbit * 1000 / 8 / 100))}kb"
    _tc(["qdisc", "replace", "dev", node.iface, "root", "tbf", "rate", rate, "burst", burst, "latency", "200ms"], node.netns)
    _tc(["qdisc", "replace", "dev", node.host_veth, "root", "tbf", "rate", rate, "burst", burst, "latency", "200ms"])


def delay_pair(src, dst, ms: float) -> subprocess.Popen:
    """Delay every packet ``src`` sends to ``dst`` by ``ms``; return the relay process (stop it with :func:`clear`).

    Without netem in the kernel, packets to ``dst`` are routed through a TUN device into
    :mod:`tests.checks.delayrelay`, which writes each onto ``eth0`` ``ms`` later.
    """
    tun = "dly0"
    relay = subprocess.Popen(
        src.netns_argv([sys.executable, "-m", "tests.checks.delayrelay", "--tun", tun, "--dev", src.iface,
                        "--src-mac", _mac(src), "--dst-mac", _mac(dst), "--delay-ms", str(ms)]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO), start_new_session=True)
    line = relay.stdout.readline() if relay.stdout else ""
    if line.strip() != "ready":
        relay.kill()
        raise RuntimeError(f"delay relay on {src.name} did not start: {line}{relay.stderr.read() if relay.stderr else ''}")
    _RELAYS.setdefault(src.netns, []).append(relay)
    for argv in (["link", "set", tun, "up"], ["route", "replace", f"{dst.address}/32", "dev", tun, "src", src.address]):
        done = subprocess.run(src.netns_argv(["ip", *argv]), capture_output=True, text=True, timeout=20, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(argv)} in {src.name} failed: {done.stderr.strip()}")
    return relay


def _mac(node) -> str:
    text = subprocess.run(node.netns_argv(["cat", f"/sys/class/net/{node.iface}/address"]), capture_output=True,
                          text=True, timeout=20, check=True).stdout
    return text.strip()


def clear(nodes) -> None:
    """Remove every root qdisc this module may have set on ``nodes`` (both ends of each link)."""
    for node in nodes:
        for argv, ns in ((["qdisc", "del", "dev", node.iface, "root"], node.netns),
                         (["qdisc", "del", "dev", node.host_veth, "root"], None)):
            full = (["ip", "netns", "exec", ns] if ns else []) + ["tc", *argv]
            subprocess.run(full, capture_output=True, timeout=20, check=False)
        for relay in _RELAYS.pop(node.netns, []):
            relay.kill()  # the TUN device and its route go with the process
            relay.wait(timeout=20)
