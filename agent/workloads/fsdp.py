"""FSDP2 sharding for the sft recipe: one transformer block per unit, the same code on CPU/gloo and CUDA/NCCL.

``torch.distributed.fsdp.fully_shard`` is called directly (not through the HF Trainer, whose FSDP on CPU
silently trains as plain DDP: FIELD-NOTES, second round). Every decoder layer becomes its own FSDP unit, then
the root (embeddings, final norm, LM head) is sharded last, which is the layout the PyTorch FSDP2 tutorial
and torchtitan use. On CUDA the units compute in bf16/fp16 with fp32 gradient reduction
(``MixedPrecisionPolicy``); on CPU they stay fp32. ``[job] fsdp_offload = true`` keeps the sharded
parameters, gradients and optimizer states in CPU memory (``CPUOffloadPolicy``) for cards too small
to hold even a shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .dist import Ranks
from .errors import WorkloadError


@dataclass(frozen=True)
class ShardReport:
    """What one rank's shard holds: its parameters and their bytes, beside the whole model's."""

    rank: int
    world_size: int
    units: int
    local_params: int
    local_bytes: int
    total_params: int
    total_bytes: int
    local_trainable: int

    def line(self) -> str:
        """The human line of the run log, e.g. ``fsdp: rank 1 holds 1/4 of 4.1 M parameters (1.0 M, 4.1 MB)``."""
        return (f"fsdp: rank {self.rank} holds 1/{self.world_size} of {self.total_params / 1e6:.2f} M parameters "
                f"({self.local_params / 1e6:.2f} M, {self.local_bytes / 1e6:.2f} MB of {self.total_bytes / 1e6:.2f} MB; "
                f"{self.local_trainable / 1e6:.3f} M trainable) in {self.units} FSDP units")

    def fields(self) -> dict[str, Any]:
        """The numbers as protocol fields (on the rank's ``note`` record)."""
        return {"shard_params": self.local_params, "shard_bytes": self.local_bytes, "total_params": self.total_params,
                "total_bytes": self.total_bytes, "shard_trainable": self.local_trainable, "fsdp_units": self.units,
                "world_size": self.world_size}


def decoder_layers(model) -> list:
    """The transformer blocks of ``model`` (also under a peft wrapper), by the HF ``_no_split_modules`` names."""
    import torch

    base = model
    while hasattr(base, "base_model") and base.base_model is not base:  # PeftModel -> LoraModel -> the HF model
        base = base.base_model
    inner = getattr(base, "model", base)
    names = set(getattr(inner, "_no_split_modules", None) or getattr(base, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:  # fall back to the usual ``model.layers`` ModuleList
        lists = [m for name, m in model.named_modules() if name.endswith("layers") and isinstance(m, torch.nn.ModuleList)]
        layers = list(lists[0]) if lists else []
    if not layers:
        raise WorkloadError(f"sharding = \"fsdp\": found no transformer blocks in {type(model).__name__} (no _no_split_modules, "
                            "no .layers list); use sharding = \"ddp\" for this model")
    return layers


def shard(model, ranks: Ranks, backend: str, *, compute_dtype: Any | None, offload: bool) -> int:
    """Shard ``model`` in place with FSDP2 over all ranks; return the number of FSDP units.

    The device mesh is built explicitly for the process group's device type, so a CPU/gloo run on a GPU
    host does not pick CUDA (pytorch#132471).
    """
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        fully_shard,
    )

    device_type = "cuda" if backend == "nccl" else "cpu"
    mesh = init_device_mesh(device_type, (ranks.world_size,))
    options: dict[str, Any] = {"mesh": mesh}
    if compute_dtype is not None and compute_dtype != torch.float32:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    if offload:
        options["offload_policy"] = CPUOffloadPolicy()
    elif device_type == "cuda":
        model.to(torch.device("cuda", ranks.local_rank))
    layers = decoder_layers(model)
    for layer in layers:
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return len(layers) + 1


def shard_report(model, ranks: Ranks, units: int) -> ShardReport:
    """Count this rank's local shard (``DTensor.to_local``) against the global parameter sizes."""
    local_params = local_bytes = total_params = total_bytes = local_trainable = 0
    for param in model.parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        local_params += local.numel()
        local_bytes += local.numel() * local.element_size()
        total_params += param.numel()
        total_bytes += param.numel() * param.element_size()
        if param.requires_grad:
            local_trainable += local.numel()
    return ShardReport(ranks.rank, ranks.world_size, units, local_params, local_bytes, total_params, total_bytes, local_trainable)
