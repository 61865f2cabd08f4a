"""The Slurm backend: allocation by sbatch, agents and torchrun as job steps, and ``--export-sbatch``.

Modules, one job each:

* :mod:`tui.slurm.options`: the sbatch options a ``[slurm]`` section means (pure);
* :mod:`tui.slurm.export`: the self-contained sbatch script of ``ftwiz --export-sbatch`` (pure);
* :mod:`tui.slurm.reasons`: what a pending job's ``squeue`` reason means and how to fix it (pure, a table);
* :mod:`tui.slurm.slurmctl`: the Slurm client commands (sbatch, squeue, scontrol, scancel) as argv lists;
* :mod:`tui.slurm.allocation`: submit the holding job, wait for it (saying why it pends), cancel it;
* :mod:`tui.slurm.agents`: the agent as a job step on every allocated node, and the config it yields;
* :mod:`tui.slurm.check`: ``ftwiz --check`` against an allocation.

Never imports torch.
"""
