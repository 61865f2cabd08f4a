"""Bounded waits for pilot tests: poll a condition while the app runs, fail with what was seen."""

from __future__ import annotations

import time
from typing import Callable

from textual.pilot import Pilot

from tests.tui.screen_text import screen_text


async def wait_for(pilot: Pilot, condition: Callable[[], object], *, timeout: float = 30.0, what: str = "condition") -> None:
    """Let the app run until ``condition()`` is truthy; fail after ``timeout`` s showing the screen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; the screen shows:\n{screen_text(pilot.app)}")
