"""The Slurm backend's entry points for ``tui/cli.py``: ``--export-sbatch`` and ``--check`` on an allocation."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from shared.config import FtwizConfig

__all__ = ["check_on_allocation", "export_sbatch"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def export_sbatch(config: FtwizConfig, path: str, *, stderr: TextIO = sys.stderr) -> int:
    """Write the sbatch script of the configured job to ``path`` (``-`` for stdout); returns the exit code.

    The run directory is created under ``[slurm] workdir`` (resolved here: it must be the same path on every
    node, a shared filesystem), so the script's ``#SBATCH --output`` can be written there.
    """
    from tui.launch.record import new_run_id
    from tui.launch.support import workload_files
    from tui.slurm.export import ExportError, export_script

    run_id = new_run_id()
    workdir_abs = os.path.abspath(os.path.expanduser(config.slurm.workdir))
    try:
        script = export_script(config, run_id, workdir_abs=workdir_abs, workloads=workload_files())
    except (ExportError, RuntimeError) as exc:
        print(f"ftwiz: cannot export the sbatch script: {exc}", file=stderr)
        return EXIT_USAGE
    rundir = Path(workdir_abs) / "runs" / run_id
    try:
        rundir.mkdir(parents=True, exist_ok=True)
        if path == "-":
            sys.stdout.write(script)
        else:
            target = Path(path)
            tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
            tmp.write_text(script)
            tmp.chmod(0o755)
            os.replace(tmp, target)
    except OSError as exc:
        print(f"ftwiz: cannot write {exc.filename or path}: {exc.strerror or exc}", file=stderr)
        return EXIT_FAILED
    where = "stdout" if path == "-" else path
    print(f"ftwiz: wrote the sbatch script of run {run_id} to {where}; submit it with `sbatch {where}` "
          f"(logs in {rundir})", file=stderr)
    return EXIT_OK




def check_on_allocation(loaded: Any, *, show: Callable[[Any, Any], int], stderr: TextIO = sys.stderr,
                        ready_timeout_s: float = 180.0) -> int:
    """``ftwiz --check`` with ``backend = "slurm"``: allocate, start the agents as a step, run the checklist.

    ``show(loaded_like, run)`` prints the rows the way ``--check`` does and returns the exit code; it gets the
    allocation's concrete config. The job is cancelled at the end (and on Ctrl-C or any error).
    """
    import asyncio
    from types import SimpleNamespace

    from tui.checks.engine import run_checklist_full
    from tui.slurm.agents import AgentStep, AgentStepError, write_token
    from tui.slurm.allocation import Allocation, AllocationError
    from tui.slurm.checks import slurm_rows

    config = loaded.config

    def say(message: str) -> None:
        print(f"ftwiz: {message}", file=stderr, flush=True)

    workdir_abs = os.path.abspath(os.path.expanduser(config.slurm.workdir))
    try:
        allocation = Allocation.submit(config, job_name="ftwiz-check")
    except AllocationError as exc:
        say(str(exc))
        return EXIT_FAILED
    say(f"submitted job {allocation.job_id} ({config.slurm.nodes} node(s)"
        f"{', partition ' + config.slurm.partition if config.slurm.partition else ''}); waiting for it to run")
    step: AgentStep | None = None
    try:
        allocation.wait_running(say=say)
        token = write_token(Path(workdir_abs) / ".ftwiz-slurm" / allocation.job_id)
        step = AgentStep(config, allocation.job_id, allocation.nodes, allocation.addresses,
                         token_file=token, workdir_abs=workdir_abs).start()
        step.wait_ready(ready_timeout_s)
        say(f"agents up as step of job {allocation.job_id}: "
            + ", ".join(f"{n}:{step.ports[n]}" for n in allocation.nodes))
        concrete = step.cluster_config()
        run = asyncio.run(run_checklist_full(concrete, ssh=False, progress=_progress(stderr)))
        run.results = slurm_rows(allocation, step, run.results)
        return show(SimpleNamespace(config=concrete, path=loaded.path), run)
    except (AllocationError, AgentStepError) as exc:
        say(str(exc))
        return EXIT_FAILED
    finally:
        if step is not None:
            step.stop()
        allocation.cancel()
        say(f"job {allocation.job_id} cancelled")


def _progress(stderr: TextIO) -> Callable[[str, int, int], None]:
    def report(label: str, done: int, total: int) -> None:
        if ":" in label:
            print(f"ftwiz: {label}", file=stderr, flush=True)

    return report
