"""The allocation's batch script: one *keeper* per node, a job step that starts the run inside the allocation.

A job step lives only as long as the ``srun`` that started it: ``srun`` killed on the login node (ftwiz
detached, crashed, or its terminal closed) ends the step and everything in it (measured on slurm-wlm 22.05:
SIGKILL of the ``srun`` client took the step's task with it). So the run must not be a step that ftwiz's
``srun`` holds. The holding job's batch script runs one keeper per node (``srun --overlap
--ntasks-per-node=1``, started by the batch step inside the allocation); the node helper
(:mod:`nodeside.helper`), asked by ftwiz to launch, writes a start request into the keeper's directory
(``<workdir>/.ftwiz-slurm/<job>/keeper/<node>/<run>.start``: the run directory and the node name) and
follows the log as on SSH; the keeper starts ``sh <node>.sh`` there in its own session, as its child, so
Slurm accounts for every process of the run and ``scancel`` ends them all.

The keepers end (and with them the job) once ``<job>/release`` exists and their runs have ended: ftwiz
writes it when a run is detached, so a detached run's allocation ends with the run, not at the time limit.
An attached ftwiz removes it and cancels the job itself when the run ends.
"""

from __future__ import annotations

import shlex
from pathlib import Path

__all__ = ["KEEPER_SOURCE", "batch_script", "keeper_dir", "release_file"]

#: The keeper, ``python -c`` source (any Python 3.6+, no imports beyond the standard library).
KEEPER_SOURCE = r'''
import os, subprocess, sys, time
os.umask(0o077)  # the runs' logs and exit files, like their job files, are the user's alone
base = sys.argv[1]
here = os.path.join(base, os.environ.get("SLURMD_NODENAME") or os.uname()[1])
os.makedirs(here, exist_ok=True)
children = []
while True:
    for name in sorted(os.listdir(here)):
        if not name.endswith(".start"):
            continue
        path = os.path.join(here, name)
        try:
            with open(path) as handle:
                rundir, node = handle.read().split("\n")[:2]
            os.unlink(path)
        except (OSError, ValueError):
            continue
        with open(os.devnull, "r+b") as null:
            children.append(subprocess.Popen(["sh", node + ".sh"], cwd=rundir, stdin=null, stdout=null,
                                             stderr=null, start_new_session=True))
    children = [c for c in children if c.poll() is None]
    if not children and os.path.exists(os.path.join(os.path.dirname(base), "release")):
        sys.exit(0)
    time.sleep(0.2)
'''


def keeper_dir(state_dir: str | Path, job_id: str) -> str:
    """Where node ``N``'s keeper takes start requests: ``<state>/<job>/keeper/N/``."""
    return str(Path(state_dir) / job_id / "keeper")


def release_file(state_dir: str | Path, job_id: str) -> Path:
    """The file that lets the keepers (and so the job) end once their runs have ended."""
    return Path(state_dir) / job_id / "release"


def batch_script(state_dir: str | Path, python: str) -> str:
    """The holding job's batch script: a keeper on every node until released (see the module docstring).

    ``python`` is the nodes' training interpreter (``[slurm] python``), which the node helper needs anyway.
    """
    keepers = shlex.quote(str(Path(state_dir))) + '/"$SLURM_JOB_ID"/keeper'
    return (
        "#!/bin/sh\n"
        "# ftwiz allocation: one keeper per node (a job step) starts ftwiz's runs inside the allocation, so a run\n"
        "# goes on when ftwiz detaches; the job ends when a released run ends, or with scancel.\n"
        f"exec srun --overlap --ntasks-per-node=1 --kill-on-bad-exit=0 --job-name=ftwiz-keeper "
        f"{shlex.quote(python)} -c {shlex.quote(KEEPER_SOURCE)} {keepers}\n"
    )
