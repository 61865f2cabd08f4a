"""The check engine: a crashing or hanging check becomes a row, never a crashed checklist."""

from __future__ import annotations

import asyncio

from tui.checks.base import CheckSpec
from tui.checks.engine import _run_one, ok


async def test_a_crashing_check_fails_with_a_bug_hint():
    def broken(ctx):
        raise TypeError("unhashable type: 'NodeConfig'")

    (row,) = await _run_one(CheckSpec("demo.broken", "broken check", broken), ctx=None, timeout=5)
    assert row.status == "fail" and "TypeError" in row.detail and "ftwiz bug" in row.hint and "--force" in row.hint
    assert not ok([row])


async def test_a_hanging_check_warns_after_its_timeout():
    async def slow(ctx):
        await asyncio.sleep(30)

    (row,) = await _run_one(CheckSpec("demo.slow", "slow check", slow), ctx=None, timeout=0.05)
    assert row.status == "warn" and "did not finish" in row.detail and row.hint
