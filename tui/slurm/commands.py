"""The Slurm backend's entry points for ``tui/cli.py``: ``--export-sbatch``, and ``--check`` and ``--launch`` on an
allocation (``--attach`` and ``--stop``: :mod:`tui.slurm.detached`; the wizard: :mod:`tui.slurm.wizard`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from shared.config import FtwizConfig
from tui.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "check_on_allocation", "export_sbatch", "launch_on_allocation",
           "say_to"]


def export_sbatch(config: FtwizConfig, path: str, *, stderr: TextIO = sys.stderr) -> int:
    """Write the sbatch script of the configured job to ``path`` (``-`` for stdout); returns the exit code.

    The run directory is created under ``[slurm] workdir`` (resolved here: it must be the same path on every
    node, a shared filesystem), so the script's ``#SBATCH --output`` can be written there.
    """
    from tui.launch.support import workload_files
    from tui.runs.record import new_run_id
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
        rundir.mkdir(parents=True, exist_ok=True, mode=0o700)
        rundir.chmod(0o700)
        if path == "-":
            sys.stdout.write(script)
        else:
            # 0700: the script carries job.json, whose [job].env may hold an HF_TOKEN
            target = Path(path)
            tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
            with os.fdopen(fd, "w") as handle:
                handle.write(script)
            tmp.chmod(0o700)
            os.replace(tmp, target)
    except OSError as exc:
        print(f"ftwiz: cannot write {exc.filename or path}: {exc.strerror or exc}", file=stderr)
        return EXIT_FAILED
    where = "stdout" if path == "-" else path
    print(f"ftwiz: wrote the sbatch script of run {run_id} to {where}; submit it with `sbatch {where}` "
          f"(logs in {rundir})", file=stderr)
    return EXIT_OK


def check_on_allocation(loaded: Any, *, show: Callable[[Any, Any], int], stderr: TextIO = sys.stderr) -> int:
    """``ftwiz --check`` with ``backend = "slurm"``: allocate, start the agents as a step, run the checklist.

    ``show(loaded_like, run)`` prints the rows the way ``--check`` does and returns the exit code; it gets the
    allocation's concrete config. The job is cancelled at the end (and on Ctrl-C or any error).
    """
    from types import SimpleNamespace

    from tui.slurm.agents import AgentStepError
    from tui.slurm.allocation import AllocationError
    from tui.slurm.session import allocation_session

    say = say_to(stderr)
    try:
        with allocation_session(loaded.config, say=say, job_name="ftwiz-check") as session:
            run = _checklist(session, stderr)
            return show(SimpleNamespace(config=session.config, path=loaded.path), run)
    except (AllocationError, AgentStepError) as exc:
        say(str(exc))
        return EXIT_FAILED


def launch_on_allocation(loaded: Any, *, yes: bool, detach: bool, resume: bool, force: bool,
                         stderr: TextIO = sys.stderr, options: Any = None) -> int:
    """``ftwiz --launch`` with ``backend = "slurm"``: allocate, check, then run the job through job steps.

    The supervisor is the SSH backend's (progress, logs, run.json, stall detection, stop-all); only the node
    transport differs (:mod:`tui.slurm.link`), and the run is started by the allocation's keepers
    (:mod:`tui.slurm.keeper`), so it goes on when ftwiz detaches. The job is cancelled when the run ends,
    unless ``[slurm] keep_allocation`` or the run was detached (the job then ends with the run).
    """
    from tui.launch import commands
    from tui.launch.options import RunOptions
    from tui.slurm.agents import AgentStepError
    from tui.slurm.allocation import AllocationError
    from tui.slurm.held import HeldRun
    from tui.slurm.session import allocation_session

    say = say_to(stderr)
    config = loaded.config
    try:
        with allocation_session(config, say=say, job_name="ftwiz-run", keep=config.slurm.keep_allocation) as session:
            checked = _checklist(session, stderr)
            held = HeldRun.for_session(session)
            run_options = held.wire(options or RunOptions())
            try:  # one launch path: the SSH backend's gate, plan and record, with this checklist's rows
                code = int(commands.launch(session.config, yes=yes, detach=detach, resume=resume, force=force,
                                           options=run_options, checked=checked))
            finally:
                held.finish(session, say)
            return code
    except (AllocationError, AgentStepError) as exc:
        say(str(exc))
        return EXIT_FAILED


def _checklist(session: Any, stderr: TextIO) -> Any:
    """The checklist against the session's agents, with the Slurm rows (:mod:`tui.slurm.checks`)."""
    import asyncio

    from tui.checks.engine import run_checklist_full
    from tui.slurm.checks import slurm_rows

    run = asyncio.run(run_checklist_full(session.config, ssh=False, progress=_progress(stderr)))
    run.results = slurm_rows(session.allocation, session.step, run.results)
    return run


def say_to(stderr: TextIO) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"ftwiz: {message}", file=stderr, flush=True)

    return say


def _progress(stderr: TextIO) -> Callable[[str, int, int], None]:
    def report(label: str, done: int, total: int) -> None:
        if ":" in label:
            print(f"ftwiz: {label}", file=stderr, flush=True)

    return report
