"""The mesh and the sync forecast as output: the ``--json`` objects and the small terminal table.

``mesh_json`` is the ``"mesh"`` key of ``ftwiz --check --json``::

    {"nodes": ["node0", "node1"], "gbit_per_s": [[null, 9.4], [9.1, null]],
     "latency_ms": [[null, 0.12], [0.11, null]], "median_gbit_per_s": 9.25,
     "slow": [{"src": "node1", "dst": "node0", "gbit_per_s": 0.09}], "delayed": [...],
     "links": [{"src", "dst", "latency_ms", "gbit_per_s", "error"}], "rounds": 1, "seconds": 1.3,
     "mode": "quick", "age_s": 312.5, "reason": "...", "measured_s": 1.4, "pairs": [{"src", "dst", "latency_ms", "gbit_per_s", "error"}]}

The matrix is the full one (measured now, or cached and ``age_s`` old); ``mode`` says whether every pair
streamed this time (``full``) or the quick pass did (``quick``: the ring both ways plus every pair's connect
time), and ``pairs`` lists what was measured this time.

``rows[i][j]`` is ``nodes[i] → nodes[j]`` (sender in the row, receiver in the column).
"""

from __future__ import annotations

from typing import Any

from shared import meshplan
from shared.meshplan import MeshMatrix, MeshRun
from shared.syncplan import SyncForecast

__all__ = ["mesh_json", "mesh_plain", "mesh_table", "sync_json"]


def mesh_json(mesh: MeshMatrix, run: MeshRun | None = None) -> dict[str, Any]:
    """The matrix, the links and what is slow, and what was measured this time, as plain JSON."""
    measured = run.pairs if run is not None else [lk for lk in mesh.links if lk.latency_ms is not None or lk.gbit_per_s is not None]
    return {
        "nodes": mesh.nodes,
        "gbit_per_s": mesh.matrix("gbit_per_s"),
        "latency_ms": mesh.matrix("latency_ms"),
        "median_gbit_per_s": mesh.median_gbit(),
        "typical_gbit_per_s": mesh.typical_gbit(),
        "slow": [{"src": lk.src, "dst": lk.dst, "gbit_per_s": lk.gbit_per_s} for lk in meshplan.slow_links(mesh)],
        "delayed": [{"src": lk.src, "dst": lk.dst, "latency_ms": lk.latency_ms} for lk in meshplan.slow_latency(mesh)],
        "links": [link.model_dump(mode="json") for link in mesh.links],
        "rounds": mesh.rounds,
        "seconds": mesh.seconds,
        "stream_seconds": mesh.stream_seconds,
        "mode": run.mode if run is not None else "full",
        "age_s": run.age_s if run is not None else 0.0,
        "reason": run.reason if run is not None else "",
        "measured_s": run.seconds if run is not None else mesh.seconds,
        "pairs": [link.model_dump(mode="json") for link in measured],
    }


def sync_json(forecast: SyncForecast) -> dict[str, Any]:
    """The forecast as plain JSON (every field of :class:`SyncForecast`)."""
    return forecast.model_dump(mode="json")


def _cell(value: float | None, slow: bool) -> str:
    if value is None:
        return "—"
    text = f"{value:.2f}" if value < 100 else f"{value:.0f}"
    return f"{text}!" if slow else text


def mesh_plain(mesh: MeshMatrix) -> list[str]:
    """The Gbit/s matrix as aligned text lines (sender per row); slow links end in ``!``."""
    slow = {(lk.src, lk.dst) for lk in meshplan.slow_links(mesh)}
    width = max(7, *(len(n) for n in mesh.nodes))
    lines = ["Gbit/s  " + "".join(n.rjust(width + 1) for n in mesh.nodes) + "   (row → column; ! slow)"]
    for src, row in zip(mesh.nodes, mesh.matrix(), strict=False):
        cells = "".join(_cell(v, (src, dst) in slow).rjust(width + 1) for dst, v in zip(mesh.nodes, row, strict=False))
        lines.append(src.ljust(8) + cells)
    return lines


def mesh_table(mesh: MeshMatrix) -> Any:
    """A rich Table: Gbit/s (and connect ms) per ordered pair; slow links red, delayed pairs yellow."""
    from rich.table import Table
    from rich.text import Text

    slow = {(lk.src, lk.dst) for lk in meshplan.slow_links(mesh)}
    delayed = {(lk.src, lk.dst) for lk in meshplan.slow_latency(mesh)}
    table = Table(title=f"mesh: Gbit/s and connect ms, row → column ({mesh.rounds} rounds, {mesh.seconds:.1f} s)",
                  show_header=True, header_style="bold")
    table.add_column("from \\ to", no_wrap=True)
    for name in mesh.nodes:
        table.add_column(name, justify="right", no_wrap=True)
    gbit, ms = mesh.matrix("gbit_per_s"), mesh.matrix("latency_ms")
    for i, src in enumerate(mesh.nodes):
        cells = []
        for j, dst in enumerate(mesh.nodes):
            if i == j:
                cells.append(Text("·", style="dim"))
                continue
            text = f"{_cell(gbit[i][j], False)} / {_cell(ms[i][j], False)}"
            style = "bold red" if (src, dst) in slow else "yellow" if (src, dst) in delayed else ""
            cells.append(Text(text, style=style))
        table.add_row(src, *cells)
    return table
