"""Routing advice for the job, each piece with its reason."""

from __future__ import annotations

from typing import Any, Sequence

from rich.console import Group
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui.app.render import Palette

__all__ = ["AdvicePanel"]


class AdvicePanel(VerticalScroll):
    """A list of ``(advice, reason)`` items; the reason sits under its advice, dimmed."""

    def compose(self):
        yield Static(id="advice-body")

    def show(self, advice: Sequence[Any], palette: Palette, *, note: str = "") -> None:
        """Draw ``advice`` items; ``warn`` ones (the job goes against the advice) stand out."""
        parts: list[Text] = []
        for item in advice:
            title, reason, level = _fields(item)
            colour = {"warn": palette.warn, "fail": palette.bad, "error": palette.bad}.get(level, palette.accent)
            parts.append(Text("• " + title, style=f"bold {colour}"))
            if reason:
                parts.append(Text("  " + reason, style=palette.muted))
        if not parts:
            parts.append(Text(note or "No advice for this job.", style=palette.muted))
        elif note:
            parts.append(Text(note, style=palette.muted))
        self.query_one("#advice-body", Static).update(Group(*parts))


def _fields(item: Any) -> tuple[str, str, str]:
    """``(headline, reason, severity)`` of a :class:`shared.routing.Advice` (or a ``(text, reason)`` pair)."""
    if isinstance(item, tuple):
        return str(item[0]), str(item[1]) if len(item) > 1 else "", "info"
    headline = f"{item.title}: {item.recommendation}" if getattr(item, "recommendation", "") else str(item.title)
    return headline, str(item.reason or ""), str(item.severity or "info")
