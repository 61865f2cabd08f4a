"""``ftwiz --attach`` and ``ftwiz --stop`` of a run living in a Slurm job (its ``run.json`` names the job).

The run goes on in the allocation's keepers (:mod:`tui.slurm.keeper`) whatever ftwiz does; attaching follows
it again through job steps, stopping kills its processes through job steps and then cancels the job.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tui.slurm.commands import say_to
from tui.slurm.held import EXIT_FAILED, EXIT_OK, HeldRun, cancel_job, job_running, stored_run

__all__ = ["attach_on_allocation", "stop_on_allocation"]


def attach_on_allocation(loaded: Any, run_id: str | None, *, stderr: TextIO = sys.stderr, options: Any = None) -> int:
    """``ftwiz --attach`` of a run living in a Slurm job: follow it through job steps (the job must still run)."""
    from tui.launch import commands
    from tui.launch.options import RunOptions
    from tui.slurm.keeper import release_file

    say = say_to(stderr)
    run_options = options or RunOptions()
    stored = stored_run(run_id, run_options, say)
    if isinstance(stored, int):
        return stored
    if not job_running(stored, say):
        return EXIT_FAILED
    run_id, job = stored.run_id, stored.job
    held = HeldRun.for_record(stored)
    keep = held.info["keep_allocation"]
    release = release_file(stored.info["state_dir"], job)
    release.unlink(missing_ok=True)  # supervised again: this ftwiz ends the job when the run ends
    try:
        code = int(commands.attach(stored.config, run_id, options=held.wire(run_options)))
    finally:
        held.stop_watching()
    if held.detached or held.run is None or held.run.result is None:  # detached again, or the attach failed
        if not keep:
            release.touch()
        say(f"run {run_id} goes on in job {job}")
    elif not keep:
        cancel_job(job)
        say(f"job {job} cancelled")
    held.report(say)
    return code


def stop_on_allocation(loaded: Any, run_id: str, *, stderr: TextIO = sys.stderr, options: Any = None) -> int:
    """``ftwiz --stop RUN`` of a run living in a Slurm job: stop its processes on every node, then ``scancel``."""
    from tui.launch import commands
    from tui.launch.options import RunOptions
    from tui.slurm.link import srun_link_factory
    from tui.slurm.watch import ended_verdict

    say = say_to(stderr)
    run_options = options or RunOptions()
    stored = stored_run(run_id, run_options, say)
    if isinstance(stored, int):
        return stored
    job = stored.job
    gone = ended_verdict(job)
    if gone is not None:
        say(f"job {job} is already over ({gone.state}): Slurm ended every process of run {stored.run_id}")
        return EXIT_OK
    run_options.link_factory = srun_link_factory(job, stored.info.get("keeper"))
    code = int(commands.stop(stored.config, stored.run_id, options=run_options))
    if not stored.info.get("keep_allocation"):
        cancel_job(job)
        say(f"job {job} cancelled (`scancel {job}`)")
    return code


