"""Whether an estimate fits a GPU, and the one setting that lowers the per-GPU peak the most.

The layer above :mod:`shared.estimator`: it re-estimates the job with each lever, so it imports the estimator
and the estimator never imports it back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from shared.config import JobConfig
from shared.estimate_types import GIB, Estimate
from shared.estimator import estimate

__all__ = ["TIGHT_HEADROOM", "Lever", "Verdict", "best_lever", "choose_sharding", "fit"]

def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


class Lever(BaseModel):
    """A change to the job that lowers the per-GPU peak."""

    name: str = Field(description="Stable id: qlora, lora, gradient_checkpointing, seq_len, micro_batch_size, fsdp, optimizer_8bit.")
    change: str = Field(description="The setting to change, as the user would write it.")
    saves_bytes: int = Field(description="How much the per-GPU peak drops.")
    new_total_bytes: int = Field(description="The per-GPU peak after the change.")
    reason: str = Field(description="Why it saves memory, and what it costs.")


class Verdict(BaseModel):
    """Whether an estimate fits a GPU's free memory."""

    status: Literal["fits", "tight", "won't fit"] = Field(description="fits, tight (< 10 % headroom) or won't fit.")
    need_bytes: int = Field(description="Estimated per-GPU peak.")
    free_bytes: int = Field(description="Free memory the GPU reported.")
    headroom: float = Field(description="(free − need) / free; negative when it does not fit.")
    lever: Lever | None = Field(None, description="The change that saves the most, when it is tight or does not fit.")
    reason: str = Field(description="One sentence a user can act on.")


TIGHT_HEADROOM = 0.10


def _levers(est: Estimate) -> list[tuple[str, str, JobConfig, dict, str]]:
    job = est.job
    out: list[tuple[str, str, JobConfig, dict, str]] = []
    if job.method == "full":
        out.append(("lora", "method = \"lora\"", job.model_copy(update={"method": "lora"}), {},
                    "trains small adapters: no gradients, master weights or optimizer states for the base model"))
    if job.method != "qlora":
        out.append(("qlora", "method = \"qlora\"", job.model_copy(update={"method": "qlora"}), {},
                    "stores the frozen base in 4-bit NF4 (≈0.52 B/param instead of 2) and trains LoRA adapters"))
    if not job.gradient_checkpointing:
        out.append(("gradient_checkpointing", "gradient_checkpointing = true", job.model_copy(update={"gradient_checkpointing": True}), {},
                    "keeps only each layer's input and recomputes the rest in backward (about 30 % slower)"))
    if job.seq_len >= 256:
        half = job.seq_len // 2
        out.append(("seq_len", f"seq_len = {half}", job.model_copy(update={"seq_len": half}), {},
                    "activations and logits scale with the sequence length; longer samples get truncated"))
    if job.micro_batch_size > 1:
        out.append(("micro_batch_size", f"micro_batch_size = 1, grad_accum_steps = {job.grad_accum_steps * job.micro_batch_size}",
                    job.model_copy(update={"micro_batch_size": 1, "grad_accum_steps": job.grad_accum_steps * job.micro_batch_size}), {},
                    "activations scale with the micro batch; gradient accumulation keeps the global batch"))
    if job.optimizer == "adamw":
        out.append(("optimizer_8bit", "optimizer = \"paged_adamw_8bit\"", job.model_copy(update={"optimizer": "paged_adamw_8bit"}), {},
                    "8-bit AdamW states take 2 B/param instead of 8"))
    if est.dp_size > 1 and est.sharding == "ddp":
        out.append(("fsdp", "sharding = \"fsdp\"", job.model_copy(update={"sharding": "fsdp"}), {"sharding": "fsdp"},
                    f"shards weights, gradients and optimizer states over the {est.dp_size} data-parallel GPUs (more traffic per step)"))
    return out


def best_lever(est: Estimate) -> Lever | None:
    """Re-estimate with each lever and return the one that lowers the peak the most (None if none helps)."""
    best: Lever | None = None
    for name, change, job, extra, why in _levers(est):
        options = dict(est.options)
        options.update(extra)
        sharding = options.pop("sharding", est.sharding)
        new = estimate(est.arch, job, dp_size=est.dp_size, sharding=sharding, **options)
        saves = est.total_bytes - new.total_bytes
        if saves > 0 and (best is None or saves > best.saves_bytes):
            best = Lever(name=name, change=change, saves_bytes=saves, new_total_bytes=new.total_bytes, reason=why)
    return best


def fit(estimate_: Estimate, gpu_free_bytes: int) -> Verdict:
    """Compare the estimate with a GPU's free memory: fits, tight (< 10 % headroom) or won't fit.

    When tight or not fitting, the biggest lever is found by re-estimating with each of: QLoRA, LoRA,
    gradient checkpointing, half the sequence length, micro batch 1, 8-bit AdamW, FSDP.
    """
    need = estimate_.total_bytes
    free = max(int(gpu_free_bytes), 0)
    headroom = (free - need) / free if free else -1.0
    status: Literal["fits", "tight", "won't fit"]
    if need > free:
        status = "won't fit"
    elif headroom < TIGHT_HEADROOM:
        status = "tight"
    else:
        status = "fits"
    lever = best_lever(estimate_) if status != "fits" else None
    if status == "fits":
        reason = f"needs {_gib(need)} of {_gib(free)} free ({headroom:.0%} headroom)"
    else:
        reason = f"needs {_gib(need)} of {_gib(free)} free" + (f" ({headroom:.0%} headroom)" if status == "tight" else "")
        if lever:
            after = "fits" if lever.new_total_bytes <= free * (1 - TIGHT_HEADROOM) else (
                "still tight" if lever.new_total_bytes <= free else "still does not fit")
            reason += f"; biggest lever: {lever.change} saves {_gib(lever.saves_bytes)} → {_gib(lever.new_total_bytes)} ({after}): {lever.reason}"
        else:
            reason += "; no single setting lowers it: use a GPU with more memory or more GPUs with FSDP"
    return Verdict(status=status, need_bytes=need, free_bytes=free, headroom=headroom, lever=lever, reason=reason)


def choose_sharding(arch, job: JobConfig, *, dp_size: int, free_bytes: list[int]) -> tuple[Literal["ddp", "fsdp"], str]:
    """The sharding a job runs with, and why: the job's own, or for ``auto`` FSDP exactly when the estimator says
    DDP does not fit every GPU (``free_bytes``, one per GPU) and FSDP does; otherwise DDP.

    FSDP shards evenly, so the GPU with the least free memory bounds every rank's shard.
    """
    if job.sharding != "auto":
        return job.sharding, f"sharding = \"{job.sharding}\" in [job]"
    if dp_size < 2 or not free_bytes:
        return "ddp", "auto: one GPU (or none known), nothing to shard over"
    smallest = min(free_bytes)
    ddp = estimate(arch, job, dp_size=dp_size, sharding="ddp").total_bytes
    fsdp = estimate(arch, job, dp_size=dp_size, sharding="fsdp").total_bytes
    if ddp <= smallest:
        return "ddp", f"auto: ddp fits ({_gib(ddp)} per GPU, smallest GPU has {_gib(smallest)} free)"
    if fsdp <= smallest:
        return "fsdp", f"auto: ddp needs {_gib(ddp)} per GPU, more than the smallest GPU's {_gib(smallest)} free; fsdp needs {_gib(fsdp)}"
    return "ddp", f"auto: neither fits the smallest GPU's {_gib(smallest)} free (ddp {_gib(ddp)}, fsdp {_gib(fsdp)}); see the lever"
