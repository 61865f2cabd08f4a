"""Every standard Textual theme draws every step (colours come from the theme, ANSI themes included)."""

from __future__ import annotations

import pytest
from textual.theme import BUILTIN_THEMES

from tests.tui.screen_text import screen_text
from tests.tui.waiting import wait_for


@pytest.mark.slow  # 21 themes x 5 steps: half a minute
async def test_every_builtin_theme_draws_every_step(make_app):
    app = make_app(poll_interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "8× H100" in screen_text(app), what="the node rows")
        for theme in BUILTIN_THEMES:
            app.theme = theme
            for key, marker in (("f2", "Node"), ("f3", "Memory per GPU"), ("f4", "Not run yet"), ("f5", "Ranks"), ("f1", "Keys")):
                await pilot.press(key)
                await wait_for(pilot, lambda: marker in screen_text(app), what=f"{marker!r} in theme {theme}", timeout=10)
            await pilot.press("escape")
        assert app.is_running
