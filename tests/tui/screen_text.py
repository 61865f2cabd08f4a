"""The screen as plain text (what a terminal would show), for assertions and captures."""

from __future__ import annotations

from textual.app import App


def screen_text(app: App) -> str:
    """Every line of the current screen, trailing blanks stripped."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)
