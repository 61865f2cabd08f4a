"""The sbatch options a ``[slurm]`` section means (pure: no I/O)."""

from __future__ import annotations

from shared.config import SlurmConfig

__all__ = ["sbatch_options"]


def sbatch_options(slurm: SlurmConfig, *, job_name: str) -> list[str]:
    """``--nodes``, ``--ntasks-per-node=1``, gres, time, partition, account, then ``sbatch_args`` verbatim.

    One task per node: the agent step and torchrun each run once per node; torchrun starts the ranks.
    """
    options = [
        f"--job-name={job_name}",
        f"--nodes={slurm.nodes}",
        "--ntasks-per-node=1",
        f"--time={slurm.time}",
    ]
    if slurm.gpus_per_node:
        options.append(f"--gpus-per-node={slurm.gpus_per_node}")
    if slurm.partition:
        options.append(f"--partition={slurm.partition}")
    if slurm.account:
        options.append(f"--account={slurm.account}")
    options.extend(slurm.sbatch_args)
    return options
