"""Detach / attach / stop, and a controller interrupted with SIGINT (a real ``ftwiz`` process)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.launch.conftest import REPO, long_allreduce, run_pids, wait_until
from tui.launch import commands
from tui.runs.record import latest_run_id

pytestmark = pytest.mark.slow


def _heartbeats(node_log: Path) -> int:
    try:
        return node_log.read_text(errors="replace").count('"heartbeat"')
    except OSError:
        return 0


def test_detach_then_attach_then_stop(cluster3, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("FTWIZ_RUNS_DIR", str(runs))
    config = long_allreduce(cluster3, gpus=(1, 1, 1))
    quiet = commands.HeadlessPrinter(io.StringIO(), io.StringIO())
    code = commands.launch(config, yes=True, detach=True, resume=False, force=False, checklist=False, printer=quiet)
    assert code == 0
    run_id = latest_run_id(runs)
    record = json.loads((runs / run_id / "run.json").read_text())
    assert record["status"] == "detached"

    # Nobody watches, yet the run goes on: the node-side log keeps growing.
    node_log = Path(record["nodes"]["node0"]["node_log"])
    assert wait_until(lambda: _heartbeats(node_log) >= 3, 120), node_log
    before = _heartbeats(node_log)
    assert wait_until(lambda: _heartbeats(node_log) > before + 2, 60)
    assert run_pids(run_id, "node1") and run_pids(run_id, "node2")

    # Attach: the logs are replayed from the start and progress shows again.
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []
    attached = threading.Thread(target=lambda: codes.append(commands.attach(config, None, printer=commands.HeadlessPrinter(out, err))), daemon=True)
    attached.start()
    try:
        replayed = wait_until(lambda: all(f"started: rank {r} of 3" in out.getvalue() for r in range(3)) and "progress | allreduce" in out.getvalue(), 60)
        assert replayed, out.getvalue()[-2000:]
    finally:
        # Stop it from "another terminal": everything goes, and the attached controller says so.
        stopped = commands.stop(config, run_id)
    assert stopped == 0
    assert wait_until(lambda: not run_pids(run_id), 10), run_pids(run_id)
    attached.join(60)
    assert not attached.is_alive()
    assert codes and codes[0] != 0
    assert "stopped from another ftwiz" in err.getvalue()


def test_sigint_to_the_controller_stops_everything_and_completes_run_json(cluster3, tmp_path):
    runs = tmp_path / "runs"
    config_path = cluster3.write_config(tmp_path / "ftwiz.toml", workload="allreduce", sizes_mb=[0.25] * 2000, iterations=2, warmup_iterations=0,
                                     pause_s=0.2)
    env = dict(os.environ, FTWIZ_RUNS_DIR=str(runs), PYTHONPATH=str(REPO))
    argv = [sys.executable, "-c", "import sys; from tui.cli import main; sys.exit(main())", "--config", str(config_path), "--launch", "--yes"]
    log = open(tmp_path / "controller.log", "w")
    controller = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def running() -> bool:
            run_id = latest_run_id(runs)
            if run_id is None:
                return False
            data = json.loads((runs / run_id / "run.json").read_text())
            return len(data.get("ranks") or {}) == 3

        assert wait_until(running, 150), (tmp_path / "controller.log").read_text()[-3000:]
        run_id = latest_run_id(runs)
        assert run_pids(run_id)
        controller.send_signal(signal.SIGINT)
        code = controller.wait(60)
    finally:
        if controller.poll() is None:
            os.killpg(controller.pid, signal.SIGKILL)
        log.close()
    output = (tmp_path / "controller.log").read_text()
    assert code == 130, output[-3000:]
    assert not run_pids(run_id), run_pids(run_id)
    record = json.loads((runs / run_id / "run.json").read_text())
    assert record["status"] == "stopped" and record["exit_code"] == 130
    assert record["ended_at"] >= record["started_at"]
    assert "SIGINT" in record["reason"]
    for name in ("node0", "node1", "node2"):
        node = record["nodes"][name]
        assert node["command"] and node["rundir"] and node["state"] == "stopped", node
        assert node["remaining"] == []
    assert "stopping every node" in output
