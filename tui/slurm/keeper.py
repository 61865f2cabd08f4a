"""The allocation's batch script: one *keeper* per node, a job step that starts the run inside the allocation.

A job step lives only as long as the ``srun`` that started it: ``srun`` killed on the login node (ftwiz
detached, crashed, or its terminal closed) ends the step and everything in it (measured on slurm-wlm 22.05:
SIGKILL of the ``srun`` client took the step's task with it). So the run must not be a step that ftwiz's
``srun`` holds. The holding job's batch script runs one keeper per node (``srun --overlap
--ntasks-per-node=1``, started by the batch step inside the allocation); the node helper
(:mod:`nodeside.helper`), asked by ftwiz to launch, writes a start request into the keeper's directory
(``<workdir>/.ftwiz-slurm/<job>/keeper/<node>/<run>.start``: the run directory and the node name) and
follows the log as on SSH; the keeper (:mod:`nodeside.keeper`, the same node bundle's ``keep`` command) starts
``sh <node>.sh`` there in its own session, as its child, so Slurm accounts for every process of the run and
``scancel`` ends them all.

The keepers end (and with them the job) once ``<job>/release`` exists and their runs have ended: ftwiz
writes it when a run is detached, so a detached run's allocation ends with the run, not at the time limit.
An attached ftwiz removes it and cancels the job itself when the run ends.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tui.launch.nodecode import helper_command

__all__ = ["batch_script", "keeper_dir", "release_file"]


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
        f"{helper_command(python, 'keep')} {keepers}\n"
    )
