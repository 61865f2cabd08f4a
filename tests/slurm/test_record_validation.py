"""A Slurm job id read from a record is validated before any Slurm command sees it (issue 18, finding 5).

A record whose job id was ``--me`` made ftwiz run ``squeue -j --me``, ``scontrol show job --me`` and
``scancel --me`` (which cancels every job of the user). Stub ``squeue``/``scontrol``/``scancel``/``srun``/``sbatch``
on PATH record their argv: with such a record none of them runs, and ftwiz says the record is invalid.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tui.launch.options import RunOptions
from tui.slurm import slurmctl
from tui.slurm.detached import attach_on_allocation, stop_on_allocation

SLURM_COMMANDS = ("squeue", "scontrol", "scancel", "srun", "sbatch")
RUN_ID = "20260101-000000-5a5a"


@pytest.fixture
def stub_slurm(tmp_path, monkeypatch) -> Path:
    """Stub Slurm commands first on PATH; each appends its name and argv to the returned log file."""
    bin_dir, log = tmp_path / "bin", tmp_path / "slurm-calls.log"
    bin_dir.mkdir()
    for name in SLURM_COMMANDS:
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\nexit 0\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def _hostile_record(runs: Path, job_id: str) -> Path:
    """A run.json as ftwiz writes for a Slurm run, but with ``job_id`` put there by someone else."""
    from shared.config import FtwizConfig, NodeConfig

    config = FtwizConfig(nodes=[NodeConfig(name="node0", host="node0")])
    record = {"run_id": RUN_ID, "created_at": 1000.0, "status": "detached", "config": config.model_dump(mode="json"),
              "nodes": {"node0": {"host": "node0", "pgid": 4242}},
              "slurm": {"job_id": job_id, "nodes": ["node0"], "keeper": str(runs / "keeper"), "state_dir": str(runs),
                        "keep_allocation": False, "time_limit": "00:10:00"}}
    (runs / RUN_ID).mkdir(parents=True)
    path = runs / RUN_ID / "run.json"
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("job_id", ["--me", "12 34", "123\n", "-1", "12_x", "1;scancel"])
def test_a_record_with_a_job_id_that_is_not_one_runs_no_slurm_command(stub_slurm, tmp_path, job_id):
    runs = tmp_path / "runs"
    path = _hostile_record(runs, job_id)
    before = path.read_bytes()
    err = io.StringIO()
    assert stop_on_allocation(None, RUN_ID, stderr=err, options=RunOptions(runs_dir=runs)) == 2
    assert attach_on_allocation(None, RUN_ID, stderr=err, options=RunOptions(runs_dir=runs)) == 2
    said = err.getvalue()
    assert "is not a valid run record" in said and "slurm.job_id" in said, said
    assert not stub_slurm.exists(), f"Slurm commands ran: {stub_slurm.read_text()}"
    assert path.read_bytes() == before


def test_ftwiz_stop_of_such_a_record_from_the_command_line(stub_slurm, tmp_path):
    runs = tmp_path / "runs"
    _hostile_record(runs, "--me")
    env = {**os.environ, "FTWIZ_RUNS_DIR": str(runs), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-m", "tui.cli", "--stop", RUN_ID], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "is not a valid run record" in done.stderr, done.stderr
    assert not stub_slurm.exists(), f"Slurm commands ran: {stub_slurm.read_text()}"


def test_every_slurm_client_call_refuses_a_job_id_that_is_not_one(stub_slurm):
    for call in (lambda: slurmctl.job_info("--me"), lambda: slurmctl.job_detail("--me"), lambda: slurmctl.cancel("--me"),
                 lambda: slurmctl.cancel("12", step="--me")):
        with pytest.raises(slurmctl.SlurmError, match="not a"):
            call()
    assert not stub_slurm.exists(), f"Slurm commands ran: {stub_slurm.read_text()}"
    slurmctl.cancel("12_3")  # an array task is a job id
    assert stub_slurm.read_text().split() == ["scancel", "12_3"]
