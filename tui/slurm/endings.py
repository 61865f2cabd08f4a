"""Why Slurm ended a job, and what to do: a table, one row per job state (pure: no I/O).

Source: Slurm's job state codes (``man squeue``, JOB STATE CODES; https://slurm.schedmd.com/squeue.html#lbAG),
slurm-wlm 22.05. Each row names the failure doctor's cause id (:data:`shared.doctor_signatures.CAUSES`);
:func:`verdict` is the only logic, and :func:`evidence_line` the line the doctor reads.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["ENDINGS", "Ending", "SlurmVerdict", "evidence_line", "verdict"]


class Ending(NamedTuple):
    """What a job state means for a run, the fix, and the doctor's cause id."""

    meaning: str
    fix: str
    cause: str


ENDINGS: dict[str, Ending] = {
    "TIMEOUT": Ending("the job reached its time limit ([slurm] time = {time}); Slurm stopped every process of it",
                      "raise [slurm] time (within the partition's MaxTime: `scontrol show partition`), or save checkpoints "
                      "more often and continue with `ftwiz --launch --resume`", "slurm.time_limit"),
    "DEADLINE": Ending("the job reached its deadline (--deadline)", "drop or move --deadline in [slurm] sbatch_args",
                       "slurm.time_limit"),
    "NODE_FAIL": Ending("a node of the job failed or was set DOWN, and Slurm ended the job",
                        "`sinfo -R` says why the node is out; launch again, keeping the node out with sbatch_args = "
                        "[\"--exclude=NODE\"] until it is fixed (`--resume` finds a node's checkpoints under "
                        "<workdir>/<node>/: copy them to the node taking its place)", "slurm.node_fail"),
    "BOOT_FAIL": Ending("a node of the job failed to boot", "launch again; tell the admins if it repeats (`sinfo -R`)",
                        "slurm.node_fail"),
    "PREEMPTED": Ending("a higher-priority job preempted this one", "launch again with `--resume`; on a partition or QOS "
                        "that is not preemptible the run is not taken away (ask the admins which)", "slurm.preempted"),
    "CANCELLED": Ending("the job was cancelled from outside this ftwiz (scancel, by you or an administrator)",
                        "`sacct -j {job} -o JobID,State,Reason` says who and when; `ftwiz --launch --resume` continues "
                        "from the latest checkpoint", "slurm.cancelled"),
    "OUT_OF_MEMORY": Ending("a step went over the job's memory limit (--mem / --mem-per-cpu): Slurm's cgroup OOM "
                            "handler killed it", "ask for more memory (sbatch_args = [\"--mem=0\"] takes each node's "
                            "whole memory) or lower [job] micro_batch_size", "oom.host"),
    "REQUEUED": Ending("Slurm requeued the job (a node failed, or it was preempted) and killed every process of it",
                       "`sinfo -R` says which node is out; launch again with `--resume`", "slurm.node_fail"),
    "PENDING": Ending("Slurm put the running job back in the queue (requeued after a node failure or a preemption) "
                      "and killed every process of it", "`sinfo -R` says which node is out; launch again with `--resume`",
                      "slurm.node_fail"),
    "COMPLETED": Ending("the job ended while the run was going: its keeper step was cancelled (`scancel JOB.STEP`), "
                        "which killed the run on every node", "`sacct -j {job}` shows the steps; launch again with "
                        "`--resume`", "slurm.cancelled"),
    "FAILED": Ending("the job's batch step ended with an error: its keeper step was cancelled (`scancel JOB.STEP`) "
                     "or could not run on a node, which ended the run on every node",
                     "`sacct -j {job}` shows which step ended how, <workdir>/.ftwiz-slurm/job-{job}.out what srun said; "
                     "launch again with `--resume`", "slurm.cancelled"),
}


class SlurmVerdict(NamedTuple):
    """One ended job, explained."""

    job_id: str
    state: str
    reason: str
    meaning: str
    fix: str
    cause: str

    @property
    def text(self) -> str:
        """One sentence for the operator: what Slurm did, why, and the fix."""
        why = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        return f"Slurm ended job {self.job_id}: {self.state}{why}: {self.meaning} — fix: {self.fix}"

    def as_dict(self) -> dict[str, str]:
        """For ``run.json``'s ``slurm.ended``."""
        return dict(self._asdict())


def verdict(job_id: str, state: str, reason: str = "", *, time_limit: str = "") -> SlurmVerdict:
    """The row for ``state`` as ``scontrol``/``squeue`` print it (``CANCELLED by 0`` included)."""
    code = state.split()[0].rstrip("+") if state.strip() else "GONE"
    row = ENDINGS.get(code, Ending(f"Slurm says {state or 'the job is gone'}",
                                   f"`scontrol show job {job_id}` or `sacct -j {job_id}` says more", "unknown"))
    return SlurmVerdict(job_id, code, reason, row.meaning.format(time=time_limit or "?", job=job_id),
                        row.fix.format(time=time_limit or "?", job=job_id), row.cause)


def evidence_line(v: SlurmVerdict) -> str:
    """The line ftwiz writes to ``runs/<id>/_slurm.log`` (the doctor's signatures match it)."""
    return f"ftwiz-slurm: JobId={v.job_id} JobState={v.state} Reason={v.reason or 'None'}"
