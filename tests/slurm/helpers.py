"""Helpers for the Slurm tests: a config for the test cluster, ftwiz as a subprocess, job logs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.cluster.node import REPO_ROOT
from tests.cluster.slurm import SlurmCluster


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


def ftwiz(slurm: SlurmCluster, *args: str, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess:
    """``ftwiz ARGS`` as a subprocess with the test cluster's ``SLURM_CONF``."""
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], cwd=REPO_ROOT, env=slurm.env(),
                          capture_output=True, text=True, timeout=timeout, check=False, **kw)
