"""Detach, attach and ``--stop`` on a real Slurm: the run lives in the allocation (its keepers), not in ftwiz.

A job step dies with the ``srun`` that started it, so the run is started by the allocation's keeper step
(``tui/slurm/keeper.py``); these tests hold that it outlives ftwiz, that ``--attach`` follows it again through
job steps, that ``--stop`` stops every process and ends the job, and that a detached run's job ends with it.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.cluster.slurm import SlurmCluster
from tests.launch.conftest import run_pids, wait_until
from tests.slurm.helpers import LONG, Ftwiz, write_config

pytestmark = pytest.mark.slow


def _record(runs: Path, run_id: str) -> dict:
    return json.loads((runs / run_id / "run.json").read_text())


def test_detach_attach_detach_again_then_stop(slurm3: SlurmCluster, tmp_path: Path) -> None:
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29531, job=LONG)
    runs = tmp_path / "runs"
    launch = Ftwiz(slurm3, config, runs, "--launch", "--yes", "--detach")
    assert launch.wait(300) == 0, launch.text()
    run_id, job = launch.run_id(), launch.job_id()
    assert f"goes on in job {job}" in launch.text(), launch.text()
    # ftwiz is gone; the run is not: every rank runs on, in the job.
    assert slurm3.job_state(job) == "RUNNING"
    assert wait_until(lambda: len(run_pids(run_id)) >= 3, 60), launch.text()
    slurm_block = _record(runs, run_id)["slurm"]
    assert slurm_block["job_id"] == job and slurm_block["nodes"] == ["node0", "node1", "node2"]
    release = Path(slurm_block["state_dir"]) / job / "release"
    assert release.is_file()  # detached: the job ends with the run

    attach = Ftwiz(slurm3, config, runs, "--attach", run_id)
    try:
        # Following again: the node logs are replayed from their start through new job steps.
        assert wait_until(lambda: "".join(attach.out).count("started: rank") == 3 or attach.proc.poll() is not None,
                          120), attach.text()
        assert attach.proc.poll() is None, attach.text()
        assert not release.exists()  # supervised again: this ftwiz ends the job when the run ends
        attach.proc.send_signal(signal.SIGHUP)  # the terminal closed: detach again
        assert attach.wait(60) == 0, attach.text()
    finally:
        if attach.proc.poll() is None:
            attach.proc.kill()
    assert release.is_file() and slurm3.job_state(job) == "RUNNING", attach.text()
    per_node = {node: run_pids(run_id, node) for node in ("node0", "node1", "node2")}
    assert all(per_node.values()), f"a node's ranks ended while attached or detaching: {per_node}\n{attach.text()}"

    stop = Ftwiz(slurm3, config, runs, "--stop", run_id)
    assert stop.wait(120) == 0, stop.text()
    for node in ("node0", "node1", "node2"):
        assert f"{node}: stopped" in stop.text(), f"{stop.text()}\nbefore the stop: {per_node}"
    assert wait_until(lambda: not run_pids(run_id), 30) is not None, run_pids(run_id)
    assert slurm3.wait_job_state(job, {"COMPLETED", "CANCELLED"}, timeout=30)
    assert _record(runs, run_id)["status"] == "stopped"


def test_a_detached_run_that_ends_ends_its_job(slurm3: SlurmCluster, tmp_path: Path) -> None:
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29532)
    runs = tmp_path / "runs"
    launch = Ftwiz(slurm3, config, runs, "--launch", "--yes", "--detach")
    assert launch.wait(300) == 0, launch.text()
    run_id, job = launch.run_id(), launch.job_id()
    # Nobody attached: the keepers end the job once the run ended, instead of holding the nodes to the limit.
    assert slurm3.wait_job_state(job, {"COMPLETED"}, timeout=120) == "COMPLETED"
    work = slurm3.shared_dir / "work"
    for i in range(3):
        assert (work / f"node{i}" / "runs" / run_id / f"node{i}.exit").read_text().strip() == "0"
    late = Ftwiz(slurm3, config, runs, "--attach", run_id)
    assert late.wait(60) == 1, late.text()
    assert f"job {job} is over (COMPLETED)" in late.text() and "node1: torchrun exit 0" in late.text(), late.text()
    assert _record(runs, run_id)["status"] == "detached"  # attach never writes a record it could not follow
