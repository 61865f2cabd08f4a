"""GPUs: present where configured, no stale processes, no ECC trouble, no throttling.

On a node without NVIDIA GPUs the agent reports ``gpus=[]`` with ``nvml_error``: a CPU-only cluster is
still checkable (``gpus = "all"`` with none → warn, the workload runs on CPU with gloo), but an explicit
count or index list with no GPU fails, and the fix names ``cpu_ranks = N``. ``cpu_ranks = N`` is CPU ranks
on purpose (any node, GPU or not): a pass.
"""

from __future__ import annotations

from shared.config import NodeConfig
from shared.models import GpuInfo, NodeReport
from tui.checks.base import CheckContext, CheckResult, check, result
from tui.jobshape import selected_gpus

__all__ = ["selected_gpus"]  # re-exported: the checks and the wizard import it from here too

GIB = 1024**3

# NVML clock-event reasons that mean "slowed down", not "idle" or "set by the admin".
_HARMFUL_THROTTLE = ("thermal", "power", "hwslowdown", "hw_slowdown", "powerbrake", "power_brake")


def _source(report: NodeReport) -> str:
    return f" (values {report.gpu_source})" if report.gpu_source else ""


@check("gpu.present", "GPUs present where configured")
def gpus_present(ctx: CheckContext) -> list[CheckResult]:
    """Per node: the configured GPUs exist."""
    title = "GPUs present where configured"
    rows = []
    for node in ctx.config.nodes:
        report = ctx.report(node)
        if report is None:
            rows.append(ctx.down_skip("gpu.present", title, node))
            continue
        if node.cpu_ranks is not None:
            rows.append(result("gpu.present", title, "pass", node.name,
                               f"{node.cpu_ranks} CPU rank{'s' if node.cpu_ranks != 1 else ''}, gloo (cpu_ranks = {node.cpu_ranks})"))
            continue
        have = report.gpus
        why = f": {report.nvml_error}" if report.nvml_error else ""
        driver_hint = f"install the NVIDIA driver on {node.name} (nvidia-smi must list the GPUs)"
        if node.gpus == "all":
            if not have:
                rows.append(result("gpu.present", title, "warn", node.name,
                                   f"no GPU{why}: the workload will run on CPU with gloo",
                                   f"{driver_hint}, or keep CPU on purpose: gpus = 0 for {node.name}"))
            else:
                rows.append(result("gpu.present", title, "pass", node.name, _describe(have) + _source(report)))
        elif isinstance(node.gpus, int):
            if node.gpus == 0:
                rows.append(result("gpu.present", title, "pass", node.name, "gpus = 0: CPU only, as configured"))
            elif len(have) < node.gpus:
                fix = (f"set gpus = {len(have)} for {node.name}" if have else
                       f"for {node.gpus} CPU ranks with gloo: cpu_ranks = {node.gpus} (instead of gpus) for {node.name}; or {driver_hint}")
                rows.append(result("gpu.present", title, "fail", node.name,
                                   f"gpus = {node.gpus} but {node.name} has {len(have)}{why}", fix))
            else:
                rows.append(result("gpu.present", title, "pass", node.name, _describe(have[: node.gpus]) + _source(report)))
        else:
            indices = {g.index for g in have}
            missing = [i for i in node.gpus if i not in indices]
            if missing:
                rows.append(result("gpu.present", title, "fail", node.name,
                                   f"GPU index {', '.join(map(str, missing))} not on {node.name} (has: {sorted(indices) or 'none'}{why})",
                                   f"set gpus = {sorted(indices) if indices else 0} for {node.name}"))
            else:
                rows.append(result("gpu.present", title, "pass", node.name, _describe(selected_gpus(node, report)) + _source(report)))
    return rows


def _describe(gpus: list[GpuInfo]) -> str:
    names: dict[str, int] = {}
    for g in gpus:
        label = g.name or "GPU"
        if g.memory_total_bytes:
            label += f" {g.memory_total_bytes / GIB:.0f} GiB"
        names[label] = names.get(label, 0) + 1
    return ", ".join(f"{n}× {label}" for label, n in names.items())


def _per_gpu(ctx: CheckContext, check_id: str, title: str, inspect) -> list[CheckResult]:
    """Run ``inspect(node, report, gpus)`` on each up node with selected GPUs; skip others."""
    rows = []
    for node in ctx.config.nodes:
        report = ctx.report(node)
        if report is None:
            rows.append(ctx.down_skip(check_id, title, node))
            continue
        gpus = selected_gpus(node, report)
        if not gpus:
            rows.append(result(check_id, title, "skip", node.name, "no GPU on this node"))
            continue
        rows.extend(inspect(node, report, gpus))
    return rows


@check("gpu.processes", "no stale GPU processes")
def gpu_processes(ctx: CheckContext) -> list[CheckResult]:
    """Per node: no process holds memory on a GPU the job will use."""
    title = "no stale GPU processes"

    def inspect(node: NodeConfig, report: NodeReport, gpus: list[GpuInfo]) -> list[CheckResult]:
        held = [(g, p) for g in gpus for p in g.compute_processes]
        if not held:
            return [result("gpu.processes", title, "pass", node.name, f"no compute process on {len(gpus)} GPU(s){_source(report)}")]
        parts = [f"GPU{g.index}: pid {p.pid} {p.name or '?'} ({(p.used_memory_bytes or 0) / GIB:.1f} GiB)" for g, p in held]
        pids = " ".join(str(p.pid) for _, p in held)
        return [result("gpu.processes", title, "warn", node.name, "; ".join(parts) + _source(report),
                       f"stop them if they are leftovers (on {node.name}: nvidia-smi, then kill {pids})")]

    return _per_gpu(ctx, "gpu.processes", title, inspect)


@check("gpu.ecc", "no uncorrected ECC errors or pending retirements")
def gpu_ecc(ctx: CheckContext) -> list[CheckResult]:
    """Per node: uncorrected ECC errors, pending page retirement/row remap, failed remaps."""
    title = "no uncorrected ECC errors or pending retirements"

    def inspect(node: NodeConfig, report: NodeReport, gpus: list[GpuInfo]) -> list[CheckResult]:
        rows = []
        for g in gpus:
            if g.remapped_rows_failure:
                rows.append(result("gpu.ecc", title, "fail", node.name, f"GPU{g.index}: a row remap failed{_source(report)}",
                                   f"take GPU{g.index} of {node.name} out of service (gpus = [...] without {g.index}) and have it serviced"))
            elif g.ecc_volatile_uncorrected or g.retired_pages_pending or g.remapped_rows_pending:
                what = []
                if g.ecc_volatile_uncorrected:
                    what.append(f"{g.ecc_volatile_uncorrected} uncorrected ECC error(s)")
                if g.retired_pages_pending:
                    what.append("page retirement pending")
                if g.remapped_rows_pending:
                    what.append("row remap pending")
                rows.append(result("gpu.ecc", title, "fail", node.name, f"GPU{g.index}: {', '.join(what)}{_source(report)}",
                                   f"reset GPU{g.index} on {node.name} with nothing running on it: sudo nvidia-smi -r -i {g.index} (or reboot)"))
        return rows or [result("gpu.ecc", title, "pass", node.name, f"{len(gpus)} GPU(s) clean{_source(report)}")]

    return _per_gpu(ctx, "gpu.ecc", title, inspect)


@check("gpu.throttle", "no thermal or power throttling")
def gpu_throttle(ctx: CheckContext) -> list[CheckResult]:
    """Per node: clock throttle reasons that slow the GPU (thermal, power, hardware slowdown)."""
    title = "no thermal or power throttling"

    def inspect(node: NodeConfig, report: NodeReport, gpus: list[GpuInfo]) -> list[CheckResult]:
        rows = []
        for g in gpus:
            bad = [r for r in g.throttle_reasons if any(k in r.lower().replace(" ", "") for k in _HARMFUL_THROTTLE)]
            if bad:
                temp = f", {g.temperature_c:.0f} °C" if g.temperature_c is not None else ""
                power = f", {g.power_draw_w:.0f}/{g.power_limit_w:.0f} W" if g.power_draw_w and g.power_limit_w else ""
                rows.append(result("gpu.throttle", title, "warn", node.name, f"GPU{g.index} throttled: {', '.join(bad)}{temp}{power}{_source(report)}",
                                   f"check cooling and power on {node.name} (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); "
                                   "DDP runs at the slowest GPU's pace"))
        return rows or [result("gpu.throttle", title, "pass", node.name, f"{len(gpus)} GPU(s) not throttled{_source(report)}")]

    return _per_gpu(ctx, "gpu.throttle", title, inspect)
