"""The selected check in full: what was found, and the exact fix."""

from __future__ import annotations

from typing import Any, Optional

from rich.console import Group
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui.app.render import Palette
from tui.app.widgets.checklist.check_table import STATUS_GLYPH

__all__ = ["CheckDetail"]


class CheckDetail(VerticalScroll):
    """Detail and hint of one result, wrapped to the pane's width."""

    def compose(self):
        yield Static(id="check-detail-body")

    def show(self, result: Optional[Any], palette: Palette) -> None:
        """Show ``result`` (None: a hint about the keys)."""
        body = self.query_one("#check-detail-body", Static)
        if result is None:
            body.update(Text("Select a check (↑/↓): its detail and the fix appear here.", style=palette.muted))
            return
        colour = {"pass": palette.ok, "warn": palette.warn, "fail": palette.bad}.get(result.status, palette.muted)
        head = Text()
        head.append(STATUS_GLYPH.get(result.status, result.status), style=f"bold {colour}")
        head.append(f"  {result.title}", style="bold")
        head.append(f"  [{result.id}]" + (f" on {result.node}" if result.node else " (cluster)"), style=palette.muted)
        parts = [head, Text(result.detail or "—")]
        if result.hint:
            fix = Text("Fix: ", style=f"bold {palette.accent}")
            fix.append(result.hint)
            parts.append(fix)
        body.update(Group(*parts))
