"""Snapshot of the mesh heatmap (pytest-textual-snapshot) from fixture data, in a small harness app.

The matrix is constructed for this picture, not recorded: four nodes, node3's link shaped (figures
like the 100 Mbit/s ``tbf`` runs of ``test_mesh_cluster.py``: 0.09-0.10 Gbit/s), node0 → node1 delayed
by 20 ms, the healthy links within the 1.6-4.5 Gbit/s this machine's namespace links gave unshaped.
"""

from __future__ import annotations

from textual.app import App, ComposeResult

from shared.meshplan import Link, MeshMatrix
from tui.app.render import Palette
from tui.app.widgets.checklist.mesh_heatmap import MeshHeatmap, render_heatmap

NAMES = ["node0", "node1", "node2", "node3"]
GBIT = {
    ("node0", "node1"): 1.21, ("node1", "node0"): 0.63, ("node0", "node2"): 3.58, ("node2", "node0"): 2.97,
    ("node1", "node2"): 4.51, ("node2", "node1"): 3.88,
}
LATENCY = {("node0", "node1"): 20.6, ("node1", "node0"): 20.6}


def fixture_mesh() -> MeshMatrix:
    links = [Link(src=a, dst=b, gbit_per_s=GBIT.get((a, b), 0.09 if "node3" == a else 0.1),
                  latency_ms=LATENCY.get((a, b), 0.2)) for a in NAMES for b in NAMES if a != b]
    return MeshMatrix(nodes=NAMES, links=links, rounds=3, seconds=4.2, stream_seconds=0.5)


class HeatmapApp(App):
    """Just the heatmap, drawn from :func:`fixture_mesh`."""

    def compose(self) -> ComposeResult:
        yield MeshHeatmap(id="mesh-heatmap")

    def on_mount(self) -> None:
        self.query_one(MeshHeatmap).show(fixture_mesh(), Palette.from_app(self))


def test_heatmap_marks_the_shaped_node_and_the_delayed_pair(snap_compare):
    assert snap_compare(HeatmapApp(), terminal_size=(80, 12))


def test_heatmap_text_marks():
    text = render_heatmap(fixture_mesh(), Palette()).plain
    lines = text.splitlines()
    assert lines[0].split() == ["Gbit/s", *NAMES]
    assert lines[1].split() == ["node0", "·", "1.21~", "3.58", "0.10!"]
    assert lines[4].split() == ["node3", "0.09!", "0.09!", "0.09!", "·"]
    assert "typical link 4.04 Gbit/s" in lines[5] and "! slow" in lines[6]  # median of each node's best link


def test_heatmap_hidden_without_a_mesh():
    widget = MeshHeatmap()
    widget.show(None, Palette())
    assert widget.display is False
