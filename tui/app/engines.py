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

__all__ = ["JobPlan", "check_ids", "check_title", "interconnect", "launch_inputs", "new_run", "plan_job", "run_checks"]


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

    return await runner(config, client=app.client, progress=on_progress, only=[only] if only else None)


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
    if job.workload != "sft":
        return JobPlan(note=f"workload {job.workload}: no model to fit in memory.", advice_note="The all-reduce check needs no plan.")
    try:
        from shared import estimator
    except ImportError:
        return JobPlan(note="The memory estimator (shared/estimator.py) is not in this build.")
    from tui.checks.gpus import selected_gpus
    from tui.checks.resources import resolve_arch

    source = resolve_arch(config)
    if source.arch is None:
        return JobPlan(note=f"Unknown model: {source.source}. Use a local directory with config.json, or a catalog id.")
    inventory, reports = {}, {}
    for node in config.nodes:
        view = cluster.nodes.get(node.name)
        if view is not None and view.report is not None:
            reports[node.name] = view.report
            inventory[node.name] = selected_gpus(node, view.report)
    dp = sum(max(1, len(gpus)) for gpus in inventory.values()) or len(config.nodes)
    try:
        est = estimator.estimate(source.arch, job, dp_size=dp, sharding=None if job.sharding == "auto" else job.sharding)
    except Exception as exc:  # an estimator bug must not take the form down
        return JobPlan(note=f"estimator failed: {type(exc).__name__}: {exc}")
    plan = JobPlan(items=_items(est), note=f"{source.source} · dp {dp} · {est.sharding} · peak at {est.phase}",
                   notes=list(getattr(est, "notes", []) or []))
    for node_name, gpus in inventory.items():
        plan.rows.extend(_fit_rows(estimator, est, node_name, gpus))
    plan.advice, plan.advice_note = _advice(config, inventory, source.arch, reports)
    return plan


def _items(est: Any) -> list[tuple[str, int]]:
    """``(short name, bytes)`` per item of the estimate at its peak phase, in the estimator's order."""
    return [(item.name.replace("_", " "), int(item.bytes)) for item in est.items]


def _fit_rows(estimator: Any, est: Any, node: str, gpus: list[Any]) -> list[FitRow]:
    """One row per GPU; consecutive GPUs with the same free memory and verdict share a row."""
    rows: list[FitRow] = []
    verdicts: dict[int, Any] = {}  # GPUs with the same free memory get the same answer (and levers cost re-estimates)
    first = last = None
    for gpu in gpus:
        free = gpu.memory_free_bytes if gpu.memory_free_bytes is not None else gpu.memory_total_bytes
        verdict, lever = "unknown", ""
        if free is not None:
            answer = verdicts.get(free)
            if answer is None:
                answer = verdicts[free] = estimator.fit(est, free)
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
    try:
        from shared import routing
    except ImportError:
        return [], "The routing rules (shared/routing.py) are not in this build."
    try:
        return list(routing.advise(inventory, interconnect(config, reports), arch, config.job)), ""
    except Exception as exc:  # a rules bug must not take the form down
        return [], f"routing failed: {type(exc).__name__}: {exc}"


def interconnect(config: FtwizConfig, reports: dict[str, Any]) -> Any:
    """The :class:`shared.routing.Interconnect` the launch would get, from the same interface and IB plans.

    InfiniBand when the IB plan enables it; otherwise the slowest link speed among the interfaces the
    interface plan picks for each node.
    """
    from shared import netplan
    from shared.routing import Interconnect

    if not reports:
        return Interconnect()
    infiniband = not netplan.ib_plan(config, reports).disable
    speeds = []
    plan = netplan.resolve_interfaces(config, reports)
    for name, chosen in plan.nodes.items():
        nic = next((n for n in reports[name].nics if n.name == chosen.ifname), None) if chosen.ifname else None
        if nic is not None and nic.speed_mbps:
            speeds.append(nic.speed_mbps / 1000)
    return Interconnect(infiniband=infiniband, ethernet_gbps=min(speeds) if speeds and not infiniband else None)


def launch_inputs(app: "Wizard", config: FtwizConfig) -> tuple[dict[str, Any], Optional[dict[str, dict[str, str]]], Optional[str]]:
    """What the launcher needs beside the config, as ``ftwiz --launch`` computes it.

    Reports: the ones the checklist ran on (else the poller's latest). The NCCL/gloo interface plan:
    :func:`shared.netplan.node_env` over those reports. Returns ``(reports, network_env, note)``.
    """
    statuses = app.checks.statuses or app.last_statuses
    reports = {name: s.report for name, s in statuses.items() if getattr(s, "report", None) is not None}
    if not reports:
        return reports, None, None
    try:
        from shared.netplan import node_env

        return reports, node_env(config, reports), None
    except Exception as exc:  # same fallback as the headless launch: NCCL picks interfaces itself
        return reports, None, f"no interface plan ({type(exc).__name__}: {exc}); NCCL/gloo will pick interfaces themselves"


def new_run(app: "Wizard", config: FtwizConfig, *, resume: bool) -> Any:
    """A :class:`tui.launch.run.Run` for ``config`` (resume: from the last recorded run's output_dir).

    Raises :class:`tui.launch.run.LaunchError` when there is nothing to resume.
    """
    from tui.launch.record import latest_run_id, load_record, runs_dir
    from tui.launch.run import LaunchError, Run, RunOptions

    options = app.engines.get("run_options") or RunOptions()
    output_dir, resumed_from = None, None
    if resume:
        base = runs_dir(options.runs_dir)
        resumed_from = latest_run_id(base)
        if resumed_from is None:
            raise LaunchError(f"nothing to resume: no run recorded under {base}/ (launch once first, from this directory)")
        output_dir = load_record(base, resumed_from).get("output_dir") or config.job.output_dir
    reports, network_env, note = launch_inputs(app, config)
    run = Run(config, options=options, reports=reports, network_env=network_env, resume=resume, output_dir=output_dir,
              resumed_from=resumed_from, config_source=str(app.config_path) if app.config_path else None)
    if note:
        app.run_event(_note(note))
    return run


def _note(text: str) -> Any:
    from tui.launch.events import RunNote

    return RunNote(text, "warn")
