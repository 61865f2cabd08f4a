"""The checklist rows that differ on Slurm: the job itself, the agent step, and what does not apply.

The engine's checks run unchanged against the allocation's agents (GPUs are the allotted ones, software
parity is ``env.parity``); here the Slurm rows are added first and the SSH-only rows say why they do not apply.
"""

from __future__ import annotations

from collections.abc import Sequence

from tui.checks.base import CheckResult, result
from tui.slurm.agents import AgentStep
from tui.slurm.allocation import Allocation

__all__ = ["NOT_ON_SLURM", "slurm_rows"]

#: Rows that need SSH, and what to say instead on Slurm.
NOT_ON_SLURM = {
    "ssh.auth": "not used on Slurm: every process starts as a job step (srun), no SSH login is needed",
    "data.reachable": "not checked on Slurm: this check looks at the paths over SSH; "
                      "the job reads them from [slurm] workdir's filesystem",
}


def slurm_rows(allocation: Allocation, step: AgentStep, rows: Sequence[CheckResult]) -> list[CheckResult]:
    """``rows`` with the Slurm rows first and the SSH-only rows replaced by one ``skip`` row each saying why."""
    nodes = allocation.nodes
    partition = allocation.config.slurm.partition or "the default partition"
    out = [
        result("slurm.job", "Slurm job running", "pass", None,
               f"job {allocation.job_id} running on {len(nodes)} node(s) ({', '.join(nodes)}) in {partition}; "
               f"time left {allocation.time_left or '?'}"),
    ]
    missing = [n for n in nodes if n not in step.ports]
    if missing:
        out.append(result("slurm.agents", "Agent step answered on every node", "fail", None,
                          f"no agent from {', '.join(missing)}", "see the agent step's output above"))
    else:
        out.append(result("slurm.agents", "Agent step answered on every node", "pass", None,
                          f"{len(nodes)}/{len(nodes)} agents up as a step of job {allocation.job_id} "
                          f"(ports {', '.join(f'{n}:{step.ports[n]}' for n in nodes)}); software parity: env.parity"))
    replaced: set[str] = set()
    for row in rows:
        reason = NOT_ON_SLURM.get(row.id)
        if reason is None or (row.status != "skip" and row.id != "ssh.auth"):
            out.append(row)
        elif row.id not in replaced:
            replaced.add(row.id)
            out.append(result(row.id, row.title, "skip", None, reason))
    return out
