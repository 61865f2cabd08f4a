"""A stop signals only what is provably the run's, and finds the run's record from any directory.

Regressions of issue 18, findings 1 and 2, with real processes:

- ``ftwiz --stop`` of a SUCCEEDED run whose record names a process group now held by an unrelated process
  sent that group SIGTERM/SIGKILL and rewrote the record to ``stopped``. Now a final record is never
  signalled by group id and is left byte for byte; a group is signalled only while its leader's start time
  (``/proc/PID/stat`` field 22) is the one recorded at launch.
- ``ftwiz --stop RUN_ID`` from another directory fell back to the one-node default, said nothing was
  running, exited 0 and wrote a ``runs/<id>/run.json`` there. Now the per-user index finds the record.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from nodeside.procmatch import start_time
from shared.config import ClusterConfig, FtwizConfig, JobConfig, NodeConfig, default_config
from tests.launch.conftest import run_pids, wait_until
from tests.listening import free_port
from tui.launch.nodecode import helper_argv
from tui.launch.options import RunOptions
from tui.launch.run import Run
from tui.runs.index import index_path
from tui.runs.record import RunRecord


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen]:
    """An unrelated process leading its own process group (what a reused group id names)."""
    proc = subprocess.Popen(["setsid", "sleep", "300"])
    assert wait_until(lambda: os.getpgid(proc.pid) == proc.pid, 10), "setsid did not make sleep a group leader"
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def _cli(*args: str, cwd: Path, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``ftwiz ARGS`` in ``cwd``, with no config anywhere (config and cache under ``home``), FTWIZ_RUNS_DIR unset."""
    env = {k: v for k, v in os.environ.items() if k != "FTWIZ_RUNS_DIR"}
    env.update(XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"))
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_stop_of_a_finished_run_leaves_a_reused_group_id_and_the_record_alone(tmp_path, stranger):
    """The record names this machine's default one-node cluster (what `--stop` acted on before), with the
    pgid that the unrelated `sleep` now leads; before the fix this killed the sleep and wrote "stopped"."""
    config = default_config(hostname=socket.gethostname(), python=sys.executable, token_file=str(tmp_path / "token"))
    config.nodes[0].agent_port = free_port()
    node = config.nodes[0].name
    where = tmp_path / "a"
    record = RunRecord.create(where / "runs", "20260101-000000-f1a1", cluster=config.cluster.name, config=config.model_dump(mode="json"))
    record.update_node(node, host="127.0.0.1", pgid=stranger.pid, pgid_start=start_time(stranger.pid),
                       rundir=str(tmp_path / "work" / "runs" / "20260101-000000-f1a1"), state="exited", exit="0")
    record.update(status="succeeded", exit_code=0, reason="every node's torchrun exited with code 0")
    before = record.path.read_bytes()

    done = _cli("--stop", "20260101-000000-f1a1", cwd=where, home=tmp_path)

    assert _alive(stranger), f"an unrelated process was signalled; ftwiz said: {done.stderr}"
    assert record.path.read_bytes() == before, "a finished run's record must stay as it was"
    assert done.returncode == 0, done.stderr
    assert "already finished (succeeded)" in done.stderr


def test_attach_to_a_finished_run_follows_nothing_and_leaves_the_record_alone(tmp_path, stranger):
    """``--attach`` of a final record used to reconnect, mark the run ``running`` and supervise it again. Now it names
    how each node ended and where its log is, signals and writes nothing, and exits as the run did."""
    config = default_config(hostname=socket.gethostname(), python=sys.executable, token_file=str(tmp_path / "token"))
    config.nodes[0].agent_port = free_port()
    node = config.nodes[0].name
    where = tmp_path / "a"
    for run_id, status, code in (("20260101-000000-a1a1", "succeeded", 0), ("20260101-000000-a1a2", "failed", 1)):
        record = RunRecord.create(where / "runs", run_id, cluster=config.cluster.name, config=config.model_dump(mode="json"))
        record.update_node(node, host="127.0.0.1", pgid=stranger.pid, pgid_start=start_time(stranger.pid),
                           rundir=str(tmp_path / "work" / "runs" / run_id), state="exited", exit=str(code))
        record.update(status=status, exit_code=code, reason="as recorded")
        before = record.path.read_bytes()

        done = _cli("--attach", run_id, cwd=tmp_path, home=tmp_path)  # another directory: found through the index

        assert done.returncode == code, done.stderr
        assert f"already finished ({status})" in done.stderr and f"{node}.log" in done.stderr, done.stderr
        assert ("ftwiz --why " + run_id in done.stderr) == (status == "failed"), done.stderr
        assert record.path.read_bytes() == before, "attaching to a finished run must not write its record"
        assert _alive(stranger)


def test_stop_of_a_live_run_leaves_a_group_whose_leader_started_at_another_time(tmp_path, stranger):
    """A detached (live) run's record names a group id now led by an unrelated process (another start time):
    `ftwiz --stop` signals nothing of it — the run's processes are found by their tag, and there are none."""
    config = default_config(hostname=socket.gethostname(), python=sys.executable, token_file=str(tmp_path / "token"))
    config.nodes[0].agent_port = free_port()
    config.nodes[0].workdir = str(tmp_path / "work")
    node = config.nodes[0].name
    where = tmp_path / "a"
    record = RunRecord.create(where / "runs", "20260101-000000-f1c1", cluster=config.cluster.name, config=config.model_dump(mode="json"))
    started = start_time(stranger.pid)
    assert started is not None
    record.update_node(node, host="127.0.0.1", pgid=stranger.pid, pgid_start=started - 1,
                       rundir=str(tmp_path / "work" / "runs" / "20260101-000000-f1c1"), state="running")
    record.update(status="detached")

    done = _cli("--stop", "20260101-000000-f1c1", cwd=tmp_path, home=tmp_path)

    assert _alive(stranger), f"a group whose leader is not the launched process was signalled; ftwiz said: {done.stderr}"
    assert done.returncode == 0, done.stderr
    stored = json.loads(record.path.read_text())
    assert stored["status"] == "stopped" and not stored["nodes"][node]["killed"], stored["nodes"][node]


def _kill_helper(run_id: str, node: str, pgid: int, started: int | None, rundir: Path) -> dict:
    """The node helper's ``kill`` as the controller runs it (the node bundle, ``python -I -S -c <boot> <bundle>``)."""
    argv = helper_argv(sys.executable, "kill", run_id, node, "1", str(pgid), str(rundir), "" if started is None else str(started))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_group_whose_leader_started_at_another_time_is_not_signalled(tmp_path, stranger):
    """A live run's stop names a group id whose leader is not the launched process: nothing is sent to it;
    the same group with the right start time is stopped (the start time alone decides)."""
    rundir = tmp_path / "rundir"
    rundir.mkdir()
    started = start_time(stranger.pid)
    assert started is not None
    report = _kill_helper("20260101-000000-f1b1", "n1", stranger.pid, started - 1, rundir)
    assert _alive(stranger) and report["killed"] == [], report
    report = _kill_helper("20260101-000000-f1b1", "n1", stranger.pid, None, rundir)
    assert _alive(stranger) and report["killed"] == [], "a group without a recorded start time is never signalled as a group"
    _kill_helper("20260101-000000-f1b1", "n1", stranger.pid, started, rundir)
    assert wait_until(lambda: not _alive(stranger), 10), "the group with the recorded start time is the run's: it must be stopped"


# ---------------------------------------------------------------------------------------------- finding 2


def _sleeper_config(tmp_path: Path) -> FtwizConfig:
    code = tmp_path / "code"
    code.mkdir()
    (code / "sleeper.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    node = NodeConfig(name="here", host="127.0.0.1", local=True, python=sys.executable, workdir=str(tmp_path / "work"),
                      gpus=0, agent_port=free_port())
    return FtwizConfig(cluster=ClusterConfig(name="stopsafety", agent_token_file=str(tmp_path / "token")), nodes=[node],
                       job=JobConfig(workload="command", command=["sleeper.py"], code_dir=str(code)))


def test_stop_from_another_directory_finds_the_run_and_stops_it(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    config = _sleeper_config(tmp_path)
    run = Run(config, options=RunOptions(runs_dir=a / "runs", stop_grace_s=2.0), network_env={"here": {}})
    run.launch()
    run.detach()
    assert run.supervise().status == "detached"
    run_id = run.run_id
    assert wait_until(lambda: run_pids(run_id, "here"), 60), "the run's processes never showed up"
    try:
        done = _cli("--stop", run_id, cwd=b, home=tmp_path)
        assert done.returncode == 0, done.stderr
        assert wait_until(lambda: not run_pids(run_id, "here"), 30), f"the run still runs; ftwiz said: {done.stderr}"
        assert list(b.iterdir()) == [], "a stop from elsewhere must create nothing where it runs"
        stored = json.loads((a / "runs" / run_id / "run.json").read_text())
        assert stored["status"] == "stopped" and stored["nodes"]["here"]["killed"], stored
        assert stored["nodes"]["here"]["pgid_start"] is not None, "the launch records its group leader's start time"
        assert json.loads(index_path().read_text())[run_id] == str((a / "runs" / run_id).resolve())
    finally:
        for pid in run_pids(run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_an_unknown_run_exits_nonzero_naming_where_it_looked_and_writes_nothing(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    for action in ("--stop", "--attach", "--why"):
        done = _cli(action, "20260101-000000-dead", cwd=b, home=tmp_path)
        assert done.returncode == 2, (action, done.stderr)
        assert str(index_path()) in done.stderr and str(b / "runs" / "20260101-000000-dead") in done.stderr, done.stderr
        assert list(b.iterdir()) == [], f"{action} of an unknown run created {list(b.iterdir())}"
