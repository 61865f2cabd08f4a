"""The wizard (``ftwiz`` with no action) on a Slurm allocation.

The allocation comes first (in the terminal: the pending reasons are printed as for ``--check``), then the
wizard opens on what Slurm gave: the allocated nodes and their agents (a job step), the checklist with the
Slurm rows and without SSH, and the Launch step running the job through job steps with the allocation's
keepers (:mod:`tui.slurm.keeper`), watched by :class:`tui.slurm.held.HeldRun`. The Cluster is Slurm's, so
Ctrl+S writes the edited ``[job]`` into the user's file and keeps its ``[cluster]`` and ``[slurm]`` as they
are (never the allocation's node list). Quitting with the run going and choosing *Detach* hands the job to the
run (it ends when the run ends); anything else cancels the job, unless ``keep_allocation``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from shared.config import FtwizConfig

__all__ = ["wizard_app", "wizard_on_allocation"]


def wizard_app(session: Any, user_config: FtwizConfig, config_path: str | Path | None, *,
               options: Any = None, **app_kw: Any) -> tuple[Any, Any]:
    """The wizard over ``session``'s allocation, and the :class:`~tui.slurm.held.HeldRun` it launches into."""
    from tui.app.app import FtwizApp
    from tui.checks.engine import run_checklist_full
    from tui.config_io import save_config
    from tui.launch.options import RunOptions
    from tui.slurm.checks import slurm_rows
    from tui.slurm.held import HeldRun

    held = HeldRun.for_session(session)
    run_options = held.wire(options or RunOptions())

    async def run_checklist(config: FtwizConfig, *, client: Any = None, progress: Any = None,
                            only: Any = None, options: Any = None) -> Any:
        run = await run_checklist_full(config, client=client, progress=progress, only=only, ssh=False, options=options)
        run.results = slurm_rows(session.allocation, session.step, run.results)
        return run

    def save(snapshot: FtwizConfig, path: Path) -> None:
        save_config(user_config.model_copy(update={"job": snapshot.job}), path)

    engines = {"run_checklist": run_checklist, "run_options": run_options, "save_config": save}
    app = FtwizApp(session.config, config_path, engines=engines, **app_kw)
    return app, held


def wizard_on_allocation(loaded: Any, *, stderr: TextIO = sys.stderr) -> int:
    """``ftwiz`` with ``backend = "slurm"``: allocate, then the wizard on the allocation (see the module docstring)."""
    from tui.slurm.agents import AgentStepError
    from tui.slurm.allocation import AllocationError
    from tui.slurm.commands import EXIT_FAILED, say_to
    from tui.slurm.session import allocation_session

    say = say_to(stderr)
    config = loaded.config
    try:
        with allocation_session(config, say=say, job_name="ftwiz-wizard", keep=config.slurm.keep_allocation) as session:
            app, held = wizard_app(session, config, loaded.path)
            code = int(app.run() or 0)
            held.settle()
            held.finish(session, say)
            return code
    except (AllocationError, AgentStepError) as exc:
        say(str(exc))
        return EXIT_FAILED

