"""Detached runs whose nodes SSH cannot reach: a failed ``--attach`` keeps the record, ``--stop`` asks every agent.

Regressions of two bugs of the first launcher: ``Run.attach`` saved a fresh record (status
``starting``, ``created_at`` now, the stored pgids, commands and run dirs gone) before finding that
a node was unreachable; ``stop_detached`` removed names from the list it was walking, so with two or
more nodes unreachable over SSH every second node's agent was never asked to reap. Real agents on
loopback, real processes to reap; SSH goes to a port where nothing listens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from shared.config import FtwizConfig
from tests.launch.conftest import run_pids, wait_until
from tests.tui.agents import LoopbackCluster, start_agents
from tui.launch import commands
from tui.launch.options import LaunchError, RunOptions
from tui.runs.record import RunRecord, latest_run_id
from tui.launch.run import Run

NODES = ("n1", "n2", "n3")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    cluster = start_agents(tmp_path_factory.mktemp("detached"), [(n, f"127.0.0.{51 + i}", None) for i, n in enumerate(NODES)])
    try:
        yield cluster
    finally:
        cluster.close()


def _config(agents: LoopbackCluster) -> FtwizConfig:
    config = agents.config()
    port = _closed_port()
    for node in config.nodes:
        node.ssh_port = port  # nothing listens: SSH is refused at once
    config.cluster.ssh_connect_timeout_s = 5
    return config


def _stored_run(base: Path, run_id: str) -> Path:
    record = RunRecord.create(base, run_id, cluster="loopback", created_at=1000.0, output_dir="out")
    for i, node in enumerate(NODES):
        record.update_node(node, host=f"127.0.0.{51 + i}", pgid=4000 + i, rundir=f"/w/{node}/runs/{run_id}",
                           command=["torchrun", "--nnodes=3"], command_line="torchrun --nnodes=3", state="running")
    record.update(status="detached", started_at=1001.0, detached_at=1002.0, world_size=3)
    for node in NODES:
        (base / run_id / f"{node}.log").write_text(f"{node}/0 | step 1\n{node}/0 | step 2\n")
    return base / run_id


def test_a_failed_attach_leaves_the_record_and_logs_as_they_were(agents, tmp_path):
    base = tmp_path / "runs"
    rundir = _stored_run(base, "20260101-000000-aaaa")
    newer = RunRecord.create(base, "20250101-000000-bbbb", created_at=500.0)  # an older run by created_at
    newer.update(status="succeeded")
    before = {p.name: p.read_bytes() for p in rundir.iterdir()}
    with pytest.raises(LaunchError) as caught:
        Run.attach(_config(agents), "20260101-000000-aaaa", options=RunOptions(runs_dir=base))
    assert "unchanged" in str(caught.value) and set(caught.value.problems) == set(NODES)
    after = {p.name: p.read_bytes() for p in rundir.iterdir()}
    assert after == before, "a failed attach must not touch run.json or the node logs"
    stored = json.loads((rundir / "run.json").read_text())
    assert stored["status"] == "detached" and stored["created_at"] == 1000.0
    assert stored["nodes"]["n2"]["pgid"] == 4001 and stored["nodes"]["n3"]["rundir"].startswith("/w/n3/")
    assert latest_run_id(base) == "20260101-000000-aaaa"


def test_stop_of_a_detached_run_asks_every_unreachable_nodes_agent(agents, tmp_path, capsys):
    run_id = "20260101-000001-cccc"
    base = tmp_path / "runs"
    _stored_run(base, run_id)
    procs = []
    for node in NODES:
        env = {**os.environ, "FTWIZ_RUN_ID": run_id, "FTWIZ_NODE": node, "RANK": "0", "LOCAL_RANK": "0"}
        procs.append(subprocess.Popen(["sleep", "600"], env=env, start_new_session=True))
    try:
        assert wait_until(lambda: len(run_pids(run_id)) == len(NODES), 30)
        code = commands.stop(_config(agents), run_id, options=RunOptions(runs_dir=base, stop_grace_s=1.0))
        err = capsys.readouterr().err
        assert wait_until(lambda: not run_pids(run_id), 30), run_pids(run_id)
        assert code == 0, err
        for node in NODES:
            assert f"{node}: stopped 1 process(es)" in err, err
        stored = json.loads((base / run_id / "run.json").read_text())
        assert stored["status"] == "stopped" and stored["unreaped"] == []
        assert all(stored["nodes"][n]["killed"] for n in NODES)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_an_agent_reaps_only_its_own_nodes_processes(agents, tmp_path):
    """Nodes sharing one PID space (here: every loopback agent): n1's agent must not kill n2's ranks."""
    run_id = "20260101-000002-dddd"
    env = {**os.environ, "FTWIZ_RUN_ID": run_id, "FTWIZ_NODE": "n2", "RANK": "0", "LOCAL_RANK": "0"}
    other = subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)
    try:
        assert wait_until(lambda: run_pids(run_id), 30)
        from tui.launch.support import agent_stop

        report = agent_stop(_config(agents), "n1", run_id)
        assert report is not None and report["killed"] == []
        assert other.poll() is None and run_pids(run_id) == [other.pid]
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait(10)
