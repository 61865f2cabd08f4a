"""The Slurm client commands ftwiz uses (sbatch, squeue, scontrol, scancel), as argv lists with parsed output.

Every call runs the real command (``SLURM_CONF`` and the rest of the environment as inherited); a missing
command or a failure raises :class:`SlurmError` with the command, its message and the fix.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from shared.slurmjob import valid_job_id

__all__ = ["JobInfo", "SlurmError", "cancel", "hostnames", "job_detail", "job_info", "node_addresses", "node_states", "submit"]

_TIMEOUT_S = 30.0


class SlurmError(RuntimeError):
    """A Slurm command failed; the message names the command, what it said and the fix."""


def _job(job_id: str) -> str:
    """``job_id`` unchanged when valid; otherwise :class:`SlurmError` before any command runs with it."""
    if not valid_job_id(job_id):
        raise SlurmError(f"{job_id!r} is not a Slurm job id (digits, or <job>_<task>): refusing to pass it to Slurm")
    return job_id


def _run(argv: Sequence[str], *, stdin: str | None = None, timeout: float = _TIMEOUT_S) -> str:
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: run ftwiz on a Slurm login node (where sbatch and squeue work), "
                         "or install slurm-client") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{shlex.join(argv)}` did not answer within {timeout:.0f} s: is slurmctld up? "
                         "(`scontrol ping`)") from None
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
        raise SlurmError(f"`{shlex.join(argv)}` failed: {message}")
    return done.stdout


def submit(options: Sequence[str], script: str) -> str:
    """``sbatch --parsable OPTIONS`` with ``script`` on stdin; returns the job id."""
    out = _run(["sbatch", "--parsable", *options], stdin=script).strip()
    job_id = out.split(";")[0].strip()
    if not valid_job_id(job_id):
        raise SlurmError(f"sbatch printed {out!r} instead of a job id")
    return job_id


@dataclass(frozen=True)
class JobInfo:
    """One job as squeue (or scontrol, once it left the queue) reports it."""

    job_id: str
    state: str
    """PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, ... ('' when Slurm forgot it)."""
    reason: str
    """Why it pends (or ended): Resources, Priority, PartitionConfig, ... ('None' when nothing to say)."""
    nodelist: str
    """Allocated nodes in Slurm's compressed form (``node[0-2]``), '' while pending."""
    time_left: str = ""
    """Time left before the limit (``squeue %L``)."""

    @property
    def active(self) -> bool:
        """Whether the job still pends or runs."""
        return self.state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")


def job_info(job_id: str) -> JobInfo:
    """The job's state, reason and nodes."""
    out = _run(["squeue", "-h", "--states=all", "-j", _job(job_id), "-o", "%T|%r|%N|%L"]).strip()
    if out:
        state, reason, nodelist, left = [*out.splitlines()[0].split("|"), "", "", ""][:4]
        return JobInfo(job_id, state, reason, nodelist, left)
    try:
        fields = dict(f.split("=", 1) for f in _run(["scontrol", "-o", "show", "job", job_id]).split() if "=" in f)
    except SlurmError:
        return JobInfo(job_id, "", "", "")
    return JobInfo(job_id, fields.get("JobState", ""), fields.get("Reason", ""), fields.get("NodeList", ""))


def job_detail(job_id: str) -> dict[str, str]:
    """``scontrol -o show job JOB`` as a dict (JobState, Reason, EndTime, TimeLimit, ...); {} once Slurm forgot it.

    ``JobState`` is the job's state even while it is still completing (squeue then says COMPLETING).
    """
    _job(job_id)
    try:
        out = _run(["scontrol", "-o", "show", "job", job_id])
    except SlurmError:
        return {}
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def node_states(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Each node's ``State`` (``ALLOCATED+DRAIN``, ``DOWN*``, ...) and ``Reason``, from ``scontrol show node``."""
    out = _run(["scontrol", "-o", "show", "node", ",".join(names)])
    found: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        name = re.search(r"\bNodeName=(\S+)", line)
        state = re.search(r"\bState=(\S+)", line)
        reason = re.search(r"\bReason=(.*?)(?: \w+=|$)", line)
        if name and state:
            found[name.group(1)] = (state.group(1), reason.group(1).strip() if reason else "")
    return found


def hostnames(nodelist: str) -> list[str]:
    """``scontrol show hostnames LIST``: ``node[0-2]`` -> ``['node0', 'node1', 'node2']``."""
    return _run(["scontrol", "show", "hostnames", nodelist]).split()


def node_addresses(names: Sequence[str]) -> dict[str, str]:
    """Each node's ``NodeAddr`` (the address Slurm itself reaches it at), from ``scontrol show node``."""
    out = _run(["scontrol", "-o", "show", "node", ",".join(names)])
    found: dict[str, str] = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" in fields:
            found[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return found


def cancel(job_id: str, *, step: str | None = None, signal: str | None = None) -> None:
    """``scancel JOB[.STEP]`` (with ``--signal`` when given); a job already gone is not an error."""
    if step is not None and not step.isdigit():
        raise SlurmError(f"{step!r} is not a job step number: refusing to pass it to scancel")
    target = f"{_job(job_id)}.{step}" if step is not None else _job(job_id)
    argv = ["scancel", *([f"--signal={signal}"] if signal else []), target]
    try:
        _run(argv)
    except SlurmError as exc:
        if "Invalid job id" not in str(exc) and "already completing or completed" not in str(exc):
            raise
