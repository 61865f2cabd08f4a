"""Gradient-sync forecast for the job over the measured mesh (check ``net.sync``), with the scaling answer.

The arithmetic is :mod:`shared.syncplan`; this module gathers its inputs: the model's architecture
(:func:`tui.checks.resources.resolve_arch`), the ranks per node as the launcher will start them
(:func:`tui.jobshape.node_processes`), the slowest link of the mesh, and a compute time per step —
the ``compute_s`` option when given (e.g. measured by an earlier run), else a rough estimate from the
slowest GPU's peak (:data:`shared.routing.GPU_SPEEDS`); CPU-only nodes have no estimate, so no share.
"""

from __future__ import annotations

from typing import Any

from shared import meshplan, syncplan
from shared.config import FtwizConfig
from shared.meshplan import MeshMatrix
from shared.models import NodeReport
from shared.syncplan import SyncForecast
from tui.checks.base import CheckContext, CheckResult, check, result
from tui.jobshape import node_processes

__all__ = ["sync_forecast", "sync_rows"]


def _ranks(config: FtwizConfig, reports: dict[str, NodeReport], names: list[str]) -> int:
    total = 0
    for name in names:
        node = config.node(name)
        report = reports.get(name)
        total += node_processes(node, [g.index for g in report.gpus] if report is not None else None)[0]
    return total


def _compute(config: FtwizConfig, reports: dict[str, NodeReport], arch: Any) -> tuple[float | None, str]:
    """Compute seconds per optimizer step on the slowest GPU, from its peak; None on CPU-only nodes."""
    from shared import routing

    speeds = []
    for report in reports.values():
        for gpu in report.gpus:
            speed = routing.gpu_speed(gpu.name)
            if speed is not None:
                speeds.append((speed.tflops, gpu.name))
    if not speeds or any(not r.gpus for r in reports.values()):
        return None, ""
    tflops, name = min(speeds)
    seconds = syncplan.compute_seconds(arch, config.job, tflops)
    return seconds, f"estimated: {name} at {syncplan.MFU:.0%} of {tflops:g} TFLOPS"


def _culprit(mesh: MeshMatrix, link: meshplan.Link) -> str:
    """Of the bottleneck's two ends, the one with more slow links (the node whose own link is slow)."""
    slow = meshplan.slow_links(mesh)
    count = {n: len(meshplan.pairs_of(n, slow)) for n in (link.src, link.dst)}
    return max((link.dst, link.src), key=lambda n: count[n])


def sync_forecast(config: FtwizConfig, reports: dict[str, NodeReport], mesh: MeshMatrix, arch: Any,
                  *, compute_s: float | None = None, compute_source: str = "") -> SyncForecast | None:
    """The forecast for ``config.job`` over ``mesh``; None when the mesh has no measured link."""
    names = [n for n in mesh.nodes if n in reports]
    link = meshplan.bottleneck(mesh, names)
    if link is None or link.gbit_per_s is None:
        return None
    if compute_s is None:
        compute_s, compute_source = _compute(config, reports, arch)
    without = None
    if len(names) > 2:
        culprit = _culprit(mesh, link)
        rest = [n for n in names if n != culprit]
        other = meshplan.bottleneck(mesh, rest)
        if other is not None and other.gbit_per_s:
            without = (culprit, _ranks(config, reports, rest), other.gbit_per_s, other.latency_ms or 0.0)
    return syncplan.forecast(
        arch, config.job, ranks=_ranks(config, reports, names), nodes=len(names), gbit_per_s=link.gbit_per_s,
        latency_ms=link.latency_ms or 0.0, link=f"{link.src} → {link.dst}", compute_s=compute_s,
        compute_source=compute_source, without_slowest=without,
    )


def sync_rows(forecast: SyncForecast) -> list[CheckResult]:
    """The ``net.sync`` row: bytes, sync time, share, speedup, and the levers when sync dominates."""
    check_id, title = "net.sync", "gradient sync per optimizer step (forecast)"
    detail = (f"{forecast.method} moves {forecast.trainable_params:,} gradients = {forecast.bytes_per_step / 1e6:.1f} MB per step "
              f"({forecast.sharding}, {forecast.ranks} ranks): {forecast.sync_s:.3f} s per step over the slowest link "
              f"{forecast.link} ({forecast.gbit_per_s:.2f} Gbit/s, {forecast.latency_ms:.1f} ms)")
    if forecast.share is not None and forecast.compute_s is not None:
        detail += f"; compute {forecast.compute_s:.2f} s ({forecast.compute_source}): sync is {forecast.share:.0%} of the step"
    if forecast.speedup is not None:
        detail += (f"; {forecast.nodes} nodes give ~{forecast.speedup:.1f}x the tokens/s of the fastest single node "
                   f"(not {forecast.nodes}x)")
    elif forecast.compute_s is None:
        detail += "; share unknown: no compute time (CPU nodes, or a GPU not in the table)"
    dominates = forecast.share is not None and forecast.share > syncplan.DOMINATES
    levers = "; ".join(f"{lever.change}: {lever.effect}" for lever in forecast.levers)
    if dominates:
        return [result(check_id, title, "warn", None, detail + f". Levers: {levers}",
                       forecast.levers[0].change if forecast.levers else "fewer nodes or a faster network")]
    return [result(check_id, title, "pass", None, detail + (f". Levers: {levers}" if levers else ""))]


@check("net.sync", "gradient sync per optimizer step (forecast)")
async def sync_check(ctx: CheckContext) -> list[CheckResult]:
    """Forecast the job's gradient sync over the measured mesh; warn when it would dominate the step."""
    from tui.checks.mesh import mesh_of
    from tui.checks.resources import resolve_arch

    title = "gradient sync per optimizer step (forecast)"
    if ctx.config.job.workload != "sft":
        return [result("net.sync", title, "skip", None, f"workload {ctx.config.job.workload!r} syncs no gradients")]
    if ctx.single_node:
        return [result("net.sync", title, "pass", None, "one node: gradients never cross the network")]
    if sum(1 for n in ctx.config.nodes if ctx.report(n) is not None) < 2:
        return [result("net.sync", title, "skip", None, "fewer than two agents up", "fix the agent.reachable rows first")]
    source = resolve_arch(ctx.config)
    if source.arch is None:
        return [result("net.sync", title, "skip", None, f"model unknown: {source.source}",
                       "point [job] model at a local model directory with config.json, or a catalog model")]
    mesh = await mesh_of(ctx)
    option = ctx.option("compute_s", None)
    forecast = sync_forecast(ctx.config, ctx.reports, mesh, source.arch,
                             compute_s=float(option) if option is not None else None,
                             compute_source="given" if option is not None else "")
    if forecast is None:
        return [result("net.sync", title, "skip", None, "no link of the mesh was measured", "fix the net.mesh rows first")]
    ctx.notes["sync"] = forecast
    return sync_rows(forecast)
