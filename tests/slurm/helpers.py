"""Helpers for the Slurm tests: a config for the test cluster, ftwiz as a subprocess, job logs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.cluster.node import REPO_ROOT
from tests.cluster.slurm import SlurmCluster
from tests.launch.conftest import LONG_ALLREDUCE

LONG = "".join(f"{key} = {json.dumps(value)}\n" for key, value in LONG_ALLREDUCE.items())
""":data:`tests.launch.conftest.LONG_ALLREDUCE` as ``[job]`` lines (JSON's strings, numbers and lists are TOML's)."""


def write_config(slurm: SlurmCluster, path: Path, *, nodes: int = 3, rendezvous_port: int = 29511,
                 job: str = 'workload = "allreduce"\nsizes_mb = [0.25]\niterations = 3\nwarmup_iterations = 1\n',
                 extra: str = "") -> Path:
    """An ``ftwiz.toml`` with ``backend = "slurm"`` on the test cluster's partition (this interpreter trains)."""
    work = slurm.shared_dir / "work"
    path.write_text(
        f'[cluster]\nbackend = "slurm"\nrendezvous_port = {rendezvous_port}\n\n'
        f'[slurm]\npartition = "{slurm.partition}"\nnodes = {nodes}\ntime = "00:10:00"\n'
        f'python = "{sys.executable}"\nworkdir = "{work}"\n{extra}\n'
        f"[job]\n{job}"
    )
    return path


def ftwiz(slurm: SlurmCluster, *args: str, timeout: float = 300, env_extra: dict[str, str] | None = None,
          **kw: Any) -> subprocess.CompletedProcess:
    """``ftwiz ARGS`` as a subprocess with the test cluster's ``SLURM_CONF`` (and ``env_extra``)."""
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], cwd=REPO_ROOT, env={**slurm.env(), **(env_extra or {})},
                          capture_output=True, text=True, timeout=timeout, check=False, **kw)


class Ftwiz:
    """``ftwiz ARGS`` (default ``--launch --yes``) as a subprocess, its output collected by threads."""

    def __init__(self, slurm: SlurmCluster, config: Path, runs: Path, *args: str) -> None:
        env = slurm.env()
        env["FTWIZ_RUNS_DIR"] = str(runs)
        argv = list(args) or ["--launch", "--yes"]
        self.proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "--config", str(config), *argv],
                                     cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream, sink: list[str]) -> None:  # type: ignore[no-untyped-def]
        sink.extend(stream)  # line by line, as they come

    def text(self) -> str:
        return "".join(self.err) + "".join(self.out)

    def wait(self, timeout: float) -> int | None:
        """Its exit code, or None when it was still running after ``timeout`` (then killed): an assertion on the
        code then prints :meth:`text` instead of a bare ``TimeoutExpired``."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def run_id(self) -> str:
        found = re.search(r"about to launch run (\S+):", "".join(self.err))
        return found.group(1) if found else ""

    def job_id(self) -> str:
        found = re.search(r"submitted job (\d+)", "".join(self.err))
        return found.group(1) if found else ""
