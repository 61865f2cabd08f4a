"""Routing advice: which method, which parallelism, which batch shape, from the cluster's GPUs and links.

Pure: it reads the GPUs the agents reported (:class:`~shared.models.GpuInfo`), a summary of the links
between nodes, the model architecture and the job, and returns :class:`Advice` items. Every item carries
the reason and the table it comes from, cited as a section of ``docs/routing-rules.md`` (shipped with the
repository; it quotes each rule). The tables are the seeds given with the project:

- ``hardware-selection-guide.md`` (seed 001): "By Model Size", the ``HARDWARE_MAP`` quick reference,
  "Memory Considerations" (×20 / ×4 rules), "Single vs Multi-GPU".
- ``hardware-and-backend-routing.md``: "Fast Routing" (1 GPU → PEFT/LoRA), "Interconnect Rules",
  "Guardrails" (micro batch 1 smoke first, global batch divisible by data-parallel size).
- ``multi-node-architecture-guide.md`` (seed 003): "Decision Tree" (DDP when the model fits one GPU, else
  FSDP, else quantize more), "Heterogeneous GPU Scaling" (DDP runs at the slowest GPU's pace).
- Field notes: NCCL over plain TCP reaches 50–60 % of wire speed.
"""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import BaseModel, Field

from shared.catalog import ModelArch, param_count
from shared.config import JobConfig
from shared.estimator import GIB, estimate, lora_trainable_params
from shared.fit import fit
from shared.models import GpuInfo

__all__ = ["Advice", "Interconnect", "GpuSpeed", "GPU_SPEEDS", "advise", "gpu_speed", "heterogeneous_speedup"]

#: Every citation points into docs/routing-rules.md (shipped with the repository), which quotes the rule.
RULES_DOC = "docs/routing-rules.md"
SEED_SIZE = f"{RULES_DOC} 'By Model Size' (seed 001 / HARDWARE_MAP)"
SEED_FAST = f"{RULES_DOC} 'Fast Routing'"
SEED_INTERCONNECT = f"{RULES_DOC} 'Interconnect Rules'"
SEED_GUARDRAILS = f"{RULES_DOC} 'Guardrails'"
SEED_TREE = f"{RULES_DOC} 'Decision Tree' (seed 003)"
SEED_HETERO = f"{RULES_DOC} 'Heterogeneous GPU Scaling'"
FIELD_NOTES_TCP = f"NCCL over plain TCP often reaches only 50–60 % of wire speed: {RULES_DOC} 'NCCL over TCP'"


class Advice(BaseModel):
    """One piece of routing advice."""

    id: str = Field(description="Stable id, e.g. 'method', 'sharding', 'global_batch'.")
    title: str = Field(description="Short headline.")
    recommendation: str = Field(description="What to do, as settings where possible.")
    reason: str = Field(description="Why, with the numbers and the seed table it comes from.")
    severity: Literal["info", "warn"] = Field(description="warn when the current job goes against the advice.")


class Interconnect(BaseModel):
    """How the nodes reach each other (the slowest path matters)."""

    infiniband: bool = Field(False, description="Every node has an Active InfiniBand port NCCL will use.")
    roce: bool = Field(False, description="RDMA over Converged Ethernet is in use.")
    ethernet_gbps: Optional[float] = Field(None, gt=0, description="Slowest node link speed in Gbit/s when traffic goes over TCP.")


# --------------------------------------------------------------------------- GPU speeds


class GpuSpeed(BaseModel):
    """Relative compute speed of a GPU model, for comparing GPUs of the same basis only."""

    pattern: str = Field(description="Regular expression matched against the NVML name (case-insensitive).")
    tflops: float = Field(description="Peak TFLOPS on the stated basis.")
    basis: Literal["tensor-bf16-dense", "fp32-shader"] = Field(description="What the figure is; only equal bases are compared.")
    source: str = Field(description="Where the figure comes from.")


_DC = "NVIDIA datasheet, dense BF16/FP16 Tensor Core TFLOPS (the sheets print the 2:4-sparsity figure; dense is half)"
_GEFORCE = ("NVIDIA GeForce specifications: CUDA cores × boost clock × 2 FLOP (FP32 shader TFLOPS, a proxy for relative "
            "speed among GeForce cards; 3070/3090/4070 Ti/4080/4090 match the public gpu_spec dataset's FP32 TFLOPS)")

GPU_SPEEDS: list[GpuSpeed] = [
    GpuSpeed(pattern=r"H200", tflops=989, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"H100.*PCIe", tflops=756, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"H100", tflops=989, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"A100", tflops=312, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"L40S", tflops=362, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"\bL40\b", tflops=181, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"\bL4\b", tflops=121, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"\bA10\b", tflops=125, basis="tensor-bf16-dense", source=_DC),
    GpuSpeed(pattern=r"\bT4\b", tflops=65, basis="tensor-bf16-dense", source=_DC + " (FP16; T4 has no BF16)"),
    GpuSpeed(pattern=r"V100.*PCIe", tflops=112, basis="tensor-bf16-dense", source=_DC + " (FP16; V100 has no BF16)"),
    GpuSpeed(pattern=r"V100", tflops=125, basis="tensor-bf16-dense", source=_DC + " (FP16; V100 has no BF16)"),
    GpuSpeed(pattern=r"RTX 5090", tflops=104.8, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 5080", tflops=56.3, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 5070 Ti", tflops=43.9, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 5070", tflops=30.9, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 4090", tflops=82.6, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 4080", tflops=48.7, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 4070 Ti", tflops=40.1, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 4070 Laptop", tflops=20.0, basis="fp32-shader", source=_GEFORCE + " (laptop: 4608 cores, up to 2.175 GHz)"),
    GpuSpeed(pattern=r"RTX 4070", tflops=29.1, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 4060 Ti", tflops=22.1, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 3090", tflops=35.6, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 3080", tflops=29.8, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 3070 Ti", tflops=21.7, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 3070", tflops=20.3, basis="fp32-shader", source=_GEFORCE),
    GpuSpeed(pattern=r"RTX 3060", tflops=12.7, basis="fp32-shader", source=_GEFORCE),
]
"""Relative-throughput table by GPU name; the first matching pattern wins (specific names come first)."""


def gpu_speed(name: Optional[str]) -> Optional[GpuSpeed]:
    """The speed entry for an NVML GPU name, or None when unknown."""
    if not name:
        return None
    for entry in GPU_SPEEDS:
        if re.search(entry.pattern, name, re.IGNORECASE):
            return entry
    return None


def heterogeneous_speedup(names: list[str]) -> Optional[tuple[float, float]]:
    """(speedup over the fastest single GPU, efficiency) of DDP over these GPUs, or None when unknown.

    DDP synchronises gradients every step, so every rank goes at the slowest GPU's pace: n GPUs deliver
    ``n × slowest`` of work per unit time. Relative to the fastest GPU alone that is
    ``n × slowest / fastest``; the efficiency is that work over the sum of what each GPU could do alone,
    ``n × slowest / Σ speeds``. Only GPUs whose figures share one basis are compared.
    """
    speeds = [gpu_speed(n) for n in names]
    if not speeds or any(s is None for s in speeds) or len({s.basis for s in speeds if s}) != 1:
        return None
    values = [s.tflops for s in speeds if s]
    slowest, fastest = min(values), max(values)
    n = len(values)
    return n * slowest / fastest, n * slowest / sum(values)


# --------------------------------------------------------------------------- helpers


def _size_class(params: float) -> tuple[str, str, float]:
    """Seed 001's model-size class → (label, recommended flavor, the flavor's GPU memory in GB)."""
    b = params / 1e9
    if b < 1:
        return "<1B", "t4-small (T4 16 GB)", 16
    if b <= 3:
        return "1-3B", "a10g-small (A10G 24 GB)", 24
    if b <= 7:
        return "3-7B", "a10g-large (A10G 24 GB)", 24
    if b <= 13:
        return "7-13B", "a10g-large (LoRA) or a100-large (A100 40 GB)", 24
    return ">13B", "a100-large (A100 40 GB), LoRA required", 40


def _nvlink_island(gpus: list[GpuInfo]) -> bool:
    """All GPUs of the node reach each other over NVLink (NVML topology when reported, else active links)."""
    if len(gpus) < 2:
        return False
    indices = {g.index for g in gpus}
    for gpu in gpus:
        if gpu.topology:
            peers = {link.peer_index for link in gpu.topology if link.link == "nvlink"}
            if not (indices - {gpu.index}) <= peers:
                return False
        elif not (gpu.nvlink_active_links or 0) > 0:
            return False
    return True


def _memory(gpu: GpuInfo) -> int:
    return gpu.memory_free_bytes if gpu.memory_free_bytes is not None else (gpu.memory_total_bytes or 0)


def _gb(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 2 else f"{n / (1 << 20):.0f} MiB"


# --------------------------------------------------------------------------- the advice


def advise(
    nodes: dict[str, list[GpuInfo]],
    interconnect: Interconnect,
    arch: ModelArch,
    job: JobConfig,
    *,
    global_batch: Optional[int] = None,
) -> list[Advice]:
    """All routing advice for running ``job`` on ``nodes`` (node name → the GPUs it will use).

    ``global_batch``: a target number of sequences per optimizer step; when given, the advice checks it is
    reachable as micro batch × grad_accum × data-parallel size and suggests grad_accum values otherwise.
    """
    gpus = [g for node_gpus in nodes.values() for g in node_gpus]
    dp = max(len(gpus), 1)
    multi_node = sum(1 for g in nodes.values() if g) > 1
    out: list[Advice] = []
    params = param_count(arch)
    smallest = min(gpus, key=_memory) if gpus else None
    free = _memory(smallest) if smallest else 0

    out.extend(_method_advice(arch, job, params, dp, free, smallest))
    if gpus:
        out.append(_sharding_advice(arch, job, dp, free, sum(_memory(g) for g in gpus)))
    out.extend(_topology_advice(nodes, interconnect, multi_node))
    if multi_node:
        out.append(_network_advice(arch, job, interconnect, dp))
    out.append(_batch_advice(job, dp, global_batch))
    hetero = _heterogeneous_advice(gpus)
    if hetero:
        out.append(hetero)
    out.append(_smoke_advice(job, dp))
    return out


def _method_advice(arch: ModelArch, job: JobConfig, params: int, dp: int, free: int, smallest: Optional[GpuInfo]) -> list[Advice]:
    label, flavor, _ = _size_class(params)
    out = [Advice(
        id="size_class", title=f"{params / 1e9:.1f}B parameters: size class {label}",
        recommendation=f"seed 001 maps {label} models to {flavor}",
        reason=f"{SEED_SIZE}; smallest GPU here: {smallest.name if smallest and smallest.name else 'unknown'} with {_gb(free)} free",
        severity="info",
    )]
    if job.method == "full" and params > 13e9:
        out.append(Advice(
            id="method", title="Full fine-tuning of a >13B model", recommendation='method = "lora" or "qlora"',
            reason=f"{SEED_SIZE}: 'Very Large Models (13B+) … Full fine-tuning not feasible, use LoRA/PEFT' (HARDWARE_MAP: '>13B … LoRA required')",
            severity="warn"))
        return out
    if job.method == "full" and params > 7e9:
        out.append(Advice(
            id="method", title="Full fine-tuning of a 7-13B model", recommendation='method = "lora" (or "qlora" on small GPUs)',
            reason=f"{SEED_SIZE}: 'Large Models (7-13B) … Note: Always use LoRA/PEFT'", severity="warn"))
        return out
    # which methods fit the smallest GPU, by the estimator
    fits = {}
    if smallest is not None:
        for method in ("full", "lora", "qlora"):
            trial = job.model_copy(update={"method": method})
            sharding: Literal["ddp", "fsdp"] = "fsdp" if job.sharding == "fsdp" else "ddp"
            fits[method] = fit(estimate(arch, trial, dp_size=dp, sharding=sharding), free)
    current = fits.get(job.method)
    if job.method == "full" and dp == 1:
        better = "lora" if fits.get("lora") and fits["lora"].status == "fits" else "qlora"
        out.append(Advice(
            id="method", title="One GPU: prefer PEFT", recommendation=f'method = "{better}"',
            reason=f"{SEED_FAST}: '1 GPU → PEFT/SFT, small LoRA'; full fine-tuning only when it fits"
                   + (f" (estimate: {current.reason})" if current else ""),
            severity="warn" if current is None or current.status != "fits" else "info"))
    elif current is not None and current.status == "won't fit":
        ok = [m for m in ("full", "lora", "qlora") if fits[m].status == "fits"]
        out.append(Advice(
            id="method", title=f"{job.method} does not fit the smallest GPU",
            recommendation=f'method = "{ok[0]}"' if ok else "more GPU memory, FSDP over more GPUs, or a smaller model",
            reason=f"estimate on the smallest GPU ({_gb(free)} free): {current.reason}; full fine-tuning only when it fits ({SEED_FAST})",
            severity="warn"))
    elif current is not None:
        out.append(Advice(
            id="method", title=f"{job.method} fits the smallest GPU ({current.status})", recommendation=f'method = "{job.method}"',
            reason=f"estimate on the smallest GPU: {current.reason}", severity="warn" if current.status == "tight" else "info"))
    return out


def _sharding_advice(arch: ModelArch, job: JobConfig, dp: int, free: int, total_free: int) -> Advice:
    ddp = fit(estimate(arch, job, dp_size=dp, sharding="ddp"), free)
    if ddp.status != "won't fit":
        wrong = job.sharding == "fsdp"
        return Advice(
            id="sharding", title="The model fits one GPU: DDP", recommendation='sharding = "ddp"',
            reason=f"{SEED_TREE}: 'Is model fitting in single GPU? YES → Use DDP' (per GPU: {ddp.reason})"
                   + ("; FSDP would add an all-gather of the weights every step" if wrong else ""),
            severity="warn" if wrong else "info")
    fsdp = fit(estimate(arch, job, dp_size=dp, sharding="fsdp"), free) if dp > 1 else None
    if fsdp is not None and fsdp.status != "won't fit":
        return Advice(
            id="sharding", title="The model does not fit one GPU: FSDP", recommendation='sharding = "fsdp"',
            reason=f"{SEED_TREE}: 'NO → Total VRAM > Model size? YES → Use FSDP'; DDP per GPU: {ddp.reason}; "
                   f"FSDP over {dp} GPUs: {fsdp.reason}",
            severity="warn" if job.sharding == "ddp" else "info")
    return Advice(
        id="sharding", title="Does not fit even sharded: quantize more", recommendation='method = "qlora", gradient_checkpointing = true, or more GPUs',
        reason=f"{SEED_TREE}: 'Total VRAM > Model size? NO → Quantize more aggressively'; DDP per GPU: {ddp.reason}"
               + (f"; FSDP over {dp} GPUs: {fsdp.reason}" if fsdp else "") + f"; all GPUs together: {_gb(total_free)} free",
        severity="warn")


def _topology_advice(nodes: dict[str, list[GpuInfo]], interconnect: Interconnect, multi_node: bool) -> list[Advice]:
    islands = [name for name, node_gpus in nodes.items() if _nvlink_island(node_gpus)]
    pcie = [name for name, node_gpus in nodes.items() if len(node_gpus) > 1 and name not in islands]
    parts = []
    if islands:
        parts.append(f"NVLink inside {', '.join(islands)}: tensor parallelism may span those GPUs")
    if pcie:
        parts.append(f"{', '.join(pcie)}: GPUs on PCIe only, keep to data parallelism")
    if multi_node:
        parts.append("never across nodes")
    if not parts:
        return []
    return [Advice(
        id="tensor_parallel", title="Tensor parallelism only inside NVLink",
        recommendation="; ".join(parts) + " (ftwiz itself runs data parallel: DDP or FSDP)",
        reason=f"{SEED_INTERCONNECT}: 'NVLink/NVSwitch: tensor parallelism within node is preferred'; "
               "'RoCE/Ethernet: avoid large tensor parallel spans across nodes'",
        severity="info")]


def _network_advice(arch: ModelArch, job: JobConfig, interconnect: Interconnect, dp: int) -> Advice:
    if interconnect.infiniband:
        return Advice(
            id="inter_node", title="InfiniBand between nodes", recommendation="data (or pipeline) parallelism across nodes; keep NCCL on IB",
            reason=f"{SEED_INTERCONNECT}: 'InfiniBand: pipeline/data parallelism across nodes is acceptable'", severity="info")
    link = "RoCE" if interconnect.roce else "Ethernet"
    trainable = param_count(arch) if job.method == "full" else lora_trainable_params(arch, job)
    grad_bytes = trainable * 4  # fp32 gradients (master weights under AMP; PEFT adapters are fp32)
    if interconnect.ethernet_gbps:
        effective = interconnect.ethernet_gbps * 0.55 / 8 * 1e9  # bytes/s, NCCL over TCP ≈ 50–60 % of wire
        ring = 2 * (dp - 1) / dp  # ring all-reduce moves 2(n−1)/n of the buffer per GPU
        seconds = grad_bytes * ring / effective
        timing = (f"; all-reducing {_gb(grad_bytes)} of fp32 gradients over {interconnect.ethernet_gbps:g} Gbit/s at ~55 % "
                  f"takes ≈ {seconds:.1f} s per optimizer step ({FIELD_NOTES_TCP})")
        slow = seconds > 5
    else:
        timing, slow = f" ({FIELD_NOTES_TCP})", False
    fsdp_note = "; FSDP over TCP all-gathers the weights every micro step: prefer DDP with LoRA/QLoRA across Ethernet" if job.sharding == "fsdp" else ""
    return Advice(
        id="inter_node", title=f"{link} between nodes: data parallelism across, nothing tensor-parallel",
        recommendation="data parallel (DDP) across nodes" + ("; raise grad_accum_steps so the all-reduce is amortised" if slow else ""),
        reason=f"{SEED_INTERCONNECT}: 'RoCE/Ethernet: … prefer smaller TP plus PP/DP'" + timing + fsdp_note,
        severity="warn" if slow or fsdp_note else "info")


def _batch_advice(job: JobConfig, dp: int, global_batch: Optional[int]) -> Advice:
    current = job.micro_batch_size * job.grad_accum_steps * dp
    formula = f"micro_batch_size {job.micro_batch_size} × grad_accum_steps {job.grad_accum_steps} × {dp} data-parallel ranks = {current}"
    if global_batch is None or global_batch == current:
        return Advice(
            id="global_batch", title=f"Global batch {current}", recommendation=f"global batch = {formula}",
            reason=f"{SEED_GUARDRAILS}: 'Keep global batch size divisible by data-parallel size' — it is by construction here",
            severity="info")
    per_step = job.micro_batch_size * dp
    if global_batch % per_step == 0:
        accum = global_batch // per_step
        return Advice(
            id="global_batch", title=f"Target global batch {global_batch}: set grad_accum_steps = {accum}",
            recommendation=f"grad_accum_steps = {accum}",
            reason=f"{SEED_GUARDRAILS}: 'Keep global batch size divisible by data-parallel size'; now {formula}; "
                   f"{global_batch} = {job.micro_batch_size} × {accum} × {dp}", severity="warn")
    low = max(global_batch // per_step, 1)
    options = sorted({low, low + 1})
    suggestions = ", ".join(f"grad_accum_steps = {a} (global {a * per_step})" for a in options)
    return Advice(
        id="global_batch", title=f"Global batch {global_batch} is not a multiple of micro batch × {dp} ranks",
        recommendation=suggestions,
        reason=f"{SEED_GUARDRAILS}: 'Keep global batch size divisible by data-parallel size'; "
               f"{global_batch} is not divisible by micro_batch_size × ranks = {per_step}",
        severity="warn")


def _heterogeneous_advice(gpus: list[GpuInfo]) -> Optional[Advice]:
    names = [g.name or "unknown" for g in gpus]
    memories = {g.memory_total_bytes for g in gpus if g.memory_total_bytes}
    if len(set(names)) <= 1 and len(memories) <= 1:
        return None
    n = len(gpus)
    result = heterogeneous_speedup(names)
    smallest = min(gpus, key=_memory)
    memory_note = f"; the smallest GPU ({smallest.name}, {_gb(_memory(smallest))} free) bounds the micro batch for every rank"
    if result is None:
        unknown = sorted({nm for nm in names if gpu_speed(nm) is None}) or ["mixed spec bases"]
        speed = f"relative speeds unknown for {', '.join(unknown)}: expect less than {n}× the fastest GPU alone"
    else:
        speedup, efficiency = result
        slow = min(names, key=lambda nm: gpu_speed(nm).tflops)  # type: ignore[union-attr]
        speed = (f"every step waits for the slowest ({slow}): expected ≈ {speedup:.2f}× the fastest GPU alone, not {n}×; "
                 f"{efficiency:.0%} of the GPUs' combined speed is used (speedup = n × slowest / fastest, from {gpu_speed(slow).source})")  # type: ignore[union-attr]
    return Advice(
        id="heterogeneous", title="Mixed GPUs: DDP runs at the slowest GPU's pace",
        recommendation="keep micro_batch_size equal on all ranks (sized for the smallest GPU); drop GPUs far slower than the rest if time matters",
        reason=f"{SEED_HETERO}: 'DDP Bottleneck: SLOWEST GPU'; {speed}{memory_note}",
        severity="warn")


def _smoke_advice(job: JobConfig, dp: int) -> Advice:
    return Advice(
        id="smoke_first", title="Smoke test first",
        recommendation="before the production run: micro_batch_size = 1, max_steps = 10, save_steps = 5 — proves launch, "
                       "all-reduce and checkpoint writing on every node",
        reason=f"{SEED_GUARDRAILS}: 'Start distributed validation with micro batch size 1 and a tiny config; scale only after launch "
               f"and checkpoint writing are proven'; 'Treat tiny configs as wiring tests, not quality evidence'",
        severity="info")
