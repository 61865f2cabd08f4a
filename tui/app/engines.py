"""The one place the wizard calls the engines that ``ftwiz --check`` and ``ftwiz --launch`` use.

Nothing here decides anything: it adapts the engines' calls and callbacks to the screens (progress
as counts, events onto the UI thread). Tests may replace an engine through ``FtwizApp(engines=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from shared.config import FtwizConfig
from tui.app.widgets.job.fit_chart import FitRow

if TYPE_CHECKING:
    from tui.app.cluster_state import ClusterState
    from tui.app.wizard import Wizard

__all__ = ["JobPlan", "check_ids", "check_title", "new_run", "plan_job", "run_checks"]


def check_ids(only: Optional[str] = None) -> list[str]:
    """Registered check ids in display order (those the engine's ``only=[only]`` would run)."""
    from tui.checks import CHECKS, ORDER

    ids = [spec.id for spec in CHECKS if not only or spec.id.startswith(only) or only.startswith(spec.id)]
    rank = {cid: i for i, cid in enumerate(ORDER)}
    return sorted(ids, key=lambda cid: rank.get(cid, len(ORDER)))


def check_title(check_id: str) -> str:
    """The registered title of ``check_id`` (the id itself when unknown)."""
    from tui.checks import CHECKS

    return next((spec.title for spec in CHECKS if spec.id == check_id), check_id)


async def run_checks(
    app: "Wizard",
    config: FtwizConfig,
    *,
    only: Optional[str],
    progress: Callable[[int, int, list[str]], None],
) -> Any:
    """The checklist engine over ``config`` (a ``ChecklistRun``); ``progress(done, total, still_running_ids)``."""
    from tui.checks.engine import run_checklist_full

    runner = app.engines.get("run_checklist", run_checklist_full)
    pending = check_ids(only)
    total = len(pending) + 2
    progress(0, total, list(pending))

    def on_progress(label: str, done: int, total_steps: int) -> None:
        if label in pending:
            pending.remove(label)
        progress(done, total_steps, list(pending))

    from tui.checks.usercode import options_for

    # [job].code_dir is relative to ftwiz.toml, wherever the wizard was started from (the launch does the same).
    extra = {"options": options_for(str(app.config_path))} if getattr(app, "config_path", None) else {}
    return await runner(config, client=app.client, progress=on_progress, only=[only] if only else None, **extra)


async def run_full_mesh(app: "Wizard", config: FtwizConfig) -> Any:
    """``net.mesh`` alone with every pair streamed now (the wizard's background refresh of the cached matrix)."""
    from tui.checks.engine import run_checklist_full

    runner = app.engines.get("run_checklist", run_checklist_full)
    return await runner(config, client=app.client, only=["net.mesh"], options={"mesh": "full"})


@dataclass
class JobPlan:
    """What the Job step draws: the estimate's items, a bar per GPU, and the routing advice."""

    items: list[tuple[str, int]] = field(default_factory=list)
    """``(item, bytes per GPU)`` from the estimator, in its order."""
    rows: list[FitRow] = field(default_factory=list)
    """One bar per GPU (or run of identical GPUs of a node) with the estimator's verdict."""
    note: str = ""
    """Why there is no estimate, or where the architecture came from and the parallel layout."""
    notes: list[str] = field(default_factory=list)
    """The estimator's assumptions worth knowing."""
    advice: list[Any] = field(default_factory=list)
    """Routing advice items, each with its reason."""
    advice_note: str = ""
    """Why there is no advice."""


def plan_job(config: FtwizConfig, cluster: "ClusterState") -> JobPlan:
    """The estimator and the routing rules for ``config`` against the GPUs last reported.

    The architecture comes from the same resolver the ``mem.fit`` check uses, and the GPUs a node
    contributes from the same selection (``gpus = "all" | N | [indices]``).
    """
    job = config.job
    from tui.jobshape import DECLARE_HINT, planned, planned_note

    if not planned(job):
        if job.workload == "command":
            return JobPlan(note=f"Your code's model is not declared: {DECLARE_HINT}.", advice_note="Nothing declared to route.")
        return JobPlan(note=f"workload {job.workload}: no model to fit in memory.", advice_note="The all-reduce check needs no plan.")
    from shared import estimator
    from tui.checks.resources import resolve_arch
    from tui.jobshape import gpu_inventory, world_size

    source = resolve_arch(config)
    if source.arch is None:
        return JobPlan(note=f"Unknown model: {source.source}. Use a local directory with config.json, or a catalog id.")
    reports = {n.name: view.report for n in config.nodes if (view := cluster.nodes.get(n.name)) is not None and view.report is not None}
    inventory = gpu_inventory(config, reports)
    dp = world_size(config, reports)
    try:
        est = estimator.estimate(source.arch, job, dp_size=dp, sharding=None if job.sharding == "auto" else job.sharding)
    except Exception as exc:  # an estimator bug must not take the form down
        return JobPlan(note=f"estimator failed: {type(exc).__name__}: {exc}")
    plan = JobPlan(items=_items(est), note=f"{source.source} · dp {dp} · {est.sharding} · peak at {est.phase}{planned_note(job)}",
                   notes=list(getattr(est, "notes", []) or []))
    for node_name, gpus in inventory.items():
        plan.rows.extend(_fit_rows(est, node_name, gpus))
    plan.advice, plan.advice_note = _advice(config, inventory, source.arch, reports)
    return plan


def _items(est: Any) -> list[tuple[str, int]]:
    """``(short name, bytes)`` per item of the estimate at its peak phase, in the estimator's order."""
    return [(item.name.replace("_", " "), int(item.bytes)) for item in est.items]


def _fit_rows(est: Any, node: str, gpus: list[Any]) -> list[FitRow]:
    """One row per GPU; consecutive GPUs with the same free memory and verdict share a row."""
    from shared.fit import fit

    rows: list[FitRow] = []
    verdicts: dict[int, Any] = {}  # GPUs with the same free memory get the same answer (and levers cost re-estimates)
    first = last = None
    for gpu in gpus:
        free = gpu.memory_free_bytes if gpu.memory_free_bytes is not None else gpu.memory_total_bytes
        verdict, lever = "unknown", ""
        if free is not None:
            answer = verdicts.get(free)
            if answer is None:
                answer = verdicts[free] = fit(est, free)
            verdict = answer.status
            if answer.lever is not None:
                lever = f"{answer.lever.change}: saves {answer.lever.saves_bytes / 1024**3:.1f} GiB → {answer.lever.new_total_bytes / 1024**3:.1f} GiB"
        row = FitRow(f"{node} GPU{gpu.index}", free, gpu.memory_total_bytes, verdict, lever)
        previous = rows[-1] if rows else None
        if previous is not None and last is not None and gpu.index == last + 1 and _same(previous, row):
            previous.label = f"{node} GPU{first}-{gpu.index}"
            last = gpu.index
            continue
        rows.append(row)
        first = last = gpu.index
    return rows


def _same(a: FitRow, b: FitRow) -> bool:
    close = a.free_bytes is not None and b.free_bytes is not None and abs(a.free_bytes - b.free_bytes) < 256 * 1024**2
    return close and a.verdict == b.verdict and a.lever == b.lever


def _advice(config: FtwizConfig, inventory: dict[str, list[Any]], arch: Any, reports: dict[str, Any]) -> tuple[list[Any], str]:
    """Routing advice for the job over the GPUs each node will use (each item carries its reason)."""
    from shared import routing
    from tui.jobshape import interconnect

    try:
        return list(routing.advise(inventory, interconnect(config, reports), arch, config.job)), ""
    except Exception as exc:  # a rules bug must not take the form down
        return [], f"routing failed: {type(exc).__name__}: {exc}"


def new_run(app: "Wizard", config: FtwizConfig, *, resume: bool) -> Any:
    """A :class:`tui.launch.run.Run` for ``config``, prepared as ``ftwiz --launch`` prepares it
    (:func:`tui.launch.prepare.new_run`): the checklist's reports (else the poller's latest), its
    interface plan, and the checklist's rendezvous-port listener to wait out before torchrun starts.

    Raises :class:`tui.launch.run.LaunchError` when there is nothing to resume.
    """
    from tui.client import reports_of
    from tui.launch.events import RunNote
    from tui.launch.prepare import new_run as prepare_run
    from tui.launch.run import RunOptions

    options = app.engines.get("run_options") or RunOptions()
    statuses = app.checks.statuses or app.last_statuses
    reports = reports_of(statuses)
    run, note = prepare_run(config, options=options, reports=reports, resume=resume, listener_until=app.checks.listener_until,
                            config_source=str(app.config_path) if app.config_path else None, checked=app.checks.results_run)
    if note:
        app.run_event(RunNote(note, "warn"))
    return run
