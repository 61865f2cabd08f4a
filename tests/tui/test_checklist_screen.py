"""Checklist step with the real engine over loopback agents: progress, rows, re-run one, launch gate."""

from __future__ import annotations

from tests.tui.screen_text import flat_text, screen_text
from tests.tui.waiting import wait_for
from tui.app.screens.checklist_screen import ChecklistScreen
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.launch_screen import LaunchScreen
from tui.app.widgets.checklist.check_table import CheckTable


async def test_run_all_shows_progress_then_rows_and_blocks_launch(make_app):
    app = make_app(poll_interval=2, start_step="checklist")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ChecklistScreen), what="the checklist step")
        assert "Not run yet" in screen_text(app)
        await pilot.press("r")
        await wait_for(pilot, lambda: app.checks.in_progress, what="the run to start", timeout=10)
        await wait_for(pilot, lambda: "Running checks:" in screen_text(app) and "⋯ run" in screen_text(app), what="visible progress", timeout=10)
        await wait_for(pilot, lambda: not app.checks.in_progress, what="the checklist to finish", timeout=120)
        results = app.checks.results
        by = {(r.id, r.node): r.status for r in results}
        assert by[("agent.reachable", "node0")] == "pass"
        assert by[("agent.reachable", "node3")] == "fail"  # the down node
        assert by[("gpu.processes", "node0")] in ("warn", "fail")  # GPU3 holds 72 GiB in the H100 fixture
        text = screen_text(app)
        assert "✔ pass" in text and "✖ fail" in text and "launch blocked (o overrides)" in text
        # The detail pane shows the selected row's detail and its fix.
        table = app.screen.query_one(CheckTable)
        row = next(i for i, r in enumerate(results) if r.id == "agent.reachable" and r.node == "node3")
        table.move_cursor(row=row)
        await pilot.pause()
        detail = flat_text(app)
        assert "[agent.reachable] on node3" in detail and "Fix: start the agent on node3" in detail
        # Launch refuses while a check fails.
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
        await pilot.press("l")
        await wait_for(pilot, lambda: "Launch blocked" in screen_text(app), what="the refusal")
        assert app.launch.run is None
        assert "check(s) failed" in flat_text(app)


async def test_override_needs_confirmation_and_rerun_one_keeps_the_others(make_app):
    app = make_app(poll_interval=2, start_step="checklist")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ChecklistScreen), what="the checklist step")
        await pilot.press("r")
        await wait_for(pilot, lambda: app.checks.config_dump is not None and not app.checks.in_progress, what="the checklist", timeout=120)
        before = [(r.id, r.node) for r in app.checks.results]
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the override question")
        assert "Allow the launch anyway?" in flat_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ChecklistScreen), what="back")
        assert not app.checks.override
        assert app.checks.launch_blocker(app.config) is not None
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the override question")
        await pilot.click("#override")
        await wait_for(pilot, lambda: app.checks.override, what="the override")
        assert app.checks.launch_blocker(app.config) is None
        assert "launch overridden" in screen_text(app)
        # Re-run only the row under the cursor (the first: agent.reachable).
        runs = app.checks.runs
        await pilot.press("space")
        await wait_for(pilot, lambda: app.checks.runs > runs, what="the one-check run", timeout=60)
        assert [(r.id, r.node) for r in app.checks.results] == before
        assert app.checks.override  # re-running one check keeps the override
