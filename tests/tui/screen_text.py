"""The screen as plain text (what a terminal would show), for assertions and captures."""

from __future__ import annotations

from textual.app import App


def screen_text(app: App) -> str:
    """Every line of the current screen, trailing blanks stripped."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)


def flat_text(app: App) -> str:
    """The screen as one line: borders dropped and wrapped lines joined (for phrases that wrap)."""
    lines = [line.strip(" │╭╮╰╯─") for line in screen_text(app).splitlines()]
    return " ".join(" ".join(lines).split())
