"""The estimator's result types: one line of the per-GPU memory table, and the itemised estimate.

Split from :mod:`shared.estimator`, which re-exports both.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.catalog import ModelArch
from shared.config import JobConfig

__all__ = ["GIB", "Estimate", "MemoryItem", "Sharding"]

GIB = 1 << 30
Sharding = Literal["ddp", "fsdp"]


class MemoryItem(BaseModel):
    """One line of the per-GPU memory table."""

    name: str = Field(description="Stable id, e.g. 'weights', 'activations', 'logits'.")
    label: str = Field(description="What the line is, for people.")
    bytes: int = Field(ge=0, description="Bytes on one GPU at the peak.")
    formula: str = Field(description="How the bytes were computed, with the numbers put in.")

    @property
    def gib(self) -> float:
        """The bytes in GiB."""
        return self.bytes / GIB


class Estimate(BaseModel):
    """Itemised per-GPU peak memory of one training configuration."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    arch: ModelArch = Field(description="The architecture estimated.")
    job: JobConfig = Field(description="The job settings estimated.")
    dp_size: int = Field(description="Data-parallel world size.")
    sharding: Sharding = Field(description="ddp (replicated states) or fsdp (ZeRO-3 sharded states).")
    options: dict = Field(default_factory=dict, description="The keyword options of estimate(), to re-estimate with a lever.")
    params: int = Field(description="Parameters of the model.")
    trainable_params: int = Field(description="Parameters that get gradients and optimizer states.")
    phase: str = Field(description="When the peak happens, e.g. 'start of backward'.")
    items: list[MemoryItem] = Field(description="What is live at the peak; they sum to total_bytes.")
    other_phase: str = Field(description="The other candidate peak phase.")
    other_items: list[MemoryItem] = Field(description="What is live at that other phase (smaller than the peak).")
    notes: list[str] = Field(default_factory=list, description="Assumptions worth knowing about.")

    @property
    def total_bytes(self) -> int:
        """Per-GPU peak as nvidia-smi would see it (tensors, CUDA context, allocator overhead)."""
        return sum(i.bytes for i in self.items)

    @property
    def allocated_bytes(self) -> int:
        """Peak of tensor bytes, comparable with ``torch.cuda.max_memory_allocated``."""
        return sum(i.bytes for i in self.items if i.name not in ("cuda_context", "allocator_overhead"))

    @property
    def other_phase_bytes(self) -> int:
        """Total bytes at the other phase."""
        return sum(i.bytes for i in self.other_items)

    def get(self, name: str, *, any_phase: bool = False) -> MemoryItem | None:
        """The item called ``name`` at the peak (or, with ``any_phase``, at the other phase too); None when absent."""
        found = next((i for i in self.items if i.name == name), None)
        if found is None and any_phase:
            found = next((i for i in self.other_items if i.name == name), None)
        return found

    def bytes_of(self, name: str, *, any_phase: bool = False) -> int:
        """Bytes of item ``name`` at the peak (0 when absent); ``any_phase`` looks at the other phase too."""
        item = self.get(name, any_phase=any_phase)
        return item.bytes if item else 0
