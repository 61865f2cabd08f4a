"""run.json: a typed record that opening never writes; what a launch keeps of its checklist."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from shared.config import FtwizConfig, NodeConfig
from shared.syncplan import SyncForecast
from tui.checks.base import CheckResult
from tui.launch.options import RunOptions
from tui.launch.progress import format_progress
from tui.runs.record import RunRecord, latest_run_id
from tui.launch.run import Run
from tui.runs.index import RunNotFound
from tui.runs.status import RunStatus


def test_opening_a_record_never_writes_it(tmp_path):
    record = RunRecord.create(tmp_path, "20260101-000000-aaaa", created_at=5.0)
    record.update(status=RunStatus.DETACHED)
    before = record.path.read_bytes()
    opened = RunRecord.open(tmp_path, "20260101-000000-aaaa")
    assert opened.model.status is RunStatus.DETACHED and opened.model.created_at == 5.0
    assert record.path.read_bytes() == before
    with pytest.raises(RunNotFound, match="no record of run '20260101-000000-bbbb'"):
        RunRecord.open(tmp_path, "20260101-000000-bbbb")
    assert not (tmp_path / "20260101-000000-bbbb").exists()
    assert latest_run_id(tmp_path) == "20260101-000000-aaaa"


def test_the_status_is_an_enum_and_unknown_keys_are_kept(tmp_path):
    record = RunRecord.create(tmp_path, "20260101-000000-cccc")
    with pytest.raises(ValidationError):
        record.update(status="exploded")
    data = json.loads(record.path.read_text())
    data["written_by_a_newer_ftwiz"] = {"x": 1}
    record.path.write_text(json.dumps(data))
    opened = RunRecord.open(tmp_path, "20260101-000000-cccc")
    opened.update(status=RunStatus.STOPPED)
    again = json.loads(record.path.read_text())
    assert again["status"] == "stopped" and again["written_by_a_newer_ftwiz"] == {"x": 1}


def test_a_launch_keeps_its_checklist_and_shows_the_sync_forecast(tmp_path):
    config = FtwizConfig(nodes=[NodeConfig(name="a", host="10.0.0.1"), NodeConfig(name="b", host="10.0.0.2")])
    run = Run(config, options=RunOptions(runs_dir=tmp_path))
    rows = [CheckResult(id="net.mtu", title="MTU", status="warn", node="b", detail="eth0 MTU 1400 on b", hint="ip link set dev eth0 mtu 1500")]
    forecast = SyncForecast(method="full", sharding="ddp", trainable_params=1_000_000, bytes_per_step=4_000_000, ranks=2, nodes=2,
                            gbit_per_s=0.1, sync_s=0.64)
    run.keep_checklist(rows, forecast)
    stored = json.loads((tmp_path / run.run_id / "run.json").read_text())
    assert stored["checklist"][0]["id"] == "net.mtu" and stored["checklist"][0]["status"] == "warn"
    assert stored["sync_forecast"]["sync_s"] == 0.64
    assert run.progress.snapshot.sync_forecast_s == 0.64
    shown = format_progress(run.progress.snapshot.__class__(**{**run.progress.snapshot.__dict__, "sync_s": 0.71}))
    assert "sync 0.71 s/step (forecast 0.64)" in shown


def test_secrets_stay_private_run_dir_0700_files_0600_values_masked(tmp_path):
    """Issue 18, finding 4 (controller side): run.json and the logs keep secret-looking env values masked,
    in a directory and files only the user can read."""
    import os
    import stat

    from tui.launch.messages import NodeLine
    from tui.launch.launchplan import build_launch_plan

    token, wandb = "hf_Zq8secretTOKENvalue", "wandb-key-0123456789"
    config = FtwizConfig(nodes=[NodeConfig(name="a", host="10.0.0.1"), NodeConfig(name="b", host="10.0.0.2")],
                         job={"workload": "command", "command": ["train.py"], "code_dir": "",
                              "env": {"HF_TOKEN": token, "WANDB_API_KEY": wandb, "WANDB_MODE": "offline"}},
                         nccl={"env": {"NCCL_DEBUG": "WARN", "my_password": "pa55word"}})
    old_umask = os.umask(0o022)  # what most users have: the files must be private anyway
    try:
        run = Run(config, options=RunOptions(runs_dir=tmp_path))
        plan = build_launch_plan(config, run_id=run.run_id, rundirs=dict.fromkeys("ab", f"/w/runs/{run.run_id}"), reports={},
                                 network_env=None, sharding=None, package={}, resume=False, output_dir="out")
        built = plan.nodes["a"]
        run.record.update_node("a", **built.record)
        run._apply(NodeLine("a", f"[rank0]:printing my env: HF_TOKEN={token} WANDB_API_KEY={wandb}"))
        run.record.close()
    finally:
        os.umask(old_umask)
    assert json.loads(built.files["job.json"])["env"]["HF_TOKEN"] == token  # the node gets the value (in a 0600 file)
    rundir = tmp_path / run.run_id
    assert stat.S_IMODE(rundir.stat().st_mode) == 0o700
    for path in (rundir / "run.json", rundir / "a.log"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    text = (rundir / "run.json").read_text() + (rundir / "a.log").read_text()
    assert token not in text and wandb not in text and "pa55word" not in text
    stored = json.loads((rundir / "run.json").read_text())
    assert stored["config"]["job"]["env"] == {"HF_TOKEN": "***", "WANDB_API_KEY": "***", "WANDB_MODE": "offline"}
    assert stored["config"]["nccl"]["env"] == {"NCCL_DEBUG": "WARN", "my_password": "***"}
    assert stored["nodes"]["a"]["env"]["HF_TOKEN"] == "***" and stored["nodes"]["a"]["env"]["WANDB_MODE"] == "offline"
    assert "HF_TOKEN='***'" in stored["nodes"]["a"]["command_line"] and token not in stored["nodes"]["a"]["command_line"]
    assert "HF_TOKEN=*** WANDB_API_KEY=***" in (rundir / "a.log").read_text()
