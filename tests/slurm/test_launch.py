"""``ftwiz --launch`` with ``backend = "slurm"`` on a real Slurm: torchrun through job steps, stop-all, the job ended.

The supervisor is the SSH backend's; these tests hold what differs: the allocation, the srun transport, and
that nothing of the run or its job outlives ftwiz.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import time
from pathlib import Path

import pytest

from tests.cluster.node import REPO_ROOT
from tests.cluster.slurm import SlurmCluster
from tests.launch.conftest import rank_pid, run_pids, wait_until
from tests.slurm.helpers import LONG, Ftwiz, write_config

pytestmark = pytest.mark.slow


def test_allreduce_through_srun_then_the_job_is_cancelled(slurm3: SlurmCluster, tmp_path: Path) -> None:
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29521)
    ftwiz = Ftwiz(slurm3, config, tmp_path / "runs")
    assert ftwiz.wait(400) == 0, ftwiz.text()
    out = "".join(ftwiz.out)
    for rank in range(3):
        assert re.search(rf"node\d/{rank} \| started: rank {rank} of 3", out), out
    record = json.loads((tmp_path / "runs" / ftwiz.run_id() / "run.json").read_text())
    assert record["status"] == "succeeded"
    assert sorted(record["nodes"]) == ["node0", "node1", "node2"]
    # One launch path (issue 20): the run keeps the checklist it followed, the allocation's rows included.
    ids = {row["id"] for row in record["checklist"]}
    assert {"slurm.job", "slurm.agents", "agent.reachable"} <= ids, sorted(ids)
    assert {info["node"] for info in record["ranks"].values()} == {"node0", "node1", "node2"}
    assert all(n["exit"] == "0" for n in record["nodes"].values())
    # The node-side logs are on the shared workdir, each node under its own directory.
    work = slurm3.shared_dir / "work"
    assert all((work / f"node{i}" / "runs" / ftwiz.run_id() / f"node{i}.log").is_file() for i in range(3))
    # Secrets stay private on the shared workdir (issue 18, finding 4): what the keeper and the node side wrote there
    # is the user's alone — run dirs 0700, files 0600 (job.json and <node>.sh hold [job].env).
    for i in range(3):
        rundir = work / f"node{i}" / "runs" / ftwiz.run_id()
        assert stat.S_IMODE(rundir.stat().st_mode) == 0o700, rundir
        files = [p for p in rundir.iterdir() if p.is_file()]
        assert {f"node{i}.log", f"node{i}.sh"} <= {p.name for p in files}, files
        assert not [p.name for p in files if stat.S_IMODE(p.stat().st_mode) & 0o077], [(p.name, oct(p.stat().st_mode)) for p in files]
    assert slurm3.wait_job_state(ftwiz.job_id(), {"CANCELLED"}, timeout=30) == "CANCELLED"
    assert wait_until(lambda: not run_pids(ftwiz.run_id()), 30) is not None
    assert not list(REPO_ROOT.glob(f"slurm-{ftwiz.job_id()}.out"))  # the holding job writes nothing in the cwd


def test_a_killed_rank_stops_every_node_and_ends_the_job(slurm3: SlurmCluster, tmp_path: Path) -> None:
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29522, job=LONG)
    ftwiz = Ftwiz(slurm3, config, tmp_path / "runs")
    try:
        assert wait_until(lambda: "".join(ftwiz.out).count("started: rank") == 3 or ftwiz.proc.poll() is not None, 300), \
            ftwiz.text()
        run_id = ftwiz.run_id()
        victim = rank_pid(run_id, 1)
        assert victim is not None, ftwiz.text()
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        assert ftwiz.wait(120) == 1, ftwiz.text()
        gone = wait_until(lambda: not run_pids(run_id), 60)
        print(f"rank SIGKILL -> every process of the run gone: {time.monotonic() - killed_at:.1f} s")
        assert gone is not None, run_pids(run_id)
    finally:
        if ftwiz.proc.poll() is None:
            ftwiz.proc.kill()
    record = json.loads((tmp_path / "runs" / run_id / "run.json").read_text())
    assert record["status"] == "failed" and record["failed"]["rank"] == 1, record.get("failed")
    assert "FAILED" in "".join(ftwiz.err) and "rank 1" in "".join(ftwiz.err)
    assert slurm3.wait_job_state(ftwiz.job_id(), {"CANCELLED"}, timeout=30) == "CANCELLED"


def test_lora_fine_tune_of_the_tiny_model(slurm3: SlurmCluster, tmp_path: Path, tiny_assets: dict[str, Path]) -> None:
    job = (f'workload = "sft"\nmethod = "lora"\nmodel = "{tiny_assets["model"]}"\ndataset = "{tiny_assets["dataset"]}"\n'
           "seq_len = 64\nmicro_batch_size = 2\ngrad_accum_steps = 1\nmax_steps = 5\nsave_steps = 5\nlogging_steps = 1\n"
           'learning_rate = 1e-3\nprecision = "fp32"\noptimizer = "adamw"\ngradient_checkpointing = false\n'
           'lora_r = 4\nlora_alpha = 8\noutput_dir = "checkpoints/tiny"\nstall_timeout_s = 120\nfirst_step_grace_s = 300\n')
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29523, job=job)
    ftwiz = Ftwiz(slurm3, config, tmp_path / "runs")
    code = ftwiz.wait(600)
    logs = (slurm3.shared_dir / "work").glob(f"node*/runs/{ftwiz.run_id()}/node*.log")
    errors = [line for log in sorted(logs) for line in log.read_text().splitlines()
              if "Error" in line and "ChildFailedError" not in line]
    assert code == 0, "\n".join(errors[:20]) + "\n" + ftwiz.text()[-3000:]
    record = json.loads((tmp_path / "runs" / ftwiz.run_id() / "run.json").read_text())
    assert record["status"] == "succeeded"
    assert record["progress"]["step"] == 5 and record["progress"]["last_checkpoint_step"] == 5
    # Every node keeps its own checkpoints under its own workdir, as on the SSH backend.
    for node in ("node0", "node1", "node2"):
        assert (slurm3.shared_dir / "work" / node / "checkpoints" / "tiny" / "final").is_dir(), node
    # `--resume` (what ftwiz advises after a time limit) continues in a new allocation from the last checkpoint.
    config.write_text(config.read_text().replace("max_steps = 5", "max_steps = 7"))
    again = Ftwiz(slurm3, config, tmp_path / "runs", "--launch", "--yes", "--resume")
    assert again.wait(600) == 0, again.text()[-3000:]
    assert "resuming from" in again.text() and "training from step 5 to 7" in again.text(), again.text()[-3000:]
    assert _record_of(tmp_path / "runs", again.run_id())["progress"]["step"] == 7


def _record_of(runs: Path, run_id: str) -> dict:
    return json.loads((runs / run_id / "run.json").read_text())


def test_a_hung_rank_is_a_stall_stop_everywhere(slurm3: SlurmCluster, tmp_path: Path) -> None:
    job = LONG + "stall_timeout_s = 15\nfirst_step_grace_s = 120\n"
    config = write_config(slurm3, tmp_path / "ftwiz.toml", rendezvous_port=29524, job=job)
    ftwiz = Ftwiz(slurm3, config, tmp_path / "runs")
    try:
        assert wait_until(lambda: "".join(ftwiz.out).count("started: rank") == 3 or ftwiz.proc.poll() is not None, 300), \
            ftwiz.text()
        run_id = ftwiz.run_id()
        victim = rank_pid(run_id, 2)
        assert victim is not None, ftwiz.text()
        os.kill(victim, signal.SIGSTOP)  # hung, not dead: only the missing progress can tell
        assert ftwiz.wait(180) == 1, ftwiz.text()
        assert wait_until(lambda: not run_pids(run_id), 60) is not None, run_pids(run_id)
    finally:
        if ftwiz.proc.poll() is None:
            ftwiz.proc.kill()
    record = json.loads((tmp_path / "runs" / run_id / "run.json").read_text())
    assert record["status"] == "failed", record.get("reason")
    # Found by the node helper's process samples, which travel over the srun transport as over SSH.
    assert "rank(s) 2 stopped (process state T)" in record["reason"], record["reason"]
    assert slurm3.wait_job_state(ftwiz.job_id(), {"CANCELLED"}, timeout=30) == "CANCELLED"
