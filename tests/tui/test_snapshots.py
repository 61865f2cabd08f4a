"""Pictures of every step (pytest-textual-snapshot), from real agents on loopback serving GPU fixtures.

Update after an intended change with ``pytest tests/tui/test_snapshots.py --snapshot-update`` and look
at the report. See ``snapshot_app.py`` for what is held still and why.
"""

from __future__ import annotations

import pytest
from textual.widgets import Input

from tests.tui.snapshot_app import snapshot_app
from tests.tui.waiting import wait_for
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.help_screen import HelpScreen


async def _polled(pilot) -> None:
    await wait_for(pilot, lambda: pilot.app.cluster.polls >= 1, what="the poll")
    await pilot.pause()


async def _planned(pilot) -> None:
    await _polled(pilot)
    await wait_for(pilot, lambda: getattr(pilot.app.screen, "plans_shown", 0) >= 2, what="the estimate after the poll")
    await pilot.pause()


@pytest.fixture(autouse=True)
def still_cursor(monkeypatch):
    """A focused Input's cursor blinks every 0.5 s: hold it visible, or a picture taken on a loaded
    machine (more than 0.5 s after the last key) shows the other phase (CI failed on this once)."""
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)


@pytest.fixture
def config(loopback):
    """The three loopback agents plus node3, whose agent is down."""
    return loopback.config(down=["node3"])


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_cluster(snap_compare, config, size):
    assert snap_compare(snapshot_app(config), terminal_size=size, run_before=_polled)


def test_cluster_gpu_less_node(snap_compare, config):
    async def select_node2(pilot):
        await _polled(pilot)
        await pilot.press("down", "down")
        await pilot.pause()

    assert snap_compare(snapshot_app(config), terminal_size=(100, 30), run_before=select_node2)


def test_node_form_errors(snap_compare, config):
    async def bad_node(pilot):
        await _polled(pilot)
        await pilot.press("a")
        await pilot.pause()
        pilot.app.screen.query_one("#node-name").value = "node 0"
        pilot.app.screen.query_one("#node-ssh_port").value = "0"
        await pilot.press("ctrl+s")
        await pilot.pause()

    assert snap_compare(snapshot_app(config), terminal_size=(80, 24), run_before=bad_node)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_job(snap_compare, config, size):
    assert snap_compare(snapshot_app(config, start_step="job"), terminal_size=size, run_before=_planned)


def test_job_your_own_code(snap_compare, config):
    """workload = "command": command, code dir, requires, env and progress at a usable width; no recipe rows."""
    from shared.config import JobConfig

    config.job = JobConfig(workload="command", command=["train.py", "config/train_shakespeare_char.py", "--backend=gloo", "--compile=False"],
                           requires=["numpy", "tiktoken"], env={"OMP_PROC_BIND": "close"}, progress_total=5000,
                           progress_regex=r"iter (?P<step>\d+): loss (?P<loss>[0-9.]+)")
    assert snap_compare(snapshot_app(config, start_step="job"), terminal_size=(120, 40), run_before=_planned)


def test_job_full_finetune_does_not_fit(snap_compare, config):
    async def full(pilot):
        await _planned(pilot)
        shown = pilot.app.screen.plans_shown
        pilot.app.screen.query_one("#job-method").value = "full"
        await wait_for(pilot, lambda: pilot.app.screen.plans_shown > shown, what="the new estimate")
        await pilot.pause()

    assert snap_compare(snapshot_app(config, start_step="job"), terminal_size=(120, 40), run_before=full)


def test_checklist(snap_compare, config):
    async def run_checks(pilot):
        await _polled(pilot)
        await pilot.press("r")
        await wait_for(pilot, lambda: pilot.app.checks.runs >= 1, what="the checklist", timeout=120)
        await pilot.pause()

    assert snap_compare(snapshot_app(config, start_step="checklist"), terminal_size=(120, 40), run_before=run_checks)


def test_launch_idle(snap_compare, config):
    assert snap_compare(snapshot_app(config, start_step="launch"), terminal_size=(80, 24), run_before=_polled)


def test_help(snap_compare, config):
    async def help_keys(pilot):
        await _polled(pilot)
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), what="the help screen")
        await pilot.pause()

    assert snap_compare(snapshot_app(config), terminal_size=(80, 24), run_before=help_keys)


def test_quit_with_unsaved_changes(snap_compare, config):
    async def quit_dirty(pilot):
        await _polled(pilot)
        pilot.app.remove_node("node3")
        # removing a node polls again (for the new node list): the picture is taken after that poll
        await wait_for(pilot, lambda: pilot.app.cluster.polls >= 2, what="the poll after the removal")
        await pilot.pause()
        await pilot.press("ctrl+q")
        # the quit action is a worker: the question appears a few event-loop turns after the key
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), what="the quit question")
        await pilot.pause()

    assert snap_compare(snapshot_app(config), terminal_size=(80, 24), run_before=quit_dirty)


def test_cluster_light_and_ansi_themes(snap_compare, config):
    async def light(pilot):
        await _polled(pilot)
        pilot.app.theme = "textual-light"
        await pilot.pause()

    assert snap_compare(snapshot_app(config), terminal_size=(80, 24), run_before=light)


def test_job_ansi_theme(snap_compare, config):
    async def ansi(pilot):
        await _planned(pilot)
        pilot.app.theme = "ansi-dark"
        await pilot.pause()

    assert snap_compare(snapshot_app(config, start_step="job"), terminal_size=(80, 24), run_before=ansi)
