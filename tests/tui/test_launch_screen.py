"""Launch step with the real launcher: a local node runs torchrun (no SSH), as the embedded default does.

Covers: the all-reduce check to the end, the rank filter, stop-all behind a confirmation (and nothing
of the run left afterwards), and the failure view with the offer to resume.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.tui.agents import LoopbackCluster, start_agents
from tests.tui.screen_text import flat_text, screen_text
from tests.tui.waiting import wait_for
from tui.app.app import FtwizApp
from tui.app.screens.checklist_screen import ChecklistScreen
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.launch_screen import LaunchScreen
from tui.app.widgets.launch.node_logs import NodeLogs
from tui.app.widgets.launch.run_outcome import RunOutcome

pytestmark = pytest.mark.slow  # real torchrun runs


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """One agent on 127.0.0.31 for a local node (this machine, no GPU)."""
    cluster = start_agents(tmp_path_factory.mktemp("tui-solo"), [("solo", "127.0.0.31", None)])
    yield cluster
    cluster.close()


def _app(solo: LoopbackCluster, tmp_path: Path, **job) -> FtwizApp:
    from tui.launch.run import RunOptions

    config = solo.config(local=["solo"], job=job)
    return FtwizApp(config, None, poll_interval=2, start_step="checklist",
                    engines={"run_options": RunOptions(runs_dir=tmp_path / "runs", stop_grace_s=2.0)})


async def _checked(pilot, app: FtwizApp) -> None:
    await wait_for(pilot, lambda: isinstance(app.screen, ChecklistScreen), what="the checklist step")
    await pilot.press("r")
    await wait_for(pilot, lambda: app.checks.runs >= 1, what="the checklist", timeout=120)


def _processes_of(run_id: str) -> list[int]:
    """Pids on this machine whose environment carries FTWIZ_RUN_ID=run_id."""
    found = []
    needle = f"FTWIZ_RUN_ID={run_id}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


async def test_allreduce_check_runs_to_the_end_with_logs_and_result(solo, tmp_path):
    app = _app(solo, tmp_path, workload="allreduce", sizes_mb=[1, 2], iterations=10, warmup_iterations=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await _checked(pilot, app)
        assert not app.checks.failed, [(r.id, r.node, r.detail) for r in app.checks.failed]
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
        await pilot.press("l")
        await wait_for(pilot, lambda: app.launch.result is not None, what="the run to finish", timeout=240)
        result = app.launch.result
        assert result.status == "succeeded", result
        await pilot.pause(0.3)
        text = screen_text(app)
        assert f"Run {result.run_id}: succeeded" in text
        assert "all-reduce: 2/2 sizes measured" in text
        assert "started: rank 0 of 1" in text  # the log tab, protocol lines summarised
        assert '{"ftwiz"' not in text
        outcome = app.screen.query_one(RunOutcome)
        assert outcome.display and not outcome.query_one("#outcome-buttons").display  # no resume after success
        # The rank filter: rank 1 does not exist, so the log empties; blank shows everything again.
        filter_input = app.screen.query_one("#rank-filter")
        filter_input.focus()
        filter_input.value = "1"
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert app.screen.query_one(NodeLogs).ranks == {1}
        assert "started: rank 0" not in screen_text(app)
        filter_input.focus()
        filter_input.value = "x-"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Rank filter" in flat_text(app), what="the filter error")
        filter_input.value = ""
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert "started: rank 0 of 1" in screen_text(app)


async def test_stop_asks_then_stops_every_rank(solo, tmp_path):
    app = _app(solo, tmp_path, workload="allreduce", sizes_mb=[1] * 2000, iterations=2, warmup_iterations=0, pause_s=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await _checked(pilot, app)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
        await pilot.press("l")
        await wait_for(pilot, lambda: app.launch.node_states.get("solo", ("",))[0] == "running" and app.launch.lines.get("solo"),
                       what="the run to go", timeout=120)
        run_id = app.launch.run_id
        await wait_for(pilot, lambda: _processes_of(run_id), what="the run's processes")
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the stop question")
        assert "Stop run" in flat_text(app) and "on every node" in flat_text(app)
        await pilot.press("escape")  # keep running
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="back to the run")
        await pilot.pause(0.5)
        assert app.launch.active and _processes_of(run_id)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the stop question again")
        await pilot.click("#stop")
        await wait_for(pilot, lambda: app.launch.result is not None, what="the stop", timeout=60)
        assert app.launch.result.status == "stopped"
        assert _processes_of(run_id) == []
        assert "stopped" in flat_text(app)
        # A stopped all-reduce check is not resumable; a new launch is allowed again (once the screen drew the result:
        # the session's result is set on the event, the buttons on the redraw that follows it).
        await wait_for(pilot, lambda: not app.screen.query_one("#launch").disabled, what="the launch button enabled again")
        assert app.screen.query_one("#stop").disabled


async def test_failed_run_shows_node_rank_last_lines_and_offers_resume(solo, tmp_path):
    model_dir = tmp_path / "no-such-model"
    app = _app(solo, tmp_path, workload="sft", method="lora", model=str(model_dir), dataset=str(tmp_path / "missing.jsonl"), max_steps=2)
    async with app.run_test(size=(100, 34)) as pilot:
        await _checked(pilot, app)
        assert app.checks.failed  # the model and dataset are missing
        await pilot.press("o")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the override question")
        await pilot.click("#override")
        await wait_for(pilot, lambda: app.checks.override, what="the override")
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
        await pilot.press("l")
        await wait_for(pilot, lambda: app.launch.result is not None, what="the run to fail", timeout=240)
        result = app.launch.result
        assert result.status in ("failed", "launch_failed"), result
        await pilot.pause(0.3)
        text = flat_text(app)
        assert f"Run {result.run_id}: {result.status}" in text
        if result.status == "failed":
            assert "Failed: solo" in text and result.reason in text
            assert result.last_lines and result.last_lines[-1].strip()[:30] in text
        outcome = app.screen.query_one(RunOutcome)
        assert outcome.query_one("#outcome-buttons").display  # the offer to resume
        assert "Resume from the last checkpoint" in screen_text(app)
        # Resume starts a new run that continues the last one's output (the launcher's --resume).
        await pilot.press("u")
        await wait_for(pilot, lambda: app.launch.run_id not in (None, result.run_id), what="the resumed run", timeout=60)
        assert app.launch.run.resume and app.launch.run.record.data["resumed_from"] == result.run_id
        await wait_for(pilot, lambda: app.launch.result is not None, what="the resumed run to end", timeout=240)


async def test_lora_run_plots_loss_and_tokens_per_second(solo, tmp_path, tiny_assets):
    app = _app(solo, tmp_path, workload="sft", method="lora", model=str(tiny_assets["model"]), dataset=str(tiny_assets["dataset"]),
               seq_len=64, micro_batch_size=2, grad_accum_steps=1, max_steps=12, save_steps=6, logging_steps=1, learning_rate=1e-3,
               precision="fp32", optimizer="adamw", gradient_checkpointing=False, lora_r=4, lora_alpha=8, output_dir="checkpoints/tiny")
    async with app.run_test(size=(100, 30)) as pilot:
        await _checked(pilot, app)
        if app.checks.failed:  # e.g. mem.fit has no GPU to fit; the run itself is what this test is about
            await pilot.press("o")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the override question")
            await pilot.click("#override")
            await wait_for(pilot, lambda: app.checks.override, what="the override")
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
        await pilot.press("l")
        await wait_for(pilot, lambda: len(app.launch.losses) >= 3, what="three loss values", timeout=300)
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "loss " in text and "tok/s " in text and "step " in text
        await wait_for(pilot, lambda: app.launch.result is not None, what="the run to finish", timeout=300)
        assert app.launch.result.status == "succeeded", app.launch.result
        assert len(app.launch.losses) >= 10 and len(app.launch.tokens_per_s) >= 10
        await pilot.pause(0.3)
        assert f"loss {app.launch.losses[-1]:.4f}" in screen_text(app)


async def test_quit_while_running_offers_detach_or_stop(solo, tmp_path):
    app = _app(solo, tmp_path, workload="allreduce", sizes_mb=[1] * 2000, iterations=2, warmup_iterations=0, pause_s=0.2)
    async with app.run_test(size=(100, 30)) as pilot:
        await _checked(pilot, app)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
        await pilot.press("l")
        await wait_for(pilot, lambda: app.launch.node_states.get("solo", ("",))[0] == "running", what="the run to go", timeout=120)
        run_id = app.launch.run_id
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the quit question")
        text = flat_text(app)
        assert f"ftwiz --attach {run_id}" in text and "Detach and quit" in text and "Stop all and quit" in text
        await pilot.click("#stop")
        await wait_for(pilot, lambda: not app.is_running, what="stop, then quit", timeout=90)
    assert app.launch.result is not None and app.launch.result.status == "stopped"
    assert _processes_of(run_id) == []
