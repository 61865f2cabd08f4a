"""Planning advice from :mod:`shared.routing`: batch divisibility, heterogeneous GPUs, and any advice
that goes against the current job. Each row's detail carries the advice's reason (and seed table)."""

from __future__ import annotations

from typing import Any, Optional

from tui.checks.base import CheckContext, CheckResult, check, result
from tui.jobshape import (
    DECLARE_HINT,
    gpu_inventory,
    interconnect,
    node_processes,
    planned,
    planned_note,
    rank_threads,
    world_size,
)

GIB = 1024**3
PROBE_TIMEOUT_S = 40.0
"""The compute probe's limit per node, inside the engine's 60 s per check (a cold torch import is the slow part)."""


def _gpu_inventory(ctx: CheckContext) -> dict[str, list[Any]]:
    return gpu_inventory(ctx.config, ctx.reports)


def _advice(ctx: CheckContext) -> Optional[list[Any]]:
    """Routing advice for the job on the GPUs the agents reported; None without GPUs or a known model."""
    key = "routing-advice"
    if key in ctx.notes:
        return ctx.notes[key]
    from shared import routing
    from tui.checks.resources import resolve_arch

    inventory = _gpu_inventory(ctx)
    advice = None
    if any(inventory.values()) and planned(ctx.config.job):
        arch = resolve_arch(ctx.config).arch
        if arch is not None:
            advice = routing.advise(inventory, interconnect(ctx.config, ctx.reports), arch, ctx.config.job)
    ctx.notes[key] = advice
    return advice


def _row(check_id: str, title: str, item: Any, note: str = "") -> CheckResult:
    if item.severity == "warn":
        return result(check_id, title, "warn", None, f"{item.title}: {item.reason}{note}", item.recommendation)
    return result(check_id, title, "pass", None, f"{item.title}: {item.recommendation} ({item.reason}){note}")


@check("plan.batch", "global batch divisible by the data-parallel size")
def batch(ctx: CheckContext) -> list[CheckResult]:
    """Global batch = micro batch × accumulation × data-parallel ranks (routing's guardrail)."""
    title = "global batch divisible by the data-parallel size"
    job = ctx.config.job
    if not planned(job):
        hint = DECLARE_HINT if job.workload == "command" else ""
        return [result("plan.batch", title, "skip", None, f"workload {job.workload}: no batch declared", hint)]
    advice = _advice(ctx)
    item = next((a for a in advice or [] if a.id == "global_batch"), None)
    if item is not None:
        return [_row("plan.batch", title, item, planned_note(job))]
    ranks = world_size(ctx.config, ctx.reports)
    return [result("plan.batch", title, "pass", None,
                   f"global batch {job.micro_batch_size * job.grad_accum_steps * ranks} = micro {job.micro_batch_size} × "
                   f"accum {job.grad_accum_steps} × {ranks} rank(s): divisible by construction{planned_note(job)}")]


@check("plan.hetero", "GPUs alike across ranks")
def hetero(ctx: CheckContext) -> list[CheckResult]:
    """Different GPU models or memory sizes: DDP runs at the slowest GPU's pace, with the expected speedup."""
    title = "GPUs alike across ranks"
    inventory = _gpu_inventory(ctx)
    gpus = [g for gs in inventory.values() for g in gs]
    if not gpus:
        return [result("plan.hetero", title, "skip", None, "no GPU reported: CPU ranks with gloo")]
    item = next((a for a in _advice(ctx) or [] if a.id == "heterogeneous"), None)
    if item is not None:
        return [_row("plan.hetero", title, item)]
    names = [g.name or "GPU" for g in gpus]
    memories = {g.memory_total_bytes for g in gpus if g.memory_total_bytes}
    if len(set(names)) > 1 or len(memories) > 1:
        from shared import routing

        speed = routing.heterogeneous_speedup(names)
        expected = f"expected ≈ {speed[0]:.2f}× the fastest GPU alone, not {len(gpus)}×" if speed else "relative speeds unknown"
        return [result("plan.hetero", title, "warn", None,
                       f"mixed GPUs ({', '.join(sorted(set(names)))}): DDP runs at the slowest GPU's pace; {expected}",
                       "keep micro_batch_size sized for the smallest GPU; drop GPUs far slower than the rest if time matters")]
    kinds = sorted({f"{g.name or 'GPU'} {round((g.memory_total_bytes or 0) / GIB)} GiB" for g in gpus})
    return [result("plan.hetero", title, "pass", None, f"{len(gpus)}× {kinds[0]}")]


@check("plan.advice", "routing advice for this job")
def other_advice(ctx: CheckContext) -> list[CheckResult]:
    """Method, sharding, topology and network advice that goes against the current job (warn with reason)."""
    title = "routing advice for this job"
    job = ctx.config.job
    if not planned(job):
        hint = DECLARE_HINT if job.workload == "command" else ""
        return [result("plan.advice", title, "skip", None, f"workload {job.workload}: nothing declared to route", hint)]
    advice = _advice(ctx)
    if advice is None:
        return [result("plan.advice", title, "skip", None, "needs GPUs and a known model architecture")]
    shown = [a for a in advice if a.id not in ("global_batch", "heterogeneous")]
    warns = [a for a in shown if a.severity == "warn"]
    if warns:
        return [_row("plan.advice", title, a, planned_note(job)) for a in warns]
    return [result("plan.advice", title, "pass", None, "; ".join(f"{a.title}" for a in shown) + planned_note(job))]


@check("plan.balance", "which node sets the pace")
async def balance(ctx: CheckContext) -> list[CheckResult]:
    """A short matmul per node (the agents' compute probe, cached by each agent): the node whose ranks compute
    slowest bounds a uniform split; the balanced split's expected gain (:mod:`shared.computeplan`). Never a failure."""
    from shared import computeplan

    title = "which node sets the pace"
    job = ctx.config.job
    if job.workload == "allreduce":
        return [result("plan.balance", title, "skip", None, "workload allreduce: no training to pace")]
    if world_size(ctx.config, ctx.reports) < 2:
        ctx.notes["compute"] = computeplan.ProbeFigures(None, "one rank")
        return [result("plan.balance", title, "skip", None, "one rank: nothing to balance")]
    same = _one_device_kind(ctx)
    if same is not None:  # nothing to time: every rank computes on the same kind of device with the same threads
        ctx.notes["compute"] = computeplan.ProbeFigures(None, f"every rank runs on {same} (no node sets the pace)")
        return [result("plan.balance", title, "pass", None, f"every rank runs on {same}: no node sets the pace; "
                       "a uniform split is balanced (no compute probe needed)")]
    measured, missing = await ctx.memo("compute-probe", lambda: _probe_compute(ctx))
    ctx.notes["compute"] = computeplan.ProbeFigures.of(measured, missing)  # the launch plans your own code's shares with it
    if not measured:
        return [result("plan.balance", title, "skip", None, "no node measured: " + "; ".join(missing),
                       "the compute probe needs torch in each node's training interpreter")]
    plan = computeplan.plan_pace(measured, workload=job.workload, balance=job.balance)
    detail = f"{plan.summary} ({plan.per_node})"
    if missing:
        detail += "; not measured: " + "; ".join(missing)
    hint = ""
    if plan.recommend and job.workload == "command":
        hint = (f'set [job] balance = "auto" and have your code read FTWIZ_MICRO_BATCH and FTWIZ_GRAD_ACCUM: the slow ranks then '
                f'train on fewer samples per step (≈{plan.balanced:.2f}x at best; README "Balancing your own code")')
    elif plan.recommend:
        hint = f'set [job] balance = "auto": the slow ranks then train on fewer samples per step (≈{plan.balanced:.2f}x at best)'
    elif job.balance == "auto" and plan.balanced < 1 + 0.1:
        detail += "; balance auto will keep the uniform split (ranks within 10 %)"
    return [result("plan.balance", title, "pass", None, detail, hint)]


def _one_device_kind(ctx: CheckContext) -> Optional[str]:
    """The one kind of device every rank computes on (a GPU model, or a CPU model with the same threads per rank),
    or None when the nodes differ or a node's agent did not report (then the probe decides)."""
    kinds: set[str] = set()
    threads = _cpu_rank_threads(ctx)
    for node in ctx.config.nodes:
        report = ctx.reports.get(node.name)
        if report is None:
            return None
        _, cvd = node_processes(node, [g.index for g in report.gpus])
        if cvd:
            names = {g.index: g.name for g in report.gpus}
            kinds.update(str(names.get(int(i))) for i in cvd.split(","))
        else:
            cores = report.host.cpu_cores if report.host is not None else None
            model = report.host.cpu_model if report.host is not None else None
            if not model or not cores:
                return None
            kinds.add(f"{model} ({threads[node.name]} thread(s) per rank)")
        if len(kinds) > 1:
            return None
    return next(iter(kinds)) if len(kinds) == 1 and "None" not in kinds else None


async def _probe_compute(ctx: CheckContext) -> tuple[list[Any], list[str]]:
    """Each up node's per-rank matmul rates (GPUs the run will use, or the CPU threads each CPU rank gets)."""
    import asyncio

    from shared.computeplan import NodeCompute

    threads = _cpu_rank_threads(ctx)

    async def one(node: Any) -> tuple[Optional[NodeCompute], str]:
        report = ctx.reports.get(node.name)
        if report is None:
            return None, f"{node.name}: agent not up"
        nproc, cvd = node_processes(node, [g.index for g in report.gpus])
        if cvd:
            gpus = [int(i) for i in cvd.split(",")]
            reply = await ctx.client.probe_compute(node, gpus=gpus, timeout_s=PROBE_TIMEOUT_S)
        else:
            reply = await ctx.client.probe_compute(node, threads=threads[node.name], timeout_s=PROBE_TIMEOUT_S)
        value = reply.value
        if value is None or value.error or not value.devices:
            why = value.error if value is not None and value.error else (reply.error or "no figure")
            return None, f"{node.name}: {why}"
        if value.device == "cuda":
            names = sorted({d.name for d in value.devices})
            what = f"{len(value.devices)}× {', '.join(names)} {value.dtype}"
            return NodeCompute(node.name, tuple(d.tflops for d in value.devices), what), ""
        what = f"cpu, {value.threads} thread(s) per rank, {value.dtype}"
        return NodeCompute(node.name, (value.devices[0].tflops,) * nproc, what), ""

    async def in_turn(group: list[Any]) -> list[tuple[str, tuple[Optional[NodeCompute], str]]]:
        return [(n.name, await one(n)) for n in group]

    # nodes on one host (one address, or one kernel boot id) would time each other's load: those take turns,
    # separate hosts measure at once
    hosts: dict[str, list[Any]] = {}
    for node in ctx.config.nodes:
        report = ctx.reports.get(node.name)
        machine = report.host.boot_id if report is not None and report.host is not None else None
        hosts.setdefault(machine or node.host, []).append(node)
    done = dict(pair for group in await asyncio.gather(*(in_turn(g) for g in hosts.values())) for pair in group)
    answers = [done[n.name] for n in ctx.config.nodes]
    return [c for c, _ in answers if c is not None], [why for c, why in answers if c is None]


def _cpu_rank_threads(ctx: CheckContext) -> dict[str, int]:
    """The threads each node's CPU ranks get: ``OMP_NUM_THREADS`` where the user set it, else the host's cores
    shared by every rank it runs (the launch's default, :func:`tui.jobshape.rank_threads`)."""
    user = _omp_threads(ctx)
    return {name: user or threads for name, threads in rank_threads(ctx.config, ctx.reports).items()}


def _omp_threads(ctx: CheckContext) -> Optional[int]:
    """``OMP_NUM_THREADS`` the user set for every rank ([job].env or [nccl].env win over the launch's default)."""
    for env in (ctx.config.job.env, ctx.config.nccl.env):
        value = env.get("OMP_NUM_THREADS", "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None
