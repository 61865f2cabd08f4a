"""One row per node: state, GPUs, per-GPU memory, 60 s utilisation, temperature, power."""

from __future__ import annotations

import re
from typing import Optional

from rich.text import Text
from textual.widgets import DataTable

from shared.models import NodeReport
from tui.app.cluster_state import HISTORY_SECONDS, ClusterState, NodeView
from tui.app.render import Palette, sparkline, vbar

__all__ = ["NodeTable", "gpu_model", "short_gpu_name"]

_COLUMNS: list[tuple[str, str, int]] = [
    ("node", "Node", 10),
    ("state", "State", 8),
    ("gpus", "GPUs · memory used", 24),
    ("util", "Util 60s", 13),
    ("temp", "Temp", 5),
    ("power", "Power", 6),
]
"""(key, header, width): 78 columns with the cell padding, so a row fits an 80-column terminal."""
_NOT_UP = {"down": "no answer", "unauthorized": "token rejected", "incompatible": "other schema", "pending": "waiting…"}
_STATE_LABEL = {
    "up": "● up",
    "down": "✖ down",
    "unauthorized": "✖ auth",
    "incompatible": "✖ schema",
    "pending": "… wait",
}


def short_gpu_name(name: Optional[str]) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``H100 80GB HBM3``; the vendor prefix wastes a narrow column."""
    if not name:
        return "GPU"
    for prefix in ("NVIDIA ", "GeForce ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name


def gpu_model(name: Optional[str]) -> str:
    """The model alone: ``NVIDIA H100 80GB HBM3`` → ``H100``, ``NVIDIA GeForce RTX 4090`` → ``RTX 4090``."""
    words = []
    for word in short_gpu_name(name).replace("-", " ").split():
        if re.search(r"\d+GB|HBM|PCIE|SXM|NVL", word.upper()):
            break
        words.append(word)
    return " ".join(words) or short_gpu_name(name)


class NodeTable(DataTable):
    """The cluster's nodes. Highlighting a row selects the node for the detail pane."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self._order: list[str] = []

    def on_mount(self) -> None:
        for key, label, width in _COLUMNS:
            self.add_column(label, key=key, width=width)

    def show(self, cluster: ClusterState, palette: Palette) -> None:
        """Draw every node; rows are rebuilt only when the set of nodes changed."""
        names = list(cluster.nodes)
        if names != self._order:
            selected = self.selected_name
            self.clear()
            for name in names:
                self.add_row(*self._cells(cluster.nodes[name], palette), key=name)
            self._order = names
            if selected in names:
                self.move_cursor(row=names.index(selected))
            return
        for name in names:
            for (key, _, _), cell in zip(_COLUMNS, self._cells(cluster.nodes[name], palette)):
                self.update_cell(name, key, cell)

    @property
    def selected_name(self) -> Optional[str]:
        """The node under the cursor, if any."""
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def _cells(self, view: NodeView, palette: Palette) -> list[Text]:
        report = view.report
        bad = view.state not in ("up", "pending")
        row_style = f"bold {palette.bad}" if bad else ""
        state_style = {"up": palette.ok, "pending": palette.muted}.get(view.state, f"bold {palette.bad}")
        cells = [
            Text(view.name, style=row_style, no_wrap=True, overflow="ellipsis"),
            Text(_STATE_LABEL.get(view.state, view.state), style=state_style, no_wrap=True),
        ]
        if report is None or bad:
            why = _NOT_UP.get(view.state, view.state)
            if report is not None:
                why += " · last values in the detail"
            cells += [Text(why, style=row_style or palette.muted, no_wrap=True, overflow="ellipsis")] + [Text("")] * 3
            return cells
        cells += _gpu_cells(report, view, palette, row_style)
        return cells


def _gpu_cells(report: NodeReport, view: NodeView, palette: Palette, row_style: str) -> list[Text]:
    if not report.gpus:
        reason = report.nvml_error or "none reported"
        return [
            Text(f"no GPU ({reason})", style=row_style or palette.warn, no_wrap=True, overflow="ellipsis"),
            Text(""),
            Text(""),
            Text(""),
        ]
    models = {gpu_model(g.name) for g in report.gpus}
    model = models.pop() if len(models) == 1 else "mixed"
    gpus = Text(no_wrap=True, overflow="ellipsis")
    gpus.append(f"{len(report.gpus)}× {model[:10]:<10} ", style=row_style)
    for gpu in report.gpus[:8]:
        fraction = None
        if gpu.memory_total_bytes and gpu.memory_used_bytes is not None:
            fraction = gpu.memory_used_bytes / gpu.memory_total_bytes
        gpus.append_text(vbar(fraction, palette))
    if len(report.gpus) > 8:
        gpus.append("+", style=palette.muted)
    util = sparkline(list(view.node_util), 13, window=HISTORY_SECONDS, style=row_style or palette.accent)
    temps = [g.temperature_c for g in report.gpus if g.temperature_c is not None]
    temp = Text(f"{max(temps):.0f}°C" if temps else "—", style=row_style or (palette.level(max(temps) / 95) if temps else palette.muted))
    watts = [g.power_draw_w for g in report.gpus if g.power_draw_w is not None]
    total = sum(watts)
    power = Text((f"{total / 1000:.1f}kW" if total >= 1000 else f"{total:.0f}W") if watts else "—", style=row_style)
    return [gpus, util, temp, power]
