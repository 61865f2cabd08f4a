"""Resources: memory fit per GPU (from the estimator) and disk free for the checkpoints.

The model's architecture comes from a local model directory's ``config.json`` when the controller can
read one (the path as given, relative to here, or under a local node's workdir), else from the built-in
catalog; an unknown model skips the memory check with a hint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Optional

from shared.config import FtwizConfig, NodeConfig
from shared.models import DiskInfo, NodeReport
from tui.checks.base import CheckContext, CheckResult, Status, check, result
from tui.checks.gpus import selected_gpus
from tui.jobshape import DECLARE_HINT, planned, planned_note, world_size

GIB = 1024**3
MIN_FREE_BYTES = 5 * GIB
"""Floor for free disk at the workdir: logs, a tokenizer, an adapter, temporary files."""


@dataclass
class ArchSource:
    """Where the model's architecture came from."""

    arch: Any = None
    """A ``shared.catalog.ModelArch``, or None when unknown."""
    source: str = ""
    """``config.json at PATH``, ``catalog: ID`` or why it is unknown."""


def resolve_arch(config: FtwizConfig) -> ArchSource:
    """The job model's architecture: a readable local ``config.json`` first, then the catalog."""
    from shared import catalog

    model = config.job.model
    candidates = [os.path.expanduser(model)]
    if not os.path.isabs(candidates[0]):
        candidates += [os.path.join(os.path.expanduser(n.workdir), model) for n in config.nodes if n.local]
    for directory in candidates:
        path = os.path.join(directory, "config.json")
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as handle:
                    return ArchSource(catalog.arch_from_hf_config(json.load(handle)), f"config.json at {path}")
            except (OSError, ValueError) as exc:  # ArchError is a ValueError
                return ArchSource(None, f"{path} is not a usable HF config: {exc}")
    entry = catalog.lookup(model)
    if entry is not None:
        return ArchSource(entry.arch, f"catalog: {entry.hf_id}")
    return ArchSource(None, f"{model!r} is neither a local model directory here nor in the built-in catalog")


def _match_disk(report: NodeReport, wanted: str) -> Optional[DiskInfo]:
    """The reported disk entry for ``wanted`` (the agent echoes the path it was given)."""
    norm = os.path.normpath(wanted)
    for disk in report.disks:
        if disk.path == wanted or os.path.normpath(disk.path) == norm:
            return disk
    if wanted.startswith("~/"):
        tail = os.path.normpath(wanted[1:])
        for disk in report.disks:
            if os.path.normpath(disk.path).endswith(tail):
                return disk
    return None


def checkpoint_bytes(config: FtwizConfig, arch: Any) -> Optional[int]:
    """Rough size of one checkpoint: full = bf16 weights + fp32 master + optimizer states; LoRA = the adapter."""
    if not planned(config.job) or arch is None:
        return None
    from shared import catalog

    params = catalog.param_count(arch)
    if config.job.method == "full":
        optimizer = 2 if config.job.optimizer.endswith("8bit") else 8
        return params * (2 + 4 + optimizer)
    return 1 * GIB  # adapters are megabytes; 1 GiB covers adapter, optimizer state and tokenizer


@check("disk.free", "disk free at workdir and output_dir")
def disk_free(ctx: CheckContext) -> list[CheckResult]:
    """Per node: free space where checkpoints go, for three checkpoints plus a floor."""
    title = "disk free at workdir and output_dir"
    job = ctx.config.job
    arch = resolve_arch(ctx.config).arch if planned(job) else None
    try:
        per_ckpt = checkpoint_bytes(ctx.config, arch)
    except Exception:  # a catalog quirk must not hide the disk figures
        per_ckpt = None
    needed = MIN_FREE_BYTES + 3 * (per_ckpt or 0)
    rows = []
    for node in ctx.config.nodes:
        report = ctx.report(node)
        if report is None:
            rows.append(ctx.down_skip("disk.free", title, node))
            continue
        out = job.output_dir if job.output_dir.startswith(("/", "~")) else f"{node.workdir.rstrip('/')}/{job.output_dir}"
        disk = _match_disk(report, out)
        where = out
        if disk is None and not job.output_dir.startswith(("/", "~")):
            disk, where = _match_disk(report, node.workdir), node.workdir
        if disk is None:
            reported = ", ".join(d.path for d in report.disks) or "none"
            rows.append(result("disk.free", title, "skip", node.name,
                               f"the agent does not measure {node.workdir} (it measures: {reported})",
                               f"start the agent on {node.name} with --disk-path {node.workdir}"))
            continue
        if disk.error or disk.free_bytes is None:
            rows.append(result("disk.free", title, "warn", node.name, f"cannot measure {disk.path}: {disk.error or 'no figure'}",
                               f"check that {disk.path} exists and is readable on {node.name}"))
            continue
        free = disk.free_bytes
        sizing = f"3 checkpoints of ~{per_ckpt / GIB:.1f} GiB + {MIN_FREE_BYTES // GIB} GiB" if per_ckpt else f"{MIN_FREE_BYTES // GIB} GiB floor"
        detail = f"{free / GIB:.1f} GiB free at {where} (need {needed / GIB:.1f} GiB: {sizing})"
        if not disk.exists:
            detail += "; the directory does not exist yet (measured at its nearest parent)"
        if free < needed:
            rows.append(result("disk.free", title, "fail", node.name, detail,
                               f"free space on {node.name} (du -sh {where}/*) or point workdir/output_dir at a larger disk"))
        elif free < 2 * needed:
            rows.append(result("disk.free", title, "warn", node.name, detail, f"little headroom on {node.name}: lower save_steps frequency or free space"))
        else:
            rows.append(result("disk.free", title, "pass", node.name, detail))
    return rows


def _world_size(ctx: CheckContext) -> int:
    return world_size(ctx.config, ctx.reports)


@check("mem.fit", "memory fit per GPU")
def memory_fit(ctx: CheckContext) -> list[CheckResult]:
    """Per node: the estimator's per-GPU peak against each GPU's free memory (fits / tight / won't fit)."""
    from shared import estimator
    from shared.fit import choose_sharding

    title = "memory fit per GPU"
    job = ctx.config.job
    if not planned(job):
        if job.workload == "command":
            return [result("mem.fit", title, "skip", None, "your code's model is not declared: nothing to fit", DECLARE_HINT)]
        return [result("mem.fit", title, "skip", None, f"workload {job.workload}: no model to fit")]
    source = resolve_arch(ctx.config)
    if source.arch is None:
        return [result("mem.fit", title, "skip", None, f"unknown model: {source.source}",
                       "point [job] model at a local directory with config.json, or use a catalog model id (e.g. meta-llama/Llama-2-7b-hf)")]
    dp = _world_size(ctx)
    sharding, why = choose_sharding(source.arch, job, dp_size=dp, free_bytes=free_per_gpu(ctx.config, ctx.reports))
    ctx.notes["sharding"] = (sharding, why)  # what the launch runs (ChecklistRun.sharding): never estimated twice
    est = estimator.estimate(source.arch, job, dp_size=dp, sharding=sharding)
    if job.balance == "auto":  # each GPU's largest micro-batch: a faster card's bigger share within its memory
        ctx.notes["micro_caps"] = micro_caps(ctx.config, ctx.reports, source.arch, dp_size=dp, sharding=sharding)
    other = estimator.estimate(source.arch, job, dp_size=dp, sharding="fsdp" if sharding == "ddp" else "ddp") if dp > 1 else None
    both = f"{est.sharding} {est.total_bytes / GIB:.1f} GiB" + (f", {other.sharding} {other.total_bytes / GIB:.1f} GiB" if other else "")
    context = f"per GPU: {both}; {why}{planned_note(job)}"
    free = free_per_gpu(ctx.config, ctx.reports)
    if est.sharding == "fsdp" and free and min(free) < 0.9 * max(free):
        context += f"; FSDP shards evenly, so the smallest GPU ({min(free) / GIB:.1f} GiB free) bounds every rank's shard"
    rows = []
    for node in ctx.config.nodes:
        report = ctx.report(node)
        if report is None:
            rows.append(ctx.down_skip("mem.fit", title, node))
            continue
        gpus = selected_gpus(node, report)
        if not gpus:
            ram = report.host.memory_available_bytes
            ram_text = f"; host RAM available {ram / GIB:.1f} GiB" if ram else ""
            rows.append(result("mem.fit", title, "skip", node.name,
                               f"no GPU: estimate {est.total_bytes / GIB:.1f} GiB per GPU{ram_text} ({source.source})"))
            continue
        rows.append(_fit_row(est, node, gpus, f"{source.source}; {context}"))
    return rows


def micro_caps(config: FtwizConfig, reports: Mapping[str, Any], arch: Any, *, dp_size: int,
               sharding: Literal["ddp", "fsdp"]) -> dict[str, int]:
    """Per node with GPUs: the largest micro-batch whose estimated peak *fits* (not merely "tight") the node's
    smallest free GPU, between ``micro_batch_size`` (the size this row judges) and the global batch.

    ``balance = "auto"`` gives a faster rank more samples per step; within this cap they come as a bigger
    micro-batch, beyond it as accumulation. Nodes without GPUs (or of unknown free memory) are left out: their
    ranks keep ``micro_batch_size``.
    """
    from shared import estimator
    from shared.fit import fit

    job = config.job
    top = job.micro_batch_size * job.grad_accum_steps * max(1, dp_size)
    caps: dict[str, int] = {}
    by_free: dict[int, int] = {}  # nodes with the same smallest GPU get the same answer: search once per size
    for node in config.nodes:
        report = reports.get(node.name)
        gpus = selected_gpus(node, report) if report is not None else []
        free = [g.memory_free_bytes if g.memory_free_bytes is not None else g.memory_total_bytes for g in gpus]
        if not free or any(f is None for f in free):
            continue
        smallest = int(min(f for f in free if f is not None))
        if smallest in by_free:
            caps[node.name] = by_free[smallest]
            continue

        def fits(micro: int, free_bytes: int = smallest) -> bool:
            shaped = job.model_copy(update={"micro_batch_size": micro})
            return fit(estimator.estimate(arch, shaped, dp_size=dp_size, sharding=sharding), free_bytes).status == "fits"

        low, high = job.micro_batch_size, top  # the peak grows with the micro-batch: the last size that fits
        if fits(low):  # else the row itself says it does not fit, and balance asks no more of it
            while low < high:
                mid = (low + high + 1) // 2
                low, high = (mid, high) if fits(mid) else (low, mid - 1)
        caps[node.name] = by_free[smallest] = low
    return caps


def launch_sharding(config: FtwizConfig, reports: Mapping[str, Any]) -> tuple[str, str]:
    """The sharding a launch writes into ``job.json``, and why: ``auto`` becomes ``fsdp`` exactly when the
    estimator says DDP does not fit every GPU the job uses and FSDP does (see ``shared.fit.choose_sharding``)."""
    from shared.fit import choose_sharding

    job = config.job
    if not planned(job) or job.sharding != "auto":
        return job.sharding, f"sharding = \"{job.sharding}\" in [job]"
    source = resolve_arch(config)
    if source.arch is None:
        return "ddp", f"auto: the model's architecture is unknown ({source.source}); ddp"
    return choose_sharding(source.arch, job, dp_size=world_size(config, reports), free_bytes=free_per_gpu(config, reports))


def free_per_gpu(config: FtwizConfig, reports: Mapping[str, Any]) -> list[int]:
    """Free memory of every GPU the job will use, across the nodes whose agents answered."""
    free = []
    for node in config.nodes:
        report = reports.get(node.name)
        for gpu in selected_gpus(node, report) if report is not None else []:
            value = gpu.memory_free_bytes if gpu.memory_free_bytes is not None else gpu.memory_total_bytes
            if value is not None:
                free.append(int(value))
    return free


_STATUS: dict[str, Status] = {"fits": "pass", "tight": "warn", "won't fit": "fail"}


def _fit_row(est, node: NodeConfig, gpus: list, source: str) -> CheckResult:
    """One row per node: the worst GPU decides; the detail lists every GPU."""
    from shared.fit import fit

    title = "memory fit per GPU"
    order = {"pass": 0, "warn": 1, "fail": 2}
    worst: Status = "pass"
    worst_verdict, parts = None, []
    for gpu in gpus:
        free = gpu.memory_free_bytes if gpu.memory_free_bytes is not None else gpu.memory_total_bytes
        if free is None:
            parts.append(f"GPU{gpu.index}: free memory unknown")
            continue
        verdict = fit(est, free)
        status = _STATUS[verdict.status]
        parts.append(f"GPU{gpu.index} {verdict.status}")
        if worst_verdict is None or order[status] > order[worst]:
            worst, worst_verdict = status, verdict
    summary = f"{', '.join(parts)} — {worst_verdict.reason if worst_verdict else ''}"
    detail = f"{summary} (peak {est.total_bytes / GIB:.1f} GiB per GPU, {est.sharding}, dp={est.dp_size}; {source})"
    hint = ""
    if worst != "pass" and worst_verdict is not None:
        lever = worst_verdict.lever
        hint = (f"set {lever.change} in [job] (saves {lever.saves_bytes / GIB:.1f} GiB: {lever.reason})" if lever
                else "use GPUs with more memory, or more GPUs with sharding = \"fsdp\"")
    return result("mem.fit", title, worst, node.name, detail, hint)
