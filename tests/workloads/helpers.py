"""Helpers that run the shipped workloads package under real torchrun on 127.0.0.1 (gloo, CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from agent.workloads.protocol import parse_line
from shared.protocol import Record
from tests.listening import free_port

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "agent" / "workloads"
PACKAGE = "ftwiz_workloads"


@dataclass
class Result:
    """A finished command: exit code, output, and the protocol records found on stdout."""

    returncode: int
    stdout: str
    stderr: str
    records: list[Record]

    def kind(self, kind: str) -> list[Any]:
        """The records of one ``ftwiz`` kind, in order."""
        return [r for r in self.records if r.KIND == kind]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def workload_env(rundir: Path) -> dict[str, str]:
    """Only the run dir on PYTHONPATH (not the repo), one thread per rank on these 2 shared cores."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC"))}
    env.update(PYTHONPATH=str(rundir), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               PYTHONUNBUFFERED="1")
    return env


def write_spec(directory: Path, name: str = "job.json", **fields) -> Path:
    """A job spec like the launcher's (the [job] table plus run keys) at ``directory/name``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps({"run_id": "test-run", "workdir": str(directory), "base_dir": str(directory), **fields}))
    return path


def parse_records(stdout: str) -> list[Record]:
    """Every protocol record in ``stdout``, in order."""
    return [r for r in (parse_line(line) for line in stdout.splitlines()) if r is not None]


def start(argv: list[str], rundir: Path) -> subprocess.Popen:
    """Start ``argv`` in ``rundir`` in its own session (so a timeout can kill torchrun and its workers)."""
    return subprocess.Popen(argv, env=workload_env(rundir), cwd=rundir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(proc: subprocess.Popen, *, timeout: float = 180) -> Result:
    """Wait for ``proc`` (bounded); on timeout kill its whole process group and fail with its output."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        stdout, stderr = proc.communicate(timeout=30)
        raise AssertionError(f"timed out after {timeout} s: {proc.args}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}") from None
    return Result(proc.returncode, stdout, stderr, parse_records(stdout))


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group and every descendant.

    torchrun starts each worker in a session of its own, so killing torchrun's group alone would orphan
    the workers (still holding the stdout pipe): collect the descendants first.
    """
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in family:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def run(argv: list[str], rundir: Path, *, timeout: float = 180) -> Result:
    """Run ``argv`` in ``rundir`` with the workload env to the end; bounded by ``timeout``."""
    return finish(start(argv, rundir), timeout=timeout)


def torchrun_argv(spec: Path, *, nproc: int, wrapper: bool = False, extra: list[str] | None = None) -> list[str]:
    """A one-node torchrun (or ``ftwiz_workloads.launch``) command for ``spec`` on a free loopback port."""
    runner = f"{PACKAGE}.launch" if wrapper else "torch.distributed.run"
    return [sys.executable, "-m", runner, "--nnodes=1", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
            f"--master-port={free_port()}", "-m", PACKAGE, "--spec", str(spec), *(extra or [])]
