"""One launch preparation for the CLI (``ftwiz --launch``) and the TUI's Launch step.

Both turn the same inputs into a :class:`tui.launch.run.Run`: what to resume (the last recorded
run's output dir), the agents' reports the checklist ran on, the NCCL/gloo interface plan from
them, and the time before which torchrun must not start (the checklist's rendezvous-port test
listener on the master; the run prepares the nodes meanwhile and the wait is interruptible).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from shared.config import FtwizConfig
from tui.launch.options import LaunchError, RunOptions
from tui.launch.run import Run
from tui.runs.index import RunNotFound
from tui.runs.record import RunRecord, latest_run_id, runs_dir

__all__ = ["ResumeFrom", "listener_deadline", "new_run", "resume_from"]

#: Seconds added to the master's listener deadline: its clock may differ from ours by up to the checklist's skew bound.
LISTENER_SLACK_S = 1.0


@dataclass(frozen=True)
class ResumeFrom:
    """The run a ``--resume`` continues, and where its checkpoints are."""

    run_id: str
    output_dir: str


def resume_from(config: FtwizConfig, options: RunOptions) -> ResumeFrom:
    """The last recorded run to resume (raises :class:`LaunchError` when there is none)."""
    base = runs_dir(options.runs_dir)
    last = latest_run_id(base)
    if last is None:
        raise LaunchError(f"nothing to resume: no run recorded under {base}/ (run `ftwiz --launch` first, from this directory)")
    try:
        output_dir = RunRecord.open(base, last).model.output_dir or config.job.output_dir
    except RunNotFound as exc:
        raise LaunchError(f"cannot resume run {last}: {exc}") from None
    return ResumeFrom(last, output_dir)


def listener_deadline(listener_until: Optional[float]) -> Optional[float]:
    """Unix time before which torchrun must not start, from the checklist's listener deadline (None: no wait)."""
    return listener_until + LISTENER_SLACK_S if listener_until else None


def new_run(
    config: FtwizConfig,
    *,
    options: RunOptions,
    reports: Mapping[str, Any],
    resume: bool,
    listener_until: Optional[float] = None,
    config_source: Optional[str] = None,
    checked: Optional[Any] = None,
) -> tuple[Run, Optional[str]]:
    """A run ready to :meth:`~tui.launch.run.Run.launch`, and a warning to show (or None).

    ``checked`` is the checklist run the launch follows (:class:`tui.checks.engine.ChecklistRun`): the launch
    takes the interface environment, the sharding it approved, its compute probe's figures and each GPU's largest micro-batch as they are; its rows and its gradient-sync
    forecast go into ``run.json``, and the forecast is shown beside the sync time the run measures. Without it
    (or when it made no interface plan) the plan is :func:`shared.netplan.node_env` over ``reports``, made here
    once; when it cannot be made, NCCL/gloo pick interfaces themselves and the warning says so.
    """
    source = resume_from(config, options) if resume else None
    network_env = getattr(checked, "network_env", None)
    note = None
    if network_env is None and reports:
        try:
            from shared.netplan import node_env

            network_env = node_env(config, reports)
        except Exception as exc:  # the checklist reports a plan that cannot be made; the launch goes on
            network_env, note = {}, f"no interface plan ({type(exc).__name__}: {exc}); NCCL/gloo will pick interfaces themselves"
    run = Run(
        config,
        options=options,
        reports=reports,
        network_env=network_env,
        sharding=getattr(checked, "sharding", None),
        compute=getattr(checked, "compute", None),
        micro_caps=getattr(checked, "micro_caps", None),
        resume=resume,
        output_dir=source.output_dir if source else None,
        resumed_from=source.run_id if source else None,
        config_source=config_source,
        start_not_before=listener_deadline(listener_until),
    )
    if checked is not None:
        run.keep_checklist(getattr(checked, "results", None) or [], getattr(checked, "sync", None))
    return run, note
