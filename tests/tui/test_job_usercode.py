"""Job step: "your own code" beside the built-in recipes (command, code dir, requires, env), validated by the schema."""

from __future__ import annotations

from tests.tui.screen_text import screen_text
from tests.tui.waiting import wait_for
from tui.app.screens.job_screen import JobScreen
from tui.app.widgets.job.job_form import COMMAND_FIELDS, JobForm


async def test_your_own_code_form(make_app):
    app = make_app(poll_interval=5, start_step="job")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen), what="the job step")
        form = app.screen.query_one(JobForm)
        assert not any(form.query_one(f"#row-{f}").display for f in COMMAND_FIELDS)  # hidden for the built-in sft
        form.query_one("#job-workload").value = "command"
        await pilot.pause()
        assert all(form.query_one(f"#row-{f}").display for f in COMMAND_FIELDS)
        assert "command" in form.errors and "needs command =" in form.errors["command"]
        assert app.config.job.workload == "sft"  # not applied while invalid
        form.query_one("#job-command").value = "train.py --lr 1e-4 --note 'two words'"
        form.query_one("#job-requires").value = "trl>=0.20, transformers"
        form.query_one("#job-env").value = "WANDB_MODE=offline"
        await pilot.pause()
        await wait_for(pilot, lambda: app.config.job.workload == "command", what="the job applied")
        job = app.config.job
        assert job.command == ["train.py", "--lr", "1e-4", "--note", "two words"]
        assert job.requires == ["trl>=0.20", "transformers"] and job.env == {"WANDB_MODE": "offline"}
        form.query_one("#job-env").value = "RANK=3"
        await pilot.pause()
        assert "RANK is set by torchrun/ftwiz" in form.errors["env"]
        assert "env: RANK is set" in screen_text(app)
        form.query_one("#job-progress_regex").value = "step (?P<stp>\\d+)"
        await pilot.pause()
        assert "unknown named group(s) stp" in form.errors["progress_regex"]


async def test_your_own_code_shows_and_saves_only_its_own_keys(make_app, loopback, tmp_path):
    import tomllib

    from shared.config import JobConfig, to_toml
    from tui.app.widgets.job.job_form import WORKLOAD_FIELDS

    config = loopback.config(down=["node3"])
    config.job = JobConfig(workload="allreduce", sizes_mb=[1, 4, 16], iterations=10)  # what the embedded default starts from
    path = tmp_path / "ftwiz.toml"
    path.write_text(to_toml(config))
    app = make_app(config, path, poll_interval=5, start_step="job")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, JobScreen), what="the job step")
        form = app.screen.query_one(JobForm)
        form.query_one("#job-workload").value = "command"
        form.query_one("#job-command").value = "train.py --backend=gloo"
        form.query_one("#job-progress_total").value = "5000"
        await wait_for(pilot, lambda: app.config.job.workload == "command", what="the job applied")
        shown = {f for f in WORKLOAD_FIELDS["sft"] | WORKLOAD_FIELDS["allreduce"] if form.query_one(f"#row-{f}").display}
        assert not shown, f"recipe rows shown for your own code: {shown}"
        assert app.config.job.progress_total == 5000
        assert form.query_one("#job-command").region.width >= 60  # a command line fits, not 32 columns
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "train.py" in path.read_text(), what="the save")
    saved = tomllib.loads(path.read_text())["job"]
    assert saved == {"workload": "command", "command": ["train.py", "--backend=gloo"], "progress_total": 5000}
