"""Full-mesh time for 3 and 8 namespace nodes (agents only): ``net.mesh`` through the checklist engine.

Each row is the wall time of the mesh measurement (``MeshMatrix.seconds``: every ordered pair's
connects and bandwidth stream, in rounds of disjoint pairs), beside its floor measured from the same
schedule: rounds × 2 directions × the stream length, the time the streams alone must take. The target
is the issue's: 8 nodes in under 60 s. Needs root and the agent.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from tests.cluster import Cluster, cluster_support_problem

STREAM_SECONDS = 0.5
TARGET_8_NODES_S = 60.0


def _mesh_seconds(cluster: Cluster) -> tuple[float, int, int]:
    from tui.checks import run_checklist_full

    run = asyncio.run(run_checklist_full(cluster.config(workload="allreduce"), ssh=False, only=["net.mesh"],
                                         options={"bandwidth_seconds": STREAM_SECONDS}))
    mesh = run.mesh
    if mesh is None or any(link.error for link in mesh.links):
        raise RuntimeError(f"mesh incomplete: {[lk.error for lk in mesh.links if lk.error] if mesh else 'none'}")
    return mesh.seconds, mesh.rounds, len(mesh.links)


def run(args: Any) -> list[dict]:
    """Rows: mesh seconds for 3 and 8 nodes (median of repetitions), floor = rounds × 2 × stream seconds."""
    problem = cluster_support_problem(need_sshd=False, need_agent=True)
    if problem:
        raise RuntimeError(f"mesh bench cannot run: {problem}")
    repetitions = 1 if getattr(args, "quick", False) else 3
    rows = []
    for n in (3, 8):
        cluster = Cluster.create(n, sshd=False)
        try:
            samples = [_mesh_seconds(cluster) for _ in range(repetitions)]
        finally:
            cluster.close()
        seconds = statistics.median(s for s, _, _ in samples)
        rounds, links = samples[0][1], samples[0][2]
        floor = rounds * 2 * STREAM_SECONDS
        rows.append({
            "measure": f"full mesh, {n} nodes: {links} links in {rounds} rounds, {STREAM_SECONDS:g} s streams",
            "value": round(seconds, 3), "unit": "s", "baseline": floor, "ratio": round(seconds / floor, 3),
            "target": f"< {TARGET_8_NODES_S:g} s" if n == 8 else None,
            "samples": [round(s, 3) for s, _, _ in samples],
        })
    return rows
