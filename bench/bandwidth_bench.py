"""Bandwidth probe vs iperf3 on the same veth link between two namespace nodes, in the same run.

Builds a 3-node namespace cluster (its set-up and teardown times are rows too), then alternates iperf3
and the agent's ``POST /v1/probe/bandwidth`` node1 → node0, a few repetitions each, and reports the
medians. Both are one TCP stream over the same veth/bridge path; iperf3's figure is what the receiver
got (``end.sum_received``).

Throughput on a shared 2-core machine follows the CPU left over by other work, so the CPU cost of
each side is reported too: Gbit moved per CPU-second of the sending and the receiving process
(iperf3's own ``cpu_utilization_percent``; /proc/PID/stat for the agents). That figure barely depends
on the background load and says which side limits the probe. Needs root, iperf3 and the agent.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from typing import Any

from tests.cluster import Cluster, cluster_support_problem

IPERF_PORT = 5201
TARGET_RATIO = 0.9
_TICKS = os.sysconf("SC_CLK_TCK")


def run(args: Any) -> list[dict]:
    """Rows: cluster set-up/teardown time, iperf3 and agent-probe Gbit/s (ratio vs iperf3), CPU cost per side."""
    quick = bool(getattr(args, "quick", False))
    seconds = 2.0 if quick else 5.0
    repetitions = 3 if quick else 5
    problem = cluster_support_problem(need_agent=True)
    if problem:
        raise RuntimeError(f"bandwidth bench cannot run: {problem}")
    cluster = Cluster.create(3)
    try:
        setup = cluster.setup_seconds
        receiver, sender = cluster.nodes[0], cluster.nodes[1]
        iperf, probe = [], []
        for _ in range(repetitions):  # interleaved, so both see the same background load
            iperf.append(iperf3_run(receiver, sender, seconds))
            probe.append(probe_run(receiver, sender, seconds))
    finally:
        started = time.monotonic()
        cluster.close()
        teardown_s = time.monotonic() - started
    med = {key: statistics.median(r[key] for r in iperf) for key in iperf[0]}
    pmed = {key: statistics.median(r[key] for r in probe) for key in probe[0]}
    link = f"node1→node0 over veth+bridge, median of {repetitions} × {seconds:g} s"
    return [
        {"measure": "cluster set-up, 3 nodes (netns + sshd + agent)", "value": round(setup["total"], 3), "unit": "s",
         "detail": {k: round(v, 3) for k, v in setup.items()}},
        {"measure": "cluster teardown, 3 nodes (processes, netns, bridge, files)", "value": round(teardown_s, 3), "unit": "s"},
        {"measure": f"iperf3 single stream, {link}", "value": round(med["gbit_per_s"], 3), "unit": "Gbit/s",
         "samples": [round(r["gbit_per_s"], 3) for r in iperf]},
        {"measure": f"agent bandwidth probe, {link}", "value": round(pmed["gbit_per_s"], 3), "unit": "Gbit/s",
         "baseline": round(med["gbit_per_s"], 3), "ratio": _ratio(pmed["gbit_per_s"], med["gbit_per_s"]),
         "target": f">= {TARGET_RATIO} x iperf3", "samples": [round(r["gbit_per_s"], 3) for r in probe]},
        {"measure": "receiver efficiency: agent /v1/sink vs iperf3 -s", "value": round(pmed["rx_gbit_per_cpu_s"], 2),
         "unit": "Gbit/CPU-s", "baseline": round(med["rx_gbit_per_cpu_s"], 2),
         "ratio": _ratio(pmed["rx_gbit_per_cpu_s"], med["rx_gbit_per_cpu_s"])},
        {"measure": "sender efficiency: agent probe vs iperf3 -c", "value": round(pmed["tx_gbit_per_cpu_s"], 2),
         "unit": "Gbit/CPU-s", "baseline": round(med["tx_gbit_per_cpu_s"], 2),
         "ratio": _ratio(pmed["tx_gbit_per_cpu_s"], med["tx_gbit_per_cpu_s"])},
    ]


def iperf3_run(receiver, sender, seconds: float) -> dict:
    """One ``iperf3 -s -1`` in ``receiver``'s namespace, ``iperf3 -c -J`` from ``sender``'s: Gbit/s and CPU cost."""
    server = receiver.popen(["iperf3", "-s", "-1", "-B", receiver.address, "-p", str(IPERF_PORT)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(receiver, IPERF_PORT)  # via ss: a probe connect would use up the single -1 session
        res = sender.exec(["iperf3", "-c", receiver.address, "-p", str(IPERF_PORT), "-t", f"{seconds:g}", "-J"],
                          timeout=seconds + 30)
        data = json.loads(res.stdout or "{}")
        if res.returncode != 0 or "error" in data:
            raise RuntimeError(f"iperf3 client failed: {data.get('error') or res.stderr.strip()}")
    finally:
        server.kill()
        server.wait(timeout=10)
    received = data["end"]["sum_received"]
    gbit = received["bytes"] * 8 / 1e9
    cpu = data["end"]["cpu_utilization_percent"]
    return {"gbit_per_s": received["bits_per_second"] / 1e9,
            "tx_gbit_per_cpu_s": gbit / max(cpu["host_total"] / 100 * received["seconds"], 1e-6),
            "rx_gbit_per_cpu_s": gbit / max(cpu["remote_total"] / 100 * received["seconds"], 1e-6)}


def probe_run(receiver, sender, seconds: float) -> dict:
    """The agent probe from ``sender`` to ``receiver``'s sink: Gbit/s and the CPU each agent spent."""
    before = _cpu_s(receiver._agent.pid), _cpu_s(sender._agent.pid)
    result = sender.agent_post("/v1/probe/bandwidth", {"peer_url": receiver.agent_url, "seconds": seconds},
                               timeout=seconds + 30)
    rx_cpu, tx_cpu = _cpu_s(receiver._agent.pid) - before[0], _cpu_s(sender._agent.pid) - before[1]
    if result.get("error"):
        raise RuntimeError(f"bandwidth probe failed: {result['error']}")
    gbit = result["bytes_sent"] * 8 / 1e9
    return {"gbit_per_s": float(result["gbit_per_s"]),
            "tx_gbit_per_cpu_s": gbit / max(tx_cpu, 1e-6), "rx_gbit_per_cpu_s": gbit / max(rx_cpu, 1e-6)}


def _cpu_s(pid: int) -> float:
    """User+system CPU seconds of ``pid`` so far (the agents run as direct children, ``ip netns exec`` execs)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _ratio(value: float, baseline: float):
    return round(value / baseline, 3) if baseline else None


def _wait_listening(node, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node.exec(["ss", "-Hltn", f"sport = :{port}"]).stdout.strip():
            return
        time.sleep(0.02)
    raise RuntimeError(f"iperf3 -s did not listen on {node.name}:{port} within {timeout:g} s")
