"""Slurm's own faults mid-run on a real Slurm: a drained node, a node set DOWN, the time limit, a killed step.

Each is Slurm acting on the job (slurmctld and slurmstepd, not a simulation): ftwiz must say what Slurm did
and the fix, stop at once instead of waiting for silent nodes, leave nothing running, and give the doctor's
cause id first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.slurm import SlurmCluster
from tests.launch.conftest import run_pids, wait_until
from tests.slurm.helpers import LONG, Ftwiz, ftwiz, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def nodes_back(slurm3: SlurmCluster) -> Iterator[None]:
    """Whatever a test did to the nodes' states, they are idle again for the next test."""
    yield
    slurm3.cancel_all()
    for node in ("node0", "node1", "node2"):  # one at a time: resuming an idle node is an error
        slurm3.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
    assert wait_until(lambda: all(s == "idle" for n, s in slurm3.node_states().items() if n != "node3"), 60), \
        slurm3.node_states()


def _started(run: Ftwiz) -> bool:
    return "".join(run.out).count("started: rank") == 3 or run.proc.poll() is not None


def _keeper_step(slurm3: SlurmCluster, job: str) -> str:
    """The keepers' step (``JOB.N``), found by its name: it is step 0 only when the batch script's ``srun`` came
    before ftwiz's agents step (on a loaded host the agents' ``srun`` was first, and ``scancel JOB.0`` ended the
    agents while the run went on)."""
    listing = slurm3.run(["squeue", "-h", "--steps", "--jobs", job, "--format", "%i %j"]).stdout
    steps = [fields[0] for fields in map(str.split, listing.splitlines()) if fields[1:] == ["ftwiz-keeper"]]
    assert len(steps) == 1, listing
    return steps[0]


def _record(runs: Path, run_id: str) -> dict:
    return json.loads((runs / run_id / "run.json").read_text())


def test_a_drained_node_is_a_warning_and_a_node_set_down_ends_the_run_with_slurms_reason(
        slurm3: SlurmCluster, tmp_path: Path, nodes_back: None) -> None:
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29541, job=LONG)
    runs = tmp_path / "runs"
    run = Ftwiz(slurm3, config, runs)
    try:
        assert wait_until(lambda: _started(run), 300), run.text()
        run_id = run.run_id()
        slurm3.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=disk check"])
        assert wait_until(lambda: "node2 is" in run.text() or run.proc.poll() is not None, 30), run.text()
        assert "DRAIN" in run.text() and "the run goes on there" in run.text() and run.proc.poll() is None
        slurm3.run(["scontrol", "update", "nodename=node1", "state=down", "reason=bad memory"])
        assert run.wait(60) == 1, run.text()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert "Slurm ended job" in run.text() and "NODE_FAIL" in run.text() and "sinfo -R" in run.text(), run.text()
    assert wait_until(lambda: not run_pids(run_id), 30) is not None, run_pids(run_id)
    record = _record(runs, run_id)
    assert record["status"] == "failed" and record["slurm"]["ended"]["cause"] == "slurm.node_fail"
    assert record["diagnoses"][0]["cause"] == "slurm.node_fail", record["diagnoses"]
    assert not record["unreaped"]  # a job Slurm ended has nothing to reap: no 120 s wait for silent nodes
    why = ftwiz(slurm3, "--config", str(config), "--why", run_id, env_extra={"FTWIZ_RUNS_DIR": str(runs)})
    assert "slurm.node_fail" in why.stdout + why.stderr, why.stdout + why.stderr


def test_the_time_limit_ends_the_run_with_slurms_reason(slurm3: SlurmCluster, tmp_path: Path, nodes_back: None) -> None:
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29542, job=LONG)
    config.write_text(config.read_text().replace('time = "00:10:00"', 'time = "00:01:00"'))  # Slurm's smallest
    runs = tmp_path / "runs"
    run = Ftwiz(slurm3, config, runs)
    try:
        assert wait_until(lambda: _started(run), 300), run.text()
        run_id = run.run_id()
        assert run.wait(240) == 1, run.text()  # slurmctld checks limits every 30 s: about 60-90 s after the start
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert "TIMEOUT" in run.text() and "raise [slurm] time" in run.text(), run.text()
    assert wait_until(lambda: not run_pids(run_id), 30) is not None, run_pids(run_id)
    record = _record(runs, run_id)
    assert record["slurm"]["ended"]["cause"] == "slurm.time_limit"
    assert record["diagnoses"][0]["cause"] == "slurm.time_limit", record["diagnoses"]
    # slurmstepd's own words are kept beside ftwiz's line (from the batch step's output).
    slurm_log = (runs / run_id / "_slurm.log").read_text()
    assert "JobState=TIMEOUT" in slurm_log and "DUE TO TIME LIMIT" in slurm_log, slurm_log


def test_a_cancelled_keeper_step_ends_the_run_everywhere(slurm3: SlurmCluster, tmp_path: Path, nodes_back: None) -> None:
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29543, job=LONG)
    runs = tmp_path / "runs"
    run = Ftwiz(slurm3, config, runs)
    try:
        assert wait_until(lambda: _started(run), 300), run.text()
        run_id, job = run.run_id(), run.job_id()
        cancelled_at = time.monotonic()
        slurm3.run(["scancel", _keeper_step(slurm3, job)])  # the run's processes are in the keepers' step
        # waits for the end, not for a time: the record's reason below says it was Slurm's verdict that ended the
        # run, not a wait for silent nodes (in CI on a loaded host ftwiz was still running 60 s after the scancel)
        assert run.wait(300) == 1, run.text()
        print(f"scancel of the run's step -> ftwiz done: {time.monotonic() - cancelled_at:.1f} s")
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert wait_until(lambda: not run_pids(run_id), 30) is not None, run_pids(run_id)
    record = _record(runs, run_id)
    assert record["status"] == "failed" and record["slurm"]["ended"]["cause"] == "slurm.cancelled", record.get("slurm")
    assert "scancel JOB.STEP" in record["reason"], record["reason"]
