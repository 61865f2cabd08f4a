"""The wizard on a real Slurm allocation: Slurm's checklist rows, a launch through job steps, detach on quit.

The app is the same wizard as over SSH (Textual's pilot drives it); the allocation and its agents come from
:func:`tui.slurm.session.allocation_session`, as ``ftwiz`` with ``backend = "slurm"`` makes them.
"""

from __future__ import annotations

import pytest

from tests.cluster.slurm import SlurmCluster
from tests.launch.conftest import run_pids, wait_until
from tests.slurm.helpers import LONG, write_config
from tests.tui.screen_text import flat_text, screen_text
from tests.tui.waiting import wait_for
from tui.app.screens.checklist_screen import ChecklistScreen
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.launch_screen import LaunchScreen
from tui.config_io import load_config
from tui.launch.options import RunOptions
from tui.slurm.session import allocation_session
from tui.slurm.wizard import wizard_app

pytestmark = pytest.mark.slow


async def test_the_wizard_checks_launches_and_detaches_on_an_allocation(
        slurm3: SlurmCluster, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in slurm3.env().items():
        monkeypatch.setenv(key, value)
    path = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29551, job=LONG)
    before = path.read_text()
    loaded = load_config(path)
    said: list[str] = []
    with allocation_session(loaded.config, say=said.append, job_name="ftwiz-wizard") as session:
        job = session.allocation.job_id
        app, held = wizard_app(session, loaded.config, path, options=RunOptions(runs_dir=tmp_path / "runs"),
                               poll_interval=2, start_step="checklist")
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, ChecklistScreen), what="the checklist step")
            await pilot.press("r")
            await wait_for(pilot, lambda: app.checks.runs >= 1, what="the checklist", timeout=180)
            ids = {r.id: r.status for r in app.checks.results}
            assert ids.get("slurm.job") == "pass" and ids.get("slurm.agents") == "pass", ids
            assert ids.get("ssh.auth") == "skip", ids  # no SSH on Slurm: said, not failed
            assert not app.checks.failed, [(r.id, r.node, r.detail) for r in app.checks.failed]
            await pilot.press("f5")
            await wait_for(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch step")
            await pilot.press("l")
            await wait_for(pilot, lambda: all(app.launch.node_states.get(n, ("",))[0] == "running"
                                              for n in ("node0", "node1", "node2")), what="the run to go", timeout=180)
            run_id = app.launch.run_id
            await wait_for(pilot, lambda: "progress" in screen_text(app).lower() or "busbw" in screen_text(app),
                           what="progress on the launch step", timeout=120)
            # Ctrl+S on an allocation keeps the user's [cluster] and [slurm]: never the allocated node list.
            saves: list[str] = []
            save = app.engines["save_config"]
            app.engines["save_config"] = lambda snapshot, where: (save(snapshot, where), saves.append(str(where)))
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: saves == [str(path)], what="the save")
            await pilot.press("ctrl+q")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the quit question")
            assert f"ftwiz --attach {run_id}" in flat_text(app)
            await pilot.click("#detach")
            await wait_for(pilot, lambda: not app.is_running, what="detach, then quit", timeout=60)
        held.settle()
        held.finish(session, said.append)
        assert held.detached and held.run_id == run_id
        assert any(f"goes on in job {job}" in line for line in said), said
    # The run goes on in the job after the wizard and its allocation session are gone ...
    assert slurm3.job_state(job) == "RUNNING"
    assert len(run_pids(run_id)) >= 3
    saved = path.read_text()
    assert 'backend = "slurm"' in saved and "[[nodes]]" not in saved and saved.count("[slurm]") == 1, saved
    assert before.split("[job]")[0].strip() in saved
    # ... until it is stopped.
    slurm3.run(["scancel", job])
    assert wait_until(lambda: not run_pids(run_id), 60) is not None
