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

The pure planning (:func:`plan_shares`, :func:`step_slices`, :func:`drifted`) is :mod:`shared.balanceplan`,
shipped beside the workloads under the same name; torch only inside :func:`weighted_loss`.
"""

from __future__ import annotations

from typing import Any

from shared.balanceplan import (
    DRIFT,
    MIN_GAIN,
    RankShare,
    drifted,
    env_for,
    fit_costs,
    plan_shares,
    speed_of,
    step_slices,
    step_time,
)

__all__ = ["DRIFT", "MIN_GAIN", "RankShare", "drifted", "env_for", "fit_costs", "plan_shares", "speed_of", "step_slices",
           "step_time", "weighted_loss"]


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
