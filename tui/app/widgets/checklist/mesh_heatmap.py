"""The full mesh as a heatmap: nodes × nodes, each cell the Gbit/s from the row's node to the column's,
coloured against the cluster's typical link, slow links marked ``!`` and delayed pairs ``~``."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from shared import meshplan
from shared.meshplan import MeshMatrix
from tui.app.render import Palette

__all__ = ["MeshHeatmap", "render_heatmap"]

CELL = 8
"""Characters per cell: ``12.34!~`` and padding."""


def _colour(value: float | None, typical: float | None, palette: Palette) -> str:
    if value is None or not typical:
        return palette.muted
    ratio = value / typical
    if ratio < meshplan.SLOW_FRACTION:
        return palette.bad
    return palette.warn if ratio < 0.5 else palette.ok


def render_heatmap(mesh: MeshMatrix, palette: Palette) -> Text:
    """The matrix as text cells on coloured backgrounds, with a legend line."""
    slow = {(lk.src, lk.dst) for lk in meshplan.slow_links(mesh)}
    delayed = {(lk.src, lk.dst) for lk in meshplan.slow_latency(mesh)}
    typical = mesh.typical_gbit()
    label = max(6, *(len(n) for n in mesh.nodes)) + 1
    text = Text()
    text.append("Gbit/s".ljust(label), style="bold")
    for name in mesh.nodes:
        text.append(name[: CELL - 2].rjust(CELL - 1) + " ", style="bold")
    text.append("\n")
    for src, row in zip(mesh.nodes, mesh.matrix(), strict=False):
        text.append(src.ljust(label), style="bold")
        for dst, value in zip(mesh.nodes, row, strict=False):
            if src == dst:
                text.append("·".center(CELL), style=palette.muted)
                continue
            marks = ("!" if (src, dst) in slow else "") + ("~" if (src, dst) in delayed else "")
            figure = "—" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"
            text.append(" ")
            text.append(f"{figure}{marks}".rjust(CELL - 2) + " ", style=f"bold #000000 on {_colour(value, typical, palette)}")
        text.append("\n")
    typical_text = f"{typical:.2f} Gbit/s" if typical else "unknown"
    text.append(f"row sends → column receives; typical link {typical_text}\n", style=palette.muted)
    text.append("! slow", style=f"bold {palette.bad}")
    text.append(f" (< {meshplan.SLOW_FRACTION:.0%} of typical)  ", style=palette.muted)
    text.append("~ delayed", style=f"bold {palette.warn}")
    text.append(f" (connect > {meshplan.MAX_LATENCY_MS:g} ms)", style=palette.muted)
    return text


class MeshHeatmap(Static):
    """The last checklist run's mesh; hidden until one was measured."""

    DEFAULT_CSS = """
    MeshHeatmap {
        height: auto;
        padding: 0 1;
    }
    """

    def show(self, mesh: MeshMatrix | None, palette: Palette, *, age_s: float | None = None, refreshing: bool = False) -> None:
        """Draw ``mesh`` (None hides the widget) under a line with its age and whether it is being re-measured."""
        self.display = mesh is not None
        if mesh is not None:
            text = Text()
            text.append(f"full mesh, {mesh_age_text(age_s)}", style=palette.muted)
            if refreshing:
                text.append(" · measuring every pair again in the background…", style=palette.muted)
            text.append("\n")
            text.append_text(render_heatmap(mesh, palette))
            self.update(text)


def mesh_age_text(age_s: float | None) -> str:
    """``measured just now`` / ``measured 3 min ago`` / ``measured 2.5 h ago``."""
    if age_s is None or age_s < 5:
        return "measured just now"
    if age_s < 120:
        return f"measured {age_s:.0f} s ago"
    if age_s < 7200:
        return f"measured {age_s / 60:.0f} min ago"
    return f"measured {age_s / 3600:.1f} h ago"
