"""One row per node: state, GPUs with per-GPU memory, 60 s utilisation, temperature, power.

A line-API widget (only the rows on screen are drawn, each once per poll), so a 64-node cluster
refreshes every second without redrawing what nobody sees. The header stays put when the rows scroll.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Optional

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive, reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from shared.models import NodeReport
from tui.app.cluster_state import HISTORY_SECONDS, ClusterState, NodeView
from tui.app.render import Palette, sparkline, vbar

__all__ = ["NodeTable", "gpu_model", "short_gpu_name"]

_COLUMNS: list[tuple[str, int]] = [
    ("Node", 10),
    ("State", 8),
    ("GPUs · memory used", 24),
    ("Util 60s", 13),
    ("Temp", 5),
    ("Power", 6),
]
"""(header, width); with a space either side of each column a row is 78 cells: it fits 80 columns."""
_NOT_UP = {"down": "no answer", "unauthorized": "token rejected", "incompatible": "other schema", "pending": "waiting…"}
_STATE_LABEL = {"up": "● up", "down": "✖ down", "unauthorized": "✖ auth", "incompatible": "✖ schema", "pending": "… wait"}


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


class NodeTable(ScrollView, can_focus=True):
    """The cluster's nodes in config order; the highlighted row is the node the detail pane shows."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"node-table--header", "node-table--cursor"}
    DEFAULT_CSS = """
    NodeTable {
        height: auto;
        max-height: 100%;
        background: $surface;
        & > .node-table--header { text-style: bold; background: $panel; }
        & > .node-table--cursor { background: $block-cursor-blurred-background; }
        &:focus > .node-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor(-100000)", "First", show=False),
        Binding("end", "cursor(100000)", "Last", show=False),
    ]

    @dataclass
    class Highlighted(Message):
        """The cursor moved to another node."""

        name: Optional[str]
        """The node now under the cursor."""

    cursor_row: Reactive[int] = reactive(0, init=False)
    """Index of the highlighted node."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._names: list[str] = []
        self._cluster: Optional[ClusterState] = None
        self._palette = Palette()
        self._row_cache: dict[tuple[str, int, bool], Strip] = {}

    # ------------------------------------------------------------------ data

    def show(self, cluster: ClusterState, palette: Palette) -> None:
        """Draw ``cluster``'s nodes; rows are rebuilt lazily, when they come on screen."""
        self._cluster, self._palette = cluster, palette
        names = list(cluster.nodes)
        if names != self._names:
            selected = self.selected_name
            self._names = names
            self.virtual_size = Size(self._row_width(), len(names) + 1)
            row = names.index(selected) if selected in names else min(self.cursor_row, max(len(names) - 1, 0))
            self.set_reactive(NodeTable.cursor_row, row)
            self.post_message(self.Highlighted(self.selected_name))
        self._row_cache.clear()
        self.refresh()

    @property
    def selected_name(self) -> Optional[str]:
        """The node under the cursor, if any."""
        if not self._names or not 0 <= self.cursor_row < len(self._names):
            return None
        return self._names[self.cursor_row]

    def row_text(self, name: str) -> Text:
        """The row of node ``name`` as styled text (what the screen shows, for tests and captures)."""
        assert self._cluster is not None
        return self._row(self._cluster.nodes[name])

    # ------------------------------------------------------------------ cursor

    def action_cursor(self, delta: int) -> None:
        """Move the highlight by ``delta`` rows (clamped)."""
        if self._names:
            self.cursor_row = max(0, min(len(self._names) - 1, self.cursor_row + delta))

    def action_page(self, direction: int) -> None:
        """Move the highlight by a screenful."""
        self.action_cursor(direction * max(self.size.height - 2, 1))

    def watch_cursor_row(self, old: int, new: int) -> None:
        top = self.scroll_offset.y
        visible = max(self.size.height - 1, 1)
        if new < top:
            self.scroll_to(y=new, animate=False)
        elif new >= top + visible:
            self.scroll_to(y=new - visible + 1, animate=False)
        self._row_cache.clear()
        self.refresh()
        self.post_message(self.Highlighted(self.selected_name))

    def on_click(self, event: events.Click) -> None:
        row = self.scroll_offset.y + event.y - 1
        if event.y >= 1 and 0 <= row < len(self._names):
            self.cursor_row = row

    # ------------------------------------------------------------------ drawing

    def _row_width(self) -> int:
        return sum(width + 2 for _, width in _COLUMNS)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            style = self.get_component_rich_style("node-table--header")
            header = Text(no_wrap=True)
            for title, column in _COLUMNS:
                header.append(" " + title.ljust(column)[:column] + " ")
            return self._strip(header, width, style)
        row = self.scroll_offset.y + y - 1
        base = self.rich_style
        if row >= len(self._names) or self._cluster is None:
            return Strip.blank(width, base)
        name = self._names[row]
        view = self._cluster.nodes.get(name)
        if view is None:  # removed from the config; the next show() drops the row
            return Strip.blank(width, base)
        cursor = row == self.cursor_row
        key = (name, row, cursor)
        strip = self._row_cache.get(key)
        if strip is None or strip.cell_length != width:
            style = base + self.get_component_rich_style("node-table--cursor") if cursor else base
            strip = self._row_cache[key] = self._strip(self._row(view), width, style)
        return strip

    def _strip(self, text: Text, width: int, style: Style) -> Strip:
        segments = [Segment(segment.text, style + segment.style if segment.style else style) for segment in text.render(self.app.console)
                    if segment.text != "\n"]
        return Strip(segments).crop_extend(self.scroll_offset.x, self.scroll_offset.x + width, style)

    def _row(self, view: NodeView) -> Text:
        palette = self._palette
        bad = view.state not in ("up", "pending")
        row_style = f"bold {palette.bad}" if bad else ""
        state_style = {"up": palette.ok, "pending": palette.muted}.get(view.state, f"bold {palette.bad}")
        cells = [
            Text(view.name, style=row_style),
            Text(_STATE_LABEL.get(view.state, view.state), style=state_style),
        ]
        report = view.report
        if report is None or bad:
            why = _NOT_UP.get(view.state, view.state)
            if report is not None:
                why += " · last values in the detail"
            cells.append(Text(why, style=row_style or palette.muted))
        else:
            cells += _gpu_cells(report, view, palette)
        line = Text(no_wrap=True)
        for index, (_, width) in enumerate(_COLUMNS):
            cell = cells[index] if index < len(cells) else Text("")
            if index == 2 and len(cells) == 3:  # a reason spans the GPU, utilisation, temperature and power columns
                span = sum(w + 2 for _, w in _COLUMNS[2:]) - 2
                line.append(" ")
                line.append_text(_fit(cell, span))
                break
            line.append(" ")
            line.append_text(_fit(cell, width))
            line.append(" ")
        return line


def _fit(text: Text, width: int) -> Text:
    """``text`` cut with an ellipsis or padded to exactly ``width`` cells."""
    text = text.copy()
    text.truncate(width, overflow="ellipsis", pad=True)
    return text


def _gpu_cells(report: NodeReport, view: NodeView, palette: Palette) -> list[Text]:
    if not report.gpus:
        return [Text(f"no GPU ({report.nvml_error or 'none reported'})", style=palette.warn)]
    models = {gpu_model(g.name) for g in report.gpus}
    model = models.pop() if len(models) == 1 else "mixed"
    gpus = Text(f"{len(report.gpus)}× {model[:10]:<10} ")
    for gpu in report.gpus[:8]:
        fraction = None
        if gpu.memory_total_bytes and gpu.memory_used_bytes is not None:
            fraction = gpu.memory_used_bytes / gpu.memory_total_bytes
        gpus.append_text(vbar(fraction, palette))
    if len(report.gpus) > 8:
        gpus.append("+", style=palette.muted)
    util = sparkline(list(view.node_util), 13, window=HISTORY_SECONDS, style=palette.accent)
    temps = [g.temperature_c for g in report.gpus if g.temperature_c is not None]
    temp = Text(f"{max(temps):.0f}°C" if temps else "—", style=palette.level(max(temps) / 95) if temps else palette.muted)
    watts = [g.power_draw_w for g in report.gpus if g.power_draw_w is not None]
    total = sum(watts)
    power = Text((f"{total / 1000:.1f}kW" if total >= 1000 else f"{total:.0f}W") if watts else "—")
    return [gpus, util, temp, power.copy()]
