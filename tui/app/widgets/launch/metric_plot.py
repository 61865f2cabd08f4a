"""A labelled sparkline of one training metric (loss, tokens/s) over the run."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Sparkline, Static

__all__ = ["MetricPlot"]


class MetricPlot(Horizontal):
    """``loss 1.234  ▇▆▅▄▃▂▂▁`` — the latest value and every value seen, squeezed to the width."""

    def __init__(self, label: str, fmt: Callable[[float], str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._label = label
        self._fmt = fmt

    def compose(self) -> ComposeResult:
        yield Static(f"{self._label} —", classes="metric-label")
        yield Sparkline([], classes="metric-line")

    def show(self, values: Sequence[float]) -> None:
        """Plot ``values`` (oldest first)."""
        latest: Optional[float] = values[-1] if values else None
        self.query_one(".metric-label", Static).update(f"{self._label} {self._fmt(latest) if latest is not None else '—'}")
        self.query_one(Sparkline).data = list(values)
