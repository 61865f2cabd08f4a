"""The TUI's failure panel ends a failed run with the doctor's cause and fix (a harness app per widget)."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tests.tui.screen_text import screen_text
from tui.app.render import Palette
from tui.app.widgets.launch.run_outcome import RunOutcome
from tui.doctor import Diagnosis, Evidence, format_first
from tui.launch.events import RunResult
from tui.runs.status import RunStatus


class _Harness(App):
    def compose(self) -> ComposeResult:
        yield RunOutcome()


async def test_the_failure_panel_shows_the_first_diagnosis():
    why = format_first([Diagnosis("oom.host", "node1", 2, [Evidence("node1:kernel", 0, "Killed process 42 (python)")],
                                  "the kernel's OOM killer killed pid 42 on node1 (rank 2): host memory ran out",
                                  "lower micro_batch_size or add RAM on node1", confirmed=True)])
    result = RunResult("r9", RunStatus.FAILED, 1, reason="rank 2 failed", failed_node="node1", failed_rank=2,
                       last_lines=["node1/- | failed (exitcode: -9)"])
    app = _Harness()
    async with app.run_test(size=(160, 20)) as pilot:
        panel = app.query_one(RunOutcome)
        panel.show(result, None, Palette.from_app(app), can_resume=False, why=why)
        await pilot.pause()
        text = screen_text(app)
        assert "why: oom.host — the kernel's OOM killer killed pid 42 on node1 (rank 2)" in text
        assert "fix: lower micro_batch_size or add RAM on node1" in text and "ftwiz --why r9" in text
        assert "node1/- | failed (exitcode: -9)" in text
        panel.show(result, None, Palette.from_app(app), can_resume=False)  # no diagnosis: no line for it
        await pilot.pause()
        assert "why:" not in screen_text(app)
