"""``[job] balance = "auto"``: each rank trains on a share of the global batch in proportion to its speed.

The global batch stays what the user configured (``micro_batch_size × grad_accum_steps × world size``
samples per optimizer step) and is the same set of samples as with ``balance = "off"``: one seeded
permutation of the dataset per epoch, cut into global batches, each cut again between the ranks by their
shares (:func:`step_slices`). Under FSDP every rank runs the same number of micro-steps (``accum``: the
collectives in each forward need it); under DDP each rank runs its own (the gradients sync once, in each
rank's last backward), so a slow rank's few samples stay in full micro-batches. A rank's micro-batch is its
share over its ``accum``, never more than the largest micro-batch its own GPU fits. The split stays uniform
unless the measured speeds promise steps :data:`MIN_GAIN` faster.

**Same mathematics**: each rank's micro-step loss is ``world / global_batch × Σ per-sample loss``
(:func:`weighted_loss`); DDP and FSDP average the gradients over the ranks, so the update is
``Σ over the global batch / global_batch`` whatever the shares — what one process would compute on the
whole batch. ``tests/workloads/test_balance.py`` compares the gradients with a single-process reference.

Pure planning here (:func:`plan_shares`, :func:`step_slices`, :func:`drifted`); torch only inside
:func:`weighted_loss`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DRIFT", "MIN_GAIN", "RankShare", "drifted", "env_for", "plan_shares", "step_slices", "step_time", "weighted_loss"]

DRIFT = 0.2
"""Re-balance when a rank's measured speed moved by more than this fraction since the shares were fixed."""
MIN_GAIN = 0.1
"""Split unevenly only when the measured speeds promise steps at least this much faster than the uniform split."""


@dataclass(frozen=True)
class RankShare:
    """One rank's part of every optimizer step: ``run.json``'s ``balance.ranks[]``."""

    rank: int
    node: str
    samples_per_step: int
    micro_batch: int
    accum: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_shares(global_batch: int, speeds: Sequence[float], max_micro: Sequence[int], nodes: Sequence[str], *,
                same_accum: bool = True, min_gain: float = MIN_GAIN) -> list[RankShare]:
    """Shares of ``global_batch`` samples in proportion to ``speeds`` (samples/s per rank).

    Every rank gets at least one sample. ``same_accum`` (FSDP: every forward is a collective) gives every rank
    the least number of micro-steps that keeps each micro-batch within its ``max_micro`` (the estimator's fit for
    its GPU), and so at least that many samples; otherwise (DDP syncs once, after each rank's last backward)
    each rank runs its own least number, so a slow rank's few samples stay in full micro-batches.
    The split is uniform unless the proportional one promises steps at least ``min_gain`` faster by the
    measured speeds (a noisy measure of equal ranks must not cost the even cluster).
    """
    world = len(speeds)
    if world == 0 or len(max_micro) != world or len(nodes) != world:
        raise ValueError("speeds, max_micro and nodes need one entry per rank")
    if global_batch < world:
        raise ValueError(f"global batch {global_batch} is smaller than the {world} ranks")
    if any(m < 1 for m in max_micro):
        raise ValueError("every rank must fit a micro-batch of at least one sample")
    weights = [max(float(s), 0.0) for s in speeds]
    uniform = _largest_remainder(global_batch, [1.0] * world)
    shares = uniform
    if min(weights) > 0:
        proportional = _largest_remainder(global_batch, weights)
        if step_time(uniform, weights) >= (1 + min_gain) * step_time(proportional, weights):
            shares = proportional
    if not same_accum:
        accums = [math.ceil(share / cap) for share, cap in zip(shares, max_micro, strict=True)]
        return [RankShare(rank, nodes[rank], share, math.ceil(share / accums[rank]), accums[rank]) for rank, share in enumerate(shares)]
    accum = max(math.ceil(share / cap) for share, cap in zip(shares, max_micro, strict=True))
    # each rank runs `accum` micro-steps, so each needs `accum` samples at least: take them from the largest
    while min(shares) < accum:
        low, high = shares.index(min(shares)), shares.index(max(shares))
        if shares[high] - 1 < accum:
            raise ValueError(f"global batch {global_batch} is too small for {world} ranks × {accum} micro-steps")
        shares[low] += 1
        shares[high] -= 1
        accum = max(math.ceil(share / cap) for share, cap in zip(shares, max_micro, strict=True))
    return [RankShare(rank, nodes[rank], share, math.ceil(share / accum), accum) for rank, share in enumerate(shares)]


def step_time(shares: Sequence[int], speeds: Sequence[float]) -> float:
    """Seconds of the slowest rank's compute per step with ``shares`` at ``speeds`` (samples/s, all > 0)."""
    return max(share / speed for share, speed in zip(shares, speeds, strict=True))


def step_slices(shares: Sequence[RankShare], rank: int) -> list[tuple[int, int]]:
    """The ``(start, stop)`` positions inside one global batch of ``rank``'s micro-batches, in order."""
    start = sum(s.samples_per_step for s in shares[:rank])
    mine = shares[rank]
    base, extra = divmod(mine.samples_per_step, mine.accum)
    out = []
    for micro in range(mine.accum):
        size = base + (1 if micro < extra else 0)
        out.append((start, start + size))
        start += size
    return out


def drifted(fixed: Sequence[float], measured: Sequence[float], *, tolerance: float = DRIFT) -> list[int]:
    """Ranks whose ``measured`` speed moved by more than ``tolerance`` from the ``fixed`` one."""
    return [rank for rank, (then, now) in enumerate(zip(fixed, measured, strict=True)) if then > 0 and abs(now - then) / then > tolerance]


def env_for(share: RankShare, mode: str, global_batch: int) -> dict[str, str]:
    """The rank's numbers as environment variables, for your own code (``FTWIZ_BALANCE_*``, see README)."""
    return {
        "FTWIZ_BALANCE": mode,
        "FTWIZ_GLOBAL_BATCH": str(global_batch),
        "FTWIZ_SAMPLES_PER_STEP": str(share.samples_per_step),
        "FTWIZ_MICRO_BATCH": str(share.micro_batch),
        "FTWIZ_GRAD_ACCUM": str(share.accum),
    }


def weighted_loss(model: Any, batch: dict, *, world_size: int, global_batch: int) -> tuple[Any, float]:
    """``(loss to backward, Σ per-sample loss)`` of one micro-batch: ``world / global_batch × Σ_i ℓ_i``.

    ``ℓ_i`` is sample ``i``'s mean next-token loss over its real (unmasked) tokens; averaging the
    gradients over ``world_size`` ranks then gives the global batch's mean, whatever each rank's share.
    """
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"].to(logits.device)
    shifted, targets = logits[:, :-1, :].float(), labels[:, 1:]
    per_token = torch.nn.functional.cross_entropy(shifted.reshape(-1, shifted.size(-1)), targets.reshape(-1),
                                                  ignore_index=-100, reduction="none").view(targets.shape)
    counts = (targets != -100).sum(dim=1).clamp(min=1)
    per_sample = per_token.sum(dim=1) / counts
    total = per_sample.sum()
    return total * (world_size / global_batch), float(total.detach())


def _largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """Integers summing to ``total``, at least one each, proportional to ``weights`` (Hamilton's method)."""
    exact = [total * w / sum(weights) for w in weights]
    shares = [max(1, math.floor(e)) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    for i in order[: max(0, total - sum(shares))]:
        shares[i] += 1
    while sum(shares) > total:  # the one-sample floor took from nobody: the largest share gives it back
        shares[shares.index(max(shares))] -= 1
    return shares
