"""The estimator's per-GPU peak, itemised, as stacked bars against each GPU's free memory.

A bar's full width is that GPU's free memory; the coloured segments are the estimate's items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from rich.console import Group
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui.app.render import GIB, Palette, fmt_bytes, stacked_bar

__all__ = ["FitChart", "FitRow", "ITEM_STYLES"]

ITEM_STYLES = ["dodger_blue2", "medium_purple2", "dark_orange", "green3", "gold3", "deep_pink3", "cyan3", "grey62", "orchid", "khaki3"]
"""Segment colours, in item order (readable on dark and light themes)."""


@dataclass
class FitRow:
    """One bar: a GPU (or a run of identical GPUs of one node) and the estimator's verdict for it."""

    label: str
    """``node0 GPU0`` or ``node0 GPU0-7``."""
    free_bytes: Optional[int]
    """Free memory the agent reports (None: unknown)."""
    total_bytes: Optional[int]
    """The GPU's memory size."""
    verdict: str
    """fits / tight / won't fit (the estimator's words)."""
    lever: str = ""
    """The biggest lever to pull when it does not fit comfortably."""


class FitChart(VerticalScroll):
    """Legend of the items, then one stacked bar per GPU scaled to that GPU's free memory."""

    def compose(self):
        yield Static(id="fit-body")

    def show(self, items: Sequence[tuple[str, int]], rows: Sequence[FitRow], palette: Palette, *, note: str = "",
             notes: Sequence[str] = (), bar_width: int = 24) -> None:
        """Draw the estimate ``items`` (label, bytes per GPU) against ``rows``; the legend and notes follow."""
        body = self.query_one("#fit-body", Static)
        parts: list[Text] = []
        total = sum(size for _, size in items)
        if items:
            parts.append(Text(f"Per-GPU peak ≈ {fmt_bytes(total)}", style="bold"))
        if note:
            parts.append(Text(note, style=palette.muted))
        styled = [(float(size), ITEM_STYLES[i % len(ITEM_STYLES)]) for i, (_, size) in enumerate(items)]
        width = max(bar_width, 10)
        for row in rows:
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(f"{row.label:<12.12} ")
            if row.free_bytes is None:
                line.append("free memory unknown".ljust(width), style=palette.muted)
            else:
                line.append_text(stacked_bar(styled, float(row.free_bytes), width, empty_style=palette.muted))
            free = "?" if row.free_bytes is None else f"{row.free_bytes / GIB:.1f}G"
            line.append(f" {free:>6} ")
            colour = {"fits": palette.ok, "tight": palette.warn}.get(row.verdict, palette.bad)
            line.append(row.verdict, style=f"bold {colour}")
            parts.append(line)
            if row.lever and row.verdict != "fits":
                parts.append(Text(f"  → {row.lever}", style=palette.muted))
        if not rows and items:
            parts.append(Text("No GPU reported yet: the bars appear when the agents answer.", style=palette.muted))
        if items:
            legend = Text()
            for index, (label, size) in enumerate(items):
                legend.append("■ ", style=ITEM_STYLES[index % len(ITEM_STYLES)])
                legend.append(f"{label} {size / GIB:.2f}  ")
            legend.append("(GiB)", style=palette.muted)
            parts.append(legend)
        for text in notes:
            parts.append(Text(f"· {text}", style=palette.muted))
        body.update(Group(*parts) if parts else Text("Waiting for the estimate…", style=palette.muted))
