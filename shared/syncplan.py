"""Gradient-sync forecast: bytes each optimizer step moves, how long the ring takes over the slowest link,
what share of the step that is, and the levers that shrink it — in numbers. Pure arithmetic.

Model (sources):

- Data-parallel training (DDP) all-reduces every trainable parameter's gradient once per optimizer step
  (gradient accumulation syncs only on the last micro batch: ``no_sync``, PyTorch DDP documentation).
  The built-in recipe keeps trainable weights in fp32 (full fine-tune: fp32 master weights; LoRA/QLoRA:
  fp32 adapters, peft's default), so gradients are 4 bytes each.
- A ring all-reduce sends ``2(n−1)/n × bytes`` over each hop and takes ``2(n−1)`` hop latencies per
  bucket (nccl-tests doc/PERFORMANCE.md: busbw = algbw × 2(n−1)/n); DDP cuts the gradients into 25 MB
  buckets (``bucket_cap_mb``), each its own all-reduce.
- FSDP (ZeRO-3) per micro batch all-gathers the parameters twice (forward, backward) and reduce-scatters
  the gradients once, each ``(n−1)/n × bytes`` per hop (same source; Rajbhandari et al. 2020, §5).
- Compute per step, when no measurement is given: 6 FLOP per parameter per token for a full fine-tune,
  4 for adapters (no weight gradients of the frozen base) — Kaplan et al. 2020, §2.1 — at ``MFU`` of the
  GPU's peak from :data:`shared.routing.GPU_SPEEDS`; a rough figure, named as such where shown.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from shared.catalog import ModelArch, param_count
from shared.config import JobConfig
from shared.estimator import lora_trainable_params

__all__ = [
    "BUCKET_BYTES",
    "GRAD_BYTES",
    "MFU",
    "SyncLever",
    "SyncForecast",
    "compute_seconds",
    "forecast",
    "ring_allreduce_seconds",
    "trainable_params",
]

GRAD_BYTES = 4
"""Bytes per gradient element in the built-in recipe (fp32 trainable weights)."""
PARAM_BYTES_HALF = 2
"""Bytes per parameter FSDP all-gathers under bf16/fp16 mixed precision."""
BUCKET_BYTES = 25 * 1024 * 1024
"""DDP's default ``bucket_cap_mb`` = 25."""
MFU = 0.35
"""Share of a GPU's peak a fine-tune reaches, for the compute estimate only (an assumption)."""
DOMINATES = 0.5
"""Sync above this share of the step is said to dominate (the checklist warns)."""


class SyncLever(BaseModel):
    """One change and what it does to the sync."""

    change: str = Field(description="What to change, as the config key or action.")
    sync_s: float = Field(description="Forecast sync seconds per optimizer step after the change.")
    share: float | None = Field(None, description="Sync share of the step after the change (when compute is known).")
    effect: str = Field(description="The effect in words and numbers.")


class SyncForecast(BaseModel):
    """What gradient synchronisation will cost the job, per optimizer step."""

    method: str = Field(description="full, lora or qlora.")
    sharding: Literal["ddp", "fsdp"] = Field(description="The collective pattern forecast.")
    trainable_params: int = Field(description="Parameters whose gradients cross the network.")
    bytes_per_step: int = Field(description="Payload of the collectives per optimizer step, per rank.")
    ranks: int = Field(description="Data-parallel ranks in the ring.")
    nodes: int = Field(description="Nodes the ring crosses.")
    link: str = Field("", description="The bottleneck link, 'src → dst'.")
    gbit_per_s: float = Field(description="Bandwidth of the bottleneck link, Gbit/s.")
    latency_ms: float = Field(0.0, description="Connect time on the bottleneck link (≈ one round trip), ms.")
    sync_s: float = Field(description="Forecast seconds of gradient sync per optimizer step.")
    compute_s: float | None = Field(None, description="Compute seconds per optimizer step (measured or estimated).")
    compute_source: str = Field("", description="Where compute_s came from.")
    share: float | None = Field(None, description="sync / (sync + compute): the step share spent waiting on the network.")
    speedup: float | None = Field(None, description="Tokens/s on all nodes over tokens/s on the fastest single node.")
    levers: list[SyncLever] = Field(default_factory=list, description="Changes that shrink the sync, with numbers.")


def trainable_params(arch: ModelArch, job: JobConfig) -> int:
    """Parameters with gradients: every one for a full fine-tune, the adapters for LoRA/QLoRA."""
    return param_count(arch) if job.method == "full" else lora_trainable_params(arch, job)


def ring_allreduce_seconds(payload: int, ranks: int, gbit_per_s: float, latency_ms: float,
                           *, bucket_bytes: int = BUCKET_BYTES) -> float:
    """Time of a bucketed ring all-reduce of ``payload`` bytes over a hop of ``gbit_per_s``."""
    if ranks < 2 or payload <= 0:
        return 0.0
    buckets = max(1, math.ceil(payload / bucket_bytes))
    hop_s = latency_ms / 2000.0  # a connect is one round trip; a ring step waits one way
    return 2 * (ranks - 1) / ranks * payload * 8 / (gbit_per_s * 1e9) + buckets * 2 * (ranks - 1) * hop_s


def _sync_seconds(arch: ModelArch, job: JobConfig, sharding: str, ranks: int, gbit: float, latency_ms: float) -> tuple[int, float]:
    grads = trainable_params(arch, job) * GRAD_BYTES
    if sharding != "fsdp" or ranks < 2:
        return grads, ring_allreduce_seconds(grads, ranks, gbit, latency_ms)
    params = param_count(arch) * (PARAM_BYTES_HALF if job.precision != "fp32" else 4)
    one_way = (ranks - 1) / ranks * 8 / (gbit * 1e9)
    per_micro = (2 * params + grads) * one_way + 3 * (ranks - 1) * latency_ms / 2000.0
    return job.grad_accum_steps * (2 * params + grads), job.grad_accum_steps * per_micro


def compute_seconds(arch: ModelArch, job: JobConfig, tflops: float, *, mfu: float = MFU) -> float:
    """Rough compute time of one optimizer step on one GPU at ``mfu`` of ``tflops`` peak."""
    tokens = job.seq_len * job.micro_batch_size * job.grad_accum_steps
    flop_per_token = (6 if job.method == "full" else 4) * param_count(arch)
    return tokens * flop_per_token / (tflops * 1e12 * mfu)


def forecast(
    arch: ModelArch,
    job: JobConfig,
    *,
    ranks: int,
    nodes: int,
    gbit_per_s: float,
    latency_ms: float = 0.0,
    link: str = "",
    compute_s: float | None = None,
    compute_source: str = "",
    without_slowest: tuple[str, int, float, float] | None = None,
) -> SyncForecast:
    """The forecast for ``job`` on ``ranks`` ranks across ``nodes`` nodes whose slowest link is ``gbit_per_s``.

    ``compute_s`` is one optimizer step's compute on the slowest rank (measured, or
    :func:`compute_seconds`). ``without_slowest`` is ``(node, ranks, gbit_per_s, latency_ms)``: the node behind the
    bottleneck and the cluster without it, for the "fewer nodes" lever.
    """
    if gbit_per_s <= 0:
        raise ValueError("gbit_per_s must be positive: a link with no measured bandwidth cannot be forecast")
    sharding: Literal["ddp", "fsdp"] = "fsdp" if job.sharding == "fsdp" else "ddp"
    payload, sync = _sync_seconds(arch, job, sharding, ranks, gbit_per_s, latency_ms)
    share = sync / (sync + compute_s) if compute_s else None
    speedup = nodes * compute_s / (compute_s + sync) if compute_s and nodes > 1 else None
    result = SyncForecast(
        method=job.method, sharding=sharding, trainable_params=trainable_params(arch, job), bytes_per_step=payload,
        ranks=ranks, nodes=nodes, link=link, gbit_per_s=gbit_per_s, latency_ms=latency_ms, sync_s=sync,
        compute_s=compute_s, compute_source=compute_source, share=share, speedup=speedup,
    )
    result.levers = _levers(arch, job, result, without_slowest)
    return result


def _share(sync: float, compute: float | None) -> float | None:
    return sync / (sync + compute) if compute else None


def _pct(share: float | None) -> str:
    return f"{share * 100:.0f} %" if share is not None else "?"


def _levers(arch: ModelArch, job: JobConfig, base: SyncForecast, without_slowest: tuple[str, int, float, float] | None) -> list[SyncLever]:
    levers: list[SyncLever] = []
    compute = base.compute_s
    if base.sync_s <= 0:
        return levers
    # Twice the accumulation: the same sync per optimizer step over twice the compute.
    accum = job.grad_accum_steps * 2
    if base.sharding == "ddp":
        doubled = compute * 2 if compute else None
        share = _share(base.sync_s, doubled)
        levers.append(SyncLever(
            change=f"grad_accum_steps = {accum}", sync_s=base.sync_s, share=share,
            effect=(f"sync stays {base.sync_s:.2f} s per step but covers twice the tokens"
                    + (f": share {_pct(base.share)} → {_pct(share)}" if compute else ": half the sync per token")),
        ))
    if job.method == "full":
        lora = job.model_copy(update={"method": "lora"})
        _, sync = _sync_seconds(arch, lora, base.sharding, base.ranks, base.gbit_per_s, base.latency_ms)
        compute_lora = compute * 4 / 6 if compute else None
        levers.append(SyncLever(
            change='method = "lora"', sync_s=sync, share=_share(sync, compute_lora),
            effect=f"{trainable_params(arch, lora):,} adapter parameters instead of {base.trainable_params:,}: "
                   f"sync {base.sync_s:.2f} → {sync:.3f} s per step",
        ))
    if without_slowest is not None and base.nodes > 2:
        node, ranks, gbit, latency = without_slowest
        _, sync = _sync_seconds(arch, job, base.sharding, ranks, gbit, latency)
        share = _share(sync, compute)
        speed = (base.nodes - 1) * compute / (compute + sync) if compute else None
        gain = f"; speedup {base.speedup:.2f}x → {speed:.2f}x" if speed is not None and base.speedup is not None else ""
        levers.append(SyncLever(
            change=f"leave out {node}", sync_s=sync, share=share,
            effect=f"{base.nodes - 1} nodes, slowest link {gbit:.2f} Gbit/s: sync {base.sync_s:.2f} → {sync:.2f} s per step{gain}",
        ))
    return levers
