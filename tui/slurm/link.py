"""The Slurm node transport: every command on a node runs as a one-task job step of the allocation.

:class:`SrunLink` offers what :class:`tui.launch.links.NodeLink` offers over SSH — ``exec`` (run, collect),
``stream`` (a long-running command read line by line, whose stdin carries the job files) and ``close`` — as
``srun --jobid=JOB --overlap --nodelist=NODE --nodes=1 --ntasks=1 sh -c COMMAND``. The supervisor and the node
helper (:mod:`nodeside.helper`) are the same as on the SSH backend; only the transport differs. Slurm
accounts for every process started this way, and ``scancel JOB`` ends them all.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from typing import Any

from shared.config import ClusterConfig, NodeConfig
from shared.nodewire import KEEPER_ENV
from shared.slurmjob import valid_job_id
from tui.launch.links import ExecResult, LinkLost, NodeGone, ProcessLines
from tui.slurm import slurmctl

__all__ = ["SrunLink", "srun_argv", "srun_link_factory"]


def srun_argv(job_id: str, node: str, command: str) -> list[str]:
    """One task of ``command`` (a shell string built from quoted pieces) on ``node`` inside job ``job_id``."""
    if not valid_job_id(job_id):
        raise LinkLost(f"{job_id!r} is not a Slurm job id: refusing to pass it to srun")
    return ["srun", f"--jobid={job_id}", "--overlap", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
            "--quiet", "--unbuffered", "--kill-on-bad-exit=0", "--job-name=ftwiz-node", "sh", "-c", command]


class SrunLink:
    """One allocated node, reached through job steps (see the module docstring)."""

    def __init__(self, node: NodeConfig, job_id: str, keeper: str | None = None) -> None:
        self.node = node.name
        self.job_id = job_id
        self.keeper = keeper

    def exec(self, command: str, *, timeout: float) -> ExecResult:
        """Run ``command`` as a step on the node and wait (TimeoutError beyond ``timeout``)."""
        try:
            done = subprocess.run(srun_argv(self.job_id, self.node, command), stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=timeout, check=False, start_new_session=True)
        except FileNotFoundError:
            raise LinkLost("srun not found: run ftwiz on a Slurm login node") from None
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.node}: job step did not finish within {timeout:g} s") from None
        stderr = done.stderr.decode("utf-8", "replace")
        if done.returncode != 0 and "srun: error" in stderr and not done.stdout:
            self._raise_if_job_over()
            raise LinkLost(f"{self.node}: srun could not start a step in job {self.job_id}: {stderr.strip()[-300:]}")
        return ExecResult(done.returncode, done.stdout.decode("utf-8", "replace"), stderr)

    def stream(self, command: str) -> ProcessLines:
        """Start ``command`` as a step whose stdout is read line by line.

        With a keeper (:mod:`tui.slurm.keeper`) the node helper asks it to start the run, so the run is not
        part of this step and goes on when this ``srun`` ends (detach, or ftwiz gone).
        """
        if self.keeper:
            command = f"export {KEEPER_ENV}={shlex.quote(self.keeper)}; {command}"
        try:
            proc = subprocess.Popen(srun_argv(self.job_id, self.node, command), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError:
            raise LinkLost("srun not found: run ftwiz on a Slurm login node") from None
        return ProcessLines(proc, what="the job step", close_grace_s=5.0)

    def close(self) -> None:
        """Nothing to release: every step is its own process."""

    def _raise_if_job_over(self) -> None:
        """:class:`NodeGone` when the job no longer runs (Slurm killed every process of it), else nothing."""
        try:
            info = slurmctl.job_info(self.job_id)
        except slurmctl.SlurmError:
            return
        if info.state != "RUNNING":  # over, completing (Slurm is killing it) or requeued: no process of ours runs
            raise NodeGone(f"job {self.job_id} is {info.state.lower() or 'gone'}: Slurm ended every process in it")


def srun_link_factory(job_id: str, keeper: str | None = None) -> Callable[..., SrunLink]:
    """A ``link_factory`` for :class:`tui.launch.runner.NodeRunner`: nodes of job ``job_id`` (runs started by
    the keepers under ``keeper`` when given)."""

    def factory(node: NodeConfig, cluster: ClusterConfig, *, timeout: Any = None) -> SrunLink:
        return SrunLink(node, job_id, keeper)

    return factory
