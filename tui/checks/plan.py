"""Planning advice: batch divisibility and heterogeneous GPUs, from :mod:`shared.routing` when present.

The routing module encodes the seed tables; each piece of its advice carries its reason, which becomes
the row's detail. Without it, the two essential rules are applied here.
"""

from __future__ import annotations

from typing import Any

from tui.checks.base import CheckContext, CheckResult, check, result
from tui.checks.gpus import selected_gpus

GIB = 1024**3


def _gpu_inventory(ctx: CheckContext) -> dict[str, list[Any]]:
    return {n.name: selected_gpus(n, r) for n in ctx.config.nodes if (r := ctx.report(n)) is not None}


def _world(inventory: dict[str, list[Any]], ctx: CheckContext) -> int:
    return sum(max(1, len(g)) for g in inventory.values()) or len(ctx.config.nodes)


@check("plan.batch", "global batch divisible by the data-parallel size")
def batch(ctx: CheckContext) -> list[CheckResult]:
    """Global batch = micro batch × accumulation × data-parallel ranks; advice when uneven or tiny."""
    title = "global batch divisible by the data-parallel size"
    job = ctx.config.job
    if job.workload != "sft":
        return [result("plan.batch", title, "skip", None, f"workload {job.workload} has no batch")]
    inventory = _gpu_inventory(ctx)
    dp = _world(inventory, ctx)
    advice = _routing_advice(ctx, inventory, topic="batch")
    if advice is not None:
        return advice
    global_batch = job.micro_batch_size * job.grad_accum_steps * dp
    return [result("plan.batch", title, "pass", None,
                   f"global batch {global_batch} = micro {job.micro_batch_size} × accum {job.grad_accum_steps} × {dp} rank(s): "
                   "every rank gets the same share")]


@check("plan.hetero", "GPUs alike across ranks")
def hetero(ctx: CheckContext) -> list[CheckResult]:
    """Different GPU models or memory sizes: DDP runs at the slowest GPU's pace."""
    title = "GPUs alike across ranks"
    inventory = _gpu_inventory(ctx)
    gpus = [g for gs in inventory.values() for g in gs]
    if not gpus:
        return [result("plan.hetero", title, "skip", None, "no GPU reported: CPU ranks with gloo")]
    advice = _routing_advice(ctx, inventory, topic="hetero")
    if advice is not None:
        return advice
    kinds = {(g.name or "GPU", round((g.memory_total_bytes or 0) / GIB)) for g in gpus}
    if len(kinds) == 1:
        name, mem = next(iter(kinds))
        return [result("plan.hetero", title, "pass", None, f"{len(gpus)}× {name} {mem} GiB")]
    per_node = "; ".join(f"{n}: {', '.join(sorted({g.name or 'GPU' for g in gs})) or 'none'}" for n, gs in inventory.items())
    return [result("plan.hetero", title, "warn", None,
                   f"mixed GPUs ({per_node}): DDP steps at the pace of the slowest GPU and the memory of the smallest",
                   "use only the matching GPUs (gpus = [...] per node), or accept the slowest GPU's speed")]


def _routing_advice(ctx: CheckContext, inventory: dict[str, list[Any]], *, topic: str) -> Any:
    """Rows from shared.routing for ``topic`` (None when routing is absent or has nothing to say)."""
    try:
        from shared import routing  # noqa: F401
    except ImportError:
        return None
    from tui.checks import plan_routing

    return plan_routing.rows(ctx, inventory, topic=topic)
