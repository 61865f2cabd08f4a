"""Why a Slurm job pends, and what to do about it: a table, one row per ``squeue`` reason code.

Source: Slurm's "Job Reason Codes" (https://slurm.schedmd.com/job_reason_codes.html, also ``man squeue``,
section JOB REASON CODES), for slurm-wlm 22.05. The advice is ours. :func:`explain` is the only logic.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["REASONS", "PendingReason", "explain", "hopeless"]


class PendingReason(NamedTuple):
    """What a reason code means and how to get the job running."""

    meaning: str
    fix: str
    hopeless: bool = False
    """True when waiting cannot help: the request can never be met as written."""


REASONS: dict[str, PendingReason] = {
    "None": PendingReason("the scheduler has not looked at the job yet", "wait a few seconds"),
    "Resources": PendingReason("the nodes/GPUs asked for are busy with other jobs",
                               "wait, or ask for fewer nodes ([slurm] nodes) or GPUs ([slurm] gpus_per_node)"),
    "Priority": PendingReason("jobs with higher priority are queued ahead of this one",
                              "wait; `sprio -j JOB` shows the priority, `squeue -p PARTITION` the queue"),
    "Dependency": PendingReason("the job waits for another job to finish", "check the --dependency in [slurm] sbatch_args"),
    "BeginTime": PendingReason("the job's start time has not come yet", "check --begin in [slurm] sbatch_args"),
    "PartitionConfig": PendingReason(
        "the request exceeds what the partition allows or has (more nodes, GPUs or time than it offers)",
        "ask for fewer nodes ([slurm] nodes) or less time ([slurm] time); `sinfo -p PARTITION` shows what it has",
        hopeless=True),
    "PartitionNodeLimit": PendingReason("more (or fewer) nodes than the partition's per-job limits",
                                        "set [slurm] nodes within the partition's MinNodes..MaxNodes (`scontrol show partition`)",
                                        hopeless=True),
    "PartitionTimeLimit": PendingReason("the time limit asked for exceeds the partition's MaxTime",
                                        "lower [slurm] time (`scontrol show partition` shows MaxTime)", hopeless=True),
    "PartitionDown": PendingReason("the partition is down", "ask the admins, or pick another [slurm] partition"),
    "PartitionInactive": PendingReason("the partition is inactive", "ask the admins, or pick another [slurm] partition"),
    "ReqNodeNotAvail": PendingReason("some nodes the job needs are down, drained or reserved",
                                     "wait for the admins, or ask for fewer nodes ([slurm] nodes); `sinfo -R` says why nodes are out"),
    # The backfill scheduler's words for the same wait (squeue prints them with spaces, scontrol with underscores:
    # ``Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions``); which of the
    # two a pending job shows depends on which scheduler pass looked at it last.
    "Nodes required for job are DOWN": PendingReason(
        "some nodes the job needs are down, drained or reserved for jobs in higher-priority partitions",
        "wait for the admins, or ask for fewer nodes ([slurm] nodes); `sinfo -R` says why nodes are out"),
    "NodeDown": PendingReason("a node the job needs is down", "wait, or ask the admins; `sinfo -R` says why"),
    "BadConstraints": PendingReason("no node matches the constraints asked for",
                                    "fix --constraint/--gres in [slurm] sbatch_args or [slurm] gpus_per_node", hopeless=True),
    "QOSMaxNodePerJobLimit": PendingReason("your QOS allows fewer nodes per job", "lower [slurm] nodes", hopeless=True),
    "QOSMaxWallDurationPerJobLimit": PendingReason("your QOS allows less time per job", "lower [slurm] time", hopeless=True),
    "QOSMaxGRESPerJob": PendingReason("your QOS allows fewer GPUs per job", "lower [slurm] gpus_per_node or nodes", hopeless=True),
    "QOSMaxJobsPerUserLimit": PendingReason("you already run as many jobs as your QOS allows", "wait for one of your jobs to end (`squeue --me`)"),
    "QOSGrpGRES": PendingReason("your QOS group has used its GPU allowance", "wait, or ask for fewer GPUs"),
    "QOSGrpNodeLimit": PendingReason("your QOS group has used its node allowance", "wait, or ask for fewer nodes"),
    "AssocGrpGRES": PendingReason("your account has used its GPU allowance", "wait, or ask for fewer GPUs; or another [slurm] account"),
    "AssocMaxJobsLimit": PendingReason("your account already runs as many jobs as it may", "wait for one of your jobs to end (`squeue --me`)"),
    "InvalidAccount": PendingReason("the account is not valid for you", "fix [slurm] account (`sacctmgr show assoc user=$USER`)", hopeless=True),
    "InvalidQOS": PendingReason("the QOS is not valid for you", "fix --qos in [slurm] sbatch_args", hopeless=True),
    "JobHeldUser": PendingReason("the job is held by its user", "`scontrol release JOB`"),
    "JobHeldAdmin": PendingReason("the job is held by an administrator", "ask the admins"),
    "Reservation": PendingReason("the job waits for its reservation to start", "check --reservation in [slurm] sbatch_args"),
    "Licenses": PendingReason("the licenses the job needs are in use", "wait"),
}


def explain(reason: str) -> PendingReason:
    """The row for ``reason`` as squeue or scontrol prints it (``ReqNodeNotAvail, May be reserved ...`` included)."""
    code = reason.replace("_", " ").split(",", 1)[0].split("(", 1)[0].strip()
    return REASONS.get(code, PendingReason(f"Slurm says {reason!r}", "see `scontrol show job JOB` and "
                                           "https://slurm.schedmd.com/job_reason_codes.html"))


def hopeless(reason: str) -> bool:
    """Whether waiting cannot help (the request can never be met as written)."""
    return explain(reason).hopeless
