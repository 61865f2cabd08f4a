"""Bandwidth probe vs iperf3 on the same veth link between two namespace nodes, in the same run.

Builds a 3-node namespace cluster (its set-up time is a row too), then alternates iperf3 and the agent's
``POST /v1/probe/bandwidth`` node1 → node0, a few repetitions each, and reports the medians. Both are one
TCP stream over the same veth/bridge path; iperf3's figure is what the receiver got
(``end.sum_received``). Needs root (network namespaces), iperf3 and the agent.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any

from tests.cluster import Cluster, cluster_support_problem

IPERF_PORT = 5201
TARGET_RATIO = 0.9


def run(args: Any) -> list[dict]:
    """Rows: cluster set-up time, iperf3 Gbit/s, agent probe Gbit/s with iperf3 as baseline and the ratio."""
    quick = bool(getattr(args, "quick", False))
    seconds = 2.0 if quick else 5.0
    repetitions = 3 if quick else 5
    problem = cluster_support_problem(need_agent=True)
    if problem:
        raise RuntimeError(f"bandwidth bench cannot run: {problem}")
    with Cluster.create(3) as cluster:
        setup = cluster.setup_seconds
        receiver, sender = cluster.nodes[0], cluster.nodes[1]
        iperf, probe = [], []
        for _ in range(repetitions):  # interleaved, so both see the same background load
            iperf.append(iperf3_gbit(receiver, sender, seconds))
            probe.append(probe_gbit(receiver, sender, seconds))
    iperf_median, probe_median = statistics.median(iperf), statistics.median(probe)
    spread = f"{repetitions} × {seconds:g} s, node1→node0 over veth+bridge"
    return [
        {"measure": "cluster set-up, 3 nodes (netns + sshd + agent)", "value": round(setup["total"], 3), "unit": "s",
         "detail": {k: round(v, 3) for k, v in setup.items()}},
        {"measure": f"iperf3 single stream, median of {spread}", "value": round(iperf_median, 3), "unit": "Gbit/s",
         "samples": [round(x, 3) for x in iperf]},
        {"measure": f"agent bandwidth probe, median of {spread}", "value": round(probe_median, 3), "unit": "Gbit/s",
         "baseline": round(iperf_median, 3), "ratio": round(probe_median / iperf_median, 3) if iperf_median else None,
         "target": f">= {TARGET_RATIO} x iperf3", "samples": [round(x, 3) for x in probe]},
    ]


def iperf3_gbit(receiver, sender, seconds: float) -> float:
    """One ``iperf3 -s -1`` in ``receiver``'s namespace, ``iperf3 -c -J`` from ``sender``'s; received Gbit/s."""
    server = receiver.popen(["iperf3", "-s", "-1", "-B", receiver.address, "-p", str(IPERF_PORT)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(receiver, IPERF_PORT)  # via ss: a probe connect would use up the single -1 session
        res = sender.exec(["iperf3", "-c", receiver.address, "-p", str(IPERF_PORT), "-t", f"{seconds:g}", "-J"],
                          timeout=seconds + 30)
        data = json.loads(res.stdout or "{}")
        if res.returncode != 0 or "error" in data:
            raise RuntimeError(f"iperf3 client failed: {data.get('error') or res.stderr.strip()}")
        return data["end"]["sum_received"]["bits_per_second"] / 1e9
    finally:
        server.kill()
        server.wait(timeout=10)


def probe_gbit(receiver, sender, seconds: float) -> float:
    """The agent probe from ``sender`` to ``receiver``'s sink; its Gbit/s."""
    result = sender.agent_post("/v1/probe/bandwidth", {"peer_url": receiver.agent_url, "seconds": seconds},
                               timeout=seconds + 30)
    if result.get("error"):
        raise RuntimeError(f"bandwidth probe failed: {result['error']}")
    return float(result["gbit_per_s"])


def _wait_listening(node, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.exec(["ss", "-Hltn", f"sport = :{port}"]).stdout.strip():
            return
        time.sleep(0.02)
    raise RuntimeError(f"iperf3 -s did not listen on {node.name}:{port} within {timeout:g} s")
