"""The wizard's refresh cost: a 64-node × 8-GPU cluster redrawn at 1 Hz, and its idle CPU.

Rows:

* ``update`` — per refresh of the Cluster step: fold one poll of 64 constructed node reports (8 GPUs
  each, utilisation moving every poll) into the cluster state, let the screen handle the update
  message (node table and detail pane redrawn), and paint the 120×40 screen. Timed as the app
  process's CPU time over that span: the test pilot detects "done" by sleeping until the process is
  idle, so wall time would measure its sleeps, not the work. Median and p95 over the refreshes. The
  poll itself is not timed (that is the client's benchmark, ``check_bench``).
* ``idle CPU`` — the app's own process CPU while it sits on the Cluster step refreshing at 1 Hz:
  once with the same 64 fixture nodes (no network), once polling three real agents on loopback over
  HTTP (the agents run in their own processes and are not counted).

Reports come from the agent's NVML fixtures through its real GPU probe (``tests/tui/fixture_cluster``),
constructed from NVIDIA documentation, not recorded.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

NODES, GPUS = 64, 8
TARGET_MS = 50.0
SIZE = (120, 40)


def run(args: Any) -> list[dict]:
    """Benchmark rows (see the module docstring); ``args.quick`` shortens every phase."""
    quick = bool(getattr(args, "quick", False))
    refreshes = 15 if quick else 60
    idle_s = 10.0 if quick else 30.0
    times, cpu_fixture = asyncio.run(_fixture_cluster(refreshes, idle_s))
    cpu_agents = _loopback_idle(idle_s)
    median = statistics.median(times)
    p95 = sorted(times)[max(int(round(0.95 * len(times))) - 1, 0)]
    where = f"{NODES} nodes × {GPUS} GPUs, Cluster step at {SIZE[0]}×{SIZE[1]}, {len(times)} refreshes at 1 Hz"
    return [
        {"measure": f"update time (CPU), median ({where})", "value": round(median, 2), "unit": "ms",
         "target": f"<= {TARGET_MS:g} ms (ratio = value/target)", "ratio": round(median / TARGET_MS, 3)},
        {"measure": f"update time (CPU), p95 ({where})", "value": round(p95, 2), "unit": "ms"},
        {"measure": f"idle-refresh CPU, {NODES}×{GPUS} fixture nodes at 1 Hz over {idle_s:g} s", "value": round(cpu_fixture, 1),
         "unit": "% of one core", "target": "reported"},
        {"measure": f"idle-refresh CPU, 3 real agents on loopback (HTTP) at 1 Hz over {idle_s:g} s", "value": round(cpu_agents, 1),
         "unit": "% of one core", "target": "reported"},
    ]


async def _fixture_cluster(refreshes: int, idle_s: float) -> tuple[list[float], float]:
    from tests.tui.fixture_cluster import FixtureClient, fixture_config
    from tui.app.app import FtwizApp
    from tui.app.messages import ClusterUpdated
    from tui.app.screens.cluster_screen import ClusterScreen


    config = fixture_config(NODES)
    client = FixtureClient(config, {n.name: "h100-sxm-8x" for n in config.nodes})
    # poll_limit=1: the app polls once by itself; the benchmark drives the refreshes it times.
    app = FtwizApp(config, None, client_factory=lambda c: client, poll_limit=1, poll_interval=3600)
    times: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        while app.cluster.polls < 1 or not isinstance(app.screen, ClusterScreen):
            await pilot.pause(0.05)
        for _ in range(refreshes):
            started = time.monotonic()
            statuses = await client.poll()
            cpu0 = time.process_time()
            app.cluster.apply(statuses.values())
            app.screen.post_message(ClusterUpdated(app.cluster.polls))
            await pilot.pause()  # the screen handles the message (table and detail redrawn) and paints
            times.append((time.process_time() - cpu0) * 1000)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    cpu = await _idle_cpu(FtwizApp(config, None, client_factory=lambda c: FixtureClient(c, {n.name: "h100-sxm-8x" for n in c.nodes}),
                                   poll_interval=1.0), idle_s)
    return times, cpu


async def _idle_cpu(app: Any, seconds: float) -> float:
    """This process's CPU (% of one core) while ``app`` refreshes by itself for ``seconds``."""
    async with app.run_test(size=SIZE) as pilot:
        while app.cluster.polls < 2:
            await pilot.pause(0.1)
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu1, wall1 = time.process_time(), time.monotonic()
    return (cpu1 - cpu0) / (wall1 - wall0) * 100


def _loopback_idle(seconds: float) -> float:
    from tests.tui.agents import start_agents
    from tui.app.app import FtwizApp

    specs = [("node0", "127.0.0.51", "h100-sxm-8x"), ("node1", "127.0.0.52", "rtx4090-1x"), ("node2", "127.0.0.53", None)]
    cluster = start_agents(Path(tempfile.mkdtemp(prefix="tui-bench-")), specs)
    try:
        return asyncio.run(_idle_cpu(FtwizApp(cluster.config(), None, poll_interval=1.0), seconds))
    finally:
        cluster.close()
