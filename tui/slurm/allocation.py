"""An allocation for ftwiz: the holding job (sbatch), waiting for it with squeue's reasons, cancelling it.

The job's batch step runs a keeper on every node (:mod:`tui.slurm.keeper`), which starts runs inside the
allocation; ftwiz starts everything else as job steps from this machine (``srun --jobid=JOB --overlap``). Waiting polls ``squeue`` about once a second, reports each new
pending reason with its meaning and fix (:mod:`tui.slurm.reasons`), and cancels the job on any exit that is
not a handover (Ctrl-C included), so nothing stays queued behind the user's back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shared.config import FtwizConfig
from tui.slurm import slurmctl
from tui.slurm.options import sbatch_options
from tui.slurm.reasons import explain

__all__ = ["HOLD_SCRIPT", "Allocation", "AllocationError"]

#: A batch step that only holds the allocation until cancelled (or the time limit).
HOLD_SCRIPT = "#!/bin/sh\n# ftwiz allocation: holds the nodes; ftwiz starts its job steps with srun --overlap.\nexec sleep infinity\n"


class AllocationError(RuntimeError):
    """The allocation could not be had or was lost; the message says why (Slurm's reason) and the fix."""


Say = Callable[[str], None]


@dataclass
class Allocation:
    """One Slurm job holding nodes for ftwiz."""

    job_id: str
    config: FtwizConfig
    nodes: list[str] = field(default_factory=list)
    """Allocated node names, in Slurm's order (the first is the master)."""
    addresses: dict[str, str] = field(default_factory=dict)
    """Node name -> NodeAddr."""
    time_left: str = ""

    @classmethod
    def submit(cls, config: FtwizConfig, *, job_name: str = "ftwiz", output: str = "/dev/null",
               script: str = HOLD_SCRIPT) -> Allocation:
        """``sbatch`` the holding job with the ``[slurm]`` options; returns at once (the job may pend).

        ``output`` is the batch step's ``--output`` (never a ``slurm-JOB.out`` in the cwd); ``script`` the batch
        script (the session's runs keepers: :func:`tui.slurm.keeper.batch_script`).
        """
        # --no-requeue: after a node failure Slurm would requeue the job and start the keepers again, with
        # nobody watching; ftwiz reports the failure instead (`--launch --resume` continues).
        options = [*sbatch_options(config.slurm, job_name=job_name), f"--output={output}", "--no-requeue"]
        try:
            job_id = slurmctl.submit(options, script)
        except slurmctl.SlurmError as exc:
            raise AllocationError(f"could not submit the allocation: {exc}") from None
        return cls(job_id, config)

    def wait_running(self, *, say: Say, poll_s: float = 1.0, timeout_s: float | None = None) -> None:
        """Wait until the job runs; ``say`` each new pending reason with its fix. Raises :class:`AllocationError`.

        ``timeout_s`` None waits as long as it pends (Ctrl-C raises KeyboardInterrupt; the caller cancels).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last_reason = None
        started = time.monotonic()
        while True:
            info = slurmctl.job_info(self.job_id)
            if info.state == "RUNNING" and info.nodelist:
                self.nodes = slurmctl.hostnames(info.nodelist)
                self.addresses = slurmctl.node_addresses(self.nodes)
                self.time_left = info.time_left
                say(f"job {self.job_id} running on {', '.join(self.nodes)} "
                    f"(after {time.monotonic() - started:.1f} s; time left {info.time_left or '?'})")
                return
            if not info.active:
                raise AllocationError(f"job {self.job_id} ended before it ran: {info.state or 'gone'} "
                                      f"({info.reason or 'no reason given'}); `scontrol show job {self.job_id}` says more")
            if info.state == "PENDING" and info.reason != last_reason and info.reason != "None":
                last_reason = info.reason
                row = explain(info.reason)
                cannot = " (waiting cannot help: the request can never be met as written)" if row.hopeless else ""
                say(f"job {self.job_id} pending: {info.reason}: {row.meaning}{cannot} — fix: {row.fix}; "
                    "Ctrl-C cancels the job")
            if deadline is not None and time.monotonic() > deadline:
                raise AllocationError(f"job {self.job_id} still {info.state.lower()} after {timeout_s:.0f} s "
                                      f"({info.reason}: {explain(info.reason).meaning})")
            time.sleep(poll_s)

    def cancel(self) -> None:
        """``scancel`` the job (every step with it); quiet when it is already gone."""
        slurmctl.cancel(self.job_id)

    def running(self) -> bool:
        """Whether the job still runs."""
        return slurmctl.job_info(self.job_id).state == "RUNNING"
