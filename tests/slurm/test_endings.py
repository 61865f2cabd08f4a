"""Slurm's job endings explained (pure table), the keepers' batch script, and the doctor on Slurm's words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shared.doctor_signatures import CAUSES
from tests.launch.conftest import wait_until
from tui.doctor import diagnose_files
from tui.slurm.endings import ENDINGS, evidence_line, verdict
from tui.launch.nodecode import helper_argv, helper_bundle
from tui.slurm.keeper import batch_script, keeper_dir, release_file


@pytest.mark.parametrize(("state", "cause", "words"), [
    ("TIMEOUT", "slurm.time_limit", "raise [slurm] time"),
    ("NODE_FAIL", "slurm.node_fail", "--exclude=NODE"),
    ("PREEMPTED", "slurm.preempted", "--resume"),
    ("CANCELLED by 0", "slurm.cancelled", "sacct -j 12"),
    ("OUT_OF_MEMORY", "oom.host", "--mem=0"),
    ("PENDING", "slurm.node_fail", "requeued"),
    ("FAILED", "slurm.cancelled", "job-12.out"),
])
def test_every_ending_names_a_cause_and_a_fix(state: str, cause: str, words: str) -> None:
    v = verdict("12", state, "TimeLimit", time_limit="00:01:00")
    assert v.cause == cause and cause in CAUSES
    assert words in v.meaning + v.fix
    assert v.text.startswith(f"Slurm ended job 12: {state.split()[0]} (TimeLimit): ")
    assert evidence_line(v) == f"ftwiz-slurm: JobId=12 JobState={state.split()[0]} Reason=TimeLimit"


def test_an_unknown_state_is_said_as_slurm_said_it() -> None:
    v = verdict("3", "SPECIAL_EXIT")
    assert v.cause == "unknown" and "SPECIAL_EXIT" in v.meaning and "sacct -j 3" in v.fix
    assert all(row.cause in CAUSES for row in ENDINGS.values())


def test_the_doctor_puts_slurms_line_first(tmp_path: Path) -> None:
    (tmp_path / "node0.log").write_text(
        "node0/1 | [rank1]: Traceback (most recent call last):\n"
        "node0/1 | [rank1]: torch.distributed.elastic.multiprocessing.api.SignalException: Process 9 got signal: 15\n")
    (tmp_path / "_slurm.log").write_text(evidence_line(verdict("7", "TIMEOUT", "TimeLimit")) + "\n")
    first = diagnose_files(sorted(tmp_path.glob("*.log")))[0]
    assert first.cause == "slurm.time_limit" and first.node is None


def test_the_batch_script_quotes_every_path_and_runs_the_keeper_from_the_node_bundle(tmp_path: Path) -> None:
    state = tmp_path / "my work" / ".ftwiz-slurm"
    script = batch_script(state, "/opt/py 3/bin/python")
    assert "exec srun --overlap --ntasks-per-node=1" in script
    assert "'/opt/py 3/bin/python' -I -S -c '" in script and f"'{state}'/\"$SLURM_JOB_ID\"/keeper" in script
    assert f" {helper_bundle()} keep '{state}'/" in script
    assert keeper_dir(state, "9") == f"{state}/9/keeper" and release_file(state, "9") == state / "9" / "release"


def test_the_keeper_starts_a_requested_run_and_ends_once_released(tmp_path: Path) -> None:
    """The keeper itself, without Slurm: a start request runs ``<node>.sh`` in its run dir; ``release`` ends it."""
    keepers = tmp_path / "42" / "keeper"
    rundir = tmp_path / "run"
    rundir.mkdir()
    (rundir / "n1.sh").write_text("echo $$ > n1.pgid; echo ran > n1.log\n")
    proc = subprocess.Popen(helper_argv(sys.executable, "keep", str(keepers)), env={"SLURMD_NODENAME": "n1"})
    try:
        request = keepers / "n1" / "r1.start"
        request.parent.mkdir(parents=True, exist_ok=True)
        request.write_text(f"{rundir}\nn1\n")
        assert wait_until((rundir / "n1.log").is_file, 30) and not request.exists()
        assert proc.poll() is None  # not released: it keeps the allocation for the next run
        (tmp_path / "42" / "release").touch()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()

