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
from tui.launch.record import RunRecord, latest_run_id
from tui.launch.run import Run
from tui.launch.runindex import RunNotFound
from tui.launch.status import RunStatus


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
