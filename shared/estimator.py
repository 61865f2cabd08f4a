"""Per-GPU peak memory of a fine-tuning job, itemised (whether it fits a GPU, and the lever to pull: :mod:`shared.fit`).

Pure arithmetic on a :class:`~shared.catalog.ModelArch` and a :class:`~shared.config.JobConfig`.
It models the recipe ftwiz runs: Hugging Face ``transformers`` + ``peft`` (+ ``bitsandbytes`` for QLoRA),
one micro batch per step, SDPA attention (what ``transformers`` picks by default; Gemma-2 defaults to eager
attention), ``zero_grad(set_to_none=True)``.

Sources of the formulas:

- Mixed-precision Adam costs 16 B/param of model states (fp16 weights 2, fp16 grads 2, fp32 master
  weights 4, fp32 momentum 4 and variance 4): Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
  Toward Training Trillion Parameter Models", §3.1. ZeRO-3 (FSDP full sharding) divides all of them by
  the data-parallel degree (§5).
- Activations per layer: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", §4.1, give ``s·b·h·(34 + 5·a·s/h)`` bytes for a GPT layer in fp16 without flash
  attention; the ``5·a·s/h`` term is the attention matrix (softmax, dropout mask, dropout output), which
  SDPA's flash / memory-efficient kernels do not store (they keep one fp32 log-sum-exp per row). The
  constant 34 is for a GELU MLP of width 4h with dropout; this module counts the tensors that the HF
  implementations actually save (see :func:`layer_activation_bytes_per_token`), which were checked
  against saved-tensor and heap measurements of real training steps on CPU
  (``tests/planning/measure_cpu.py``).
- NF4 and double quantization: Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs",
  §3: 4-bit NormalFloat weights in blocks of 64 with an absmax constant each; double quantization stores
  those constants in 8 bits with one fp32 constant per 256 of them, 0.127 bits/param instead of 0.5.
- 8-bit optimizers: bitsandbytes documentation ("8-bit optimizers", Dettmers et al. 2022, "8-bit
  Optimizers via Block-wise Quantization"): Adam's two states in 8 bits, 2 B/param; the paged variants
  keep the same size but page to CPU memory under pressure instead of failing.
- DDP's communication buckets hold a second copy of the gradients unless ``gradient_as_bucket_view=True``
  (PyTorch ``DistributedDataParallel`` documentation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.activations import (
    eager_attention_bytes,
    first_layer_discount,
    layer_activation_bytes_per_token,
    lora_trainable_params,
    targeted_linears,
)
from shared.catalog import ModelArch, linear_layers, param_breakdown, param_count
from shared.config import JobConfig
from shared.estimate_types import GIB, Estimate, MemoryItem, Sharding

__all__ = [
    "ALLOCATOR_OVERHEAD",
    "CUDA_CONTEXT_BYTES",
    "GIB",
    "Estimate",
    "MemoryItem",
    "estimate",
    "layer_activation_bytes_per_token",
    "lora_trainable_params",
]


CUDA_CONTEXT_BYTES = int(0.75 * GIB)
"""CUDA context, kernels and cuBLAS workspace: typically 0.5–1 GiB per process (an assumption, not measured
here); nvidia-smi counts it, ``torch.cuda.max_memory_allocated`` does not."""

ALLOCATOR_OVERHEAD = 0.05
"""PyTorch's caching allocator reserves more than it hands out (block rounding, fragmentation); assumed 5 %
of the allocated peak (an assumption, not measured here)."""

NF4_BITS_DOUBLE_QUANT = 4 + 8 / 64 + 32 / (64 * 256)
"""NF4 weight bits per parameter with double quantization (QLoRA §3): 4 + 0.125 + 0.002 ≈ 4.127."""
NF4_BITS_SINGLE_QUANT = 4 + 32 / 64
"""NF4 without double quantization: one fp32 absmax per block of 64, 4.5 bits/param."""

# --------------------------------------------------------------------------- building blocks


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


# --------------------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class _Case:
    """What every part of the estimate reads: the model, the job and the derived sizes."""

    arch: ModelArch
    job: JobConfig
    dp_size: int
    sharding: Sharding
    attention: Literal["sdpa", "eager"]
    padded_batches: bool
    on_cuda: bool
    parts: dict
    n_params: int
    layer_linear: int

    @property
    def shard(self) -> int:
        """The FSDP sharding degree (1 under DDP)."""
        return self.dp_size if self.sharding == "fsdp" else 1

    @property
    def full(self) -> bool:
        return self.job.method == "full"

    @property
    def fp32(self) -> bool:
        return self.job.precision == "fp32"

    @property
    def amp(self) -> bool:
        """Full fine-tune under autocast: fp32 master weights, 16-bit compute."""
        return self.full and not self.fp32

    @property
    def compute_bytes(self) -> int:
        return 4 if self.fp32 else 2

    @property
    def tokens(self) -> int:
        return self.job.micro_batch_size * self.job.seq_len

    @property
    def quantizable(self) -> int:
        """Parameters of the decoder layers' linears: what bitsandbytes quantizes."""
        return self.layer_linear * self.arch.num_hidden_layers

    def sharded(self) -> str:
        return f" ÷ {self.shard} (FSDP)" if self.shard > 1 else ""


def estimate(
    arch: ModelArch,
    job: JobConfig,
    *,
    dp_size: int = 1,
    sharding: Sharding | None = None,
    attention: Literal["sdpa", "eager"] | None = None,
    padded_batches: bool | None = None,
    double_quant: bool = True,
    upcast_non_quantized: bool = False,
    quantized_matmul_keeps_input: bool = False,
    device: Literal["cuda", "cpu"] = "cuda",
) -> Estimate:
    """Itemised per-GPU peak memory for ``job`` on ``arch``.

    ``sharding`` defaults to the job's (``auto`` reads as ddp). ``attention`` defaults to SDPA, eager for
    Gemma-2 (transformers' default there). ``padded_batches`` (default: micro batch > 1) adds the b×s×s
    boolean mask and K/V expansion a padding mask causes. ``upcast_non_quantized``: PEFT's
    ``prepare_model_for_kbit_training`` casts embeddings, LM head and norms to fp32 (off: they stay bf16).
    ``quantized_matmul_keeps_input``: model older bitsandbytes releases (e.g. 0.41.1) whose 4-bit matmul kept its input.
    ``device="cpu"`` reproduces the CPU kernels (dropout masks in the input dtype, per-tensor AdamW, no
    CUDA context) so the model can be checked against ``tests/planning/data/cpu_measured.json``.

    The peak is the larger of two phases: the start of backward (weights, all saved activations, the fp32
    logits path) and the optimizer step (gradients plus the optimizer's temporaries).
    """
    if dp_size < 1:
        raise ValueError(f"dp_size must be 1 or more, got {dp_size}")
    if sharding is None:
        sharding = "fsdp" if job.sharding == "fsdp" else "ddp"
    if attention is None:
        attention = "eager" if arch.model_type == "gemma2" else "sdpa"
    if padded_batches is None:
        padded_batches = job.micro_batch_size > 1
    options = {"attention": attention, "padded_batches": padded_batches, "double_quant": double_quant,
               "upcast_non_quantized": upcast_non_quantized, "quantized_matmul_keeps_input": quantized_matmul_keeps_input,
               "device": device}
    case = _Case(arch, job, dp_size, sharding, attention, padded_batches, device == "cuda", param_breakdown(arch),
                 param_count(arch), sum(lin.weight_params for lin in linear_layers(arch)))
    notes: list[str] = []
    static = [_weights(case, double_quant=double_quant, upcast_non_quantized=upcast_non_quantized)]
    trainable, adapters = _trainable(case, notes)
    static += [*adapters, _optimizer_states(case, trainable, notes), *_sharding_overhead(case, trainable)]
    phase_a = _backward_phase(case, static, trainable, quantized_matmul_keeps_input)
    phase_b = _optimizer_phase(case, static, trainable)
    a_items, b_items = _finish(case, phase_a), _finish(case, phase_b)
    phase_a_name = "start of backward: activations and the fp32 logits path live"
    phase_b_name = "optimizer step: all gradients and the optimizer's temporaries live"
    if sum(i.bytes for i in a_items) >= sum(i.bytes for i in b_items):
        peak, phase, other_phase, other = a_items, phase_a_name, phase_b_name, b_items
    else:
        peak, phase, other_phase, other = b_items, phase_b_name, phase_a_name, a_items
    if attention == "eager":
        notes.append("eager attention keeps a×s² scores per layer (transformers' default for Gemma-2); SDPA/flash attention would not")
    if job.method == "qlora" and not upcast_non_quantized:
        notes.append("QLoRA: embeddings, LM head and norms counted in bf16; prepare_model_for_kbit_training would upcast them to fp32")
    return Estimate(
        arch=arch, job=job, dp_size=dp_size, sharding=sharding, options=options, params=case.n_params, trainable_params=trainable,
        phase=phase, items=peak, other_phase=other_phase, other_items=other, notes=notes,
    )


def _weights(case: _Case, *, double_quant: bool, upcast_non_quantized: bool) -> MemoryItem:
    """The model weights: NF4 + 16-bit rest (QLoRA), fp32 masters (AMP), or the compute dtype."""
    n_params, shard, job = case.n_params, case.shard, case.job
    if job.method == "qlora":
        bits = NF4_BITS_DOUBLE_QUANT if double_quant else NF4_BITS_SINGLE_QUANT
        other = n_params - case.quantizable  # embeddings, LM head, norms, biases: left in 16 bit
        other_bytes = 4 if (upcast_non_quantized or case.fp32) else 2
        return MemoryItem(
            name="weights", label="Model weights (NF4 + 16-bit rest)", bytes=int(case.quantizable * bits / 8 + other * other_bytes) // shard,
            formula=f"{case.quantizable / 1e9:.2f}B layer-linear params × {bits:.3f} bits (NF4{' + double quant' if double_quant else ''})"
                    f" + {other / 1e9:.2f}B embeddings/head/norms × {other_bytes} B" + (f", ÷ {shard} (FSDP)" if shard > 1 else ""),
        )
    if case.amp:
        return MemoryItem(name="master_weights", label="fp32 master weights (AMP keeps the model in fp32)", bytes=n_params * 4 // shard,
                          formula=f"{n_params / 1e9:.2f}B params × 4 B" + case.sharded())
    return MemoryItem(name="weights", label=f"Model weights ({'fp32' if case.fp32 else job.precision})",
                      bytes=n_params * case.compute_bytes // shard,
                      formula=f"{n_params / 1e9:.2f}B params × {case.compute_bytes} B" + case.sharded())


def _trainable(case: _Case, notes: list[str]) -> tuple[int, list[MemoryItem]]:
    """Trainable parameters, and the LoRA adapters' item when only adapters train (fp32: PEFT's autocast_adapter_dtype)."""
    if case.full:
        return case.n_params, []
    arch, job = case.arch, case.job
    trainable = lora_trainable_params(arch, job)
    if trainable == 0:
        notes.append(f"target_modules {job.target_modules} match no linear layer of this {arch.model_type} model")
    return trainable, [MemoryItem(
        name="lora_adapters", label="LoRA adapters (fp32)", bytes=trainable * 4 // case.shard,
        formula=f"r={job.lora_r} × (in + out) per targeted linear {sorted({lin.name for lin in targeted_linears(arch, job.target_modules)})}"
                f" × {arch.num_hidden_layers} layers = {trainable / 1e6:.1f}M params × 4 B",
    )]


def _optimizer_states(case: _Case, trainable: int, notes: list[str]) -> MemoryItem:
    """AdamW's m and v: fp32 (8 B/param) or 8-bit (2 B/param)."""
    optimizer = case.job.optimizer
    state_per = 2 if optimizer in ("adamw_8bit", "paged_adamw_8bit") else 8
    if optimizer == "paged_adamw_8bit":
        notes.append("paged 8-bit AdamW: same size, but bitsandbytes pages the states to CPU RAM under memory pressure instead of failing")
    label = {"adamw": "AdamW m+v (fp32)", "adamw_8bit": "8-bit AdamW m+v", "paged_adamw_8bit": "paged 8-bit AdamW m+v"}[optimizer]
    return MemoryItem(name="optimizer_states", label=label, bytes=trainable * state_per // case.shard,
                      formula=f"{trainable / 1e6:.1f}M trainable × {state_per} B" + case.sharded())


def _sharding_overhead(case: _Case, trainable: int) -> list[MemoryItem]:
    """DDP's gradient buckets, or FSDP's all-gathered units (two decoder layers and the root)."""
    if case.dp_size == 1:
        return []
    if case.sharding == "ddp":
        return [MemoryItem(name="ddp_buckets", label="DDP gradient buckets", bytes=trainable * 4,
                           formula=f"a second copy of the gradients ({_gib(trainable * 4)}); 0 with gradient_as_bucket_view=True")]
    arch, qlora = case.arch, case.job.method == "qlora"
    layer_params = case.layer_linear + (arch.norms_per_layer * arch.hidden_size)
    unit_bytes = layer_params * (NF4_BITS_DOUBLE_QUANT / 8 if qlora else case.compute_bytes)
    root = (case.parts["embeddings"] + case.parts["lm_head"]) * (2 if qlora else case.compute_bytes)
    return [MemoryItem(name="fsdp_unsharded", label="FSDP all-gathered units", bytes=int(2 * unit_bytes + root),
                       formula=f"2 decoder layers gathered (current + prefetch) × {_gib(unit_bytes)} + root unit (embeddings, head) {_gib(root)}")]


def _activation_bytes(case: _Case, quantized_matmul_keeps_input: bool) -> tuple[float, float, str]:
    """``(kept, recomputed, formula)``: activations saved through the forward and one recomputed layer (checkpointing)."""
    arch, job = case.arch, case.job
    per_layer = layer_activation_bytes_per_token(arch, job, attention=case.attention, padded_batches=case.padded_batches,
                                                 dropout_mask_bytes=1 if case.on_cuda else 4,
                                                 quantized_matmul_keeps_input=quantized_matmul_keeps_input)
    eager_layer = eager_attention_bytes(arch, job) * job.micro_batch_size if case.attention == "eager" else 0.0
    h, layers, tokens = arch.hidden_size, arch.num_hidden_layers, case.tokens
    resid = 4 if (case.amp or case.fp32) else 2
    final_norm = (4 * h + (4 * h if case.full else 0)) if arch.norm == "rms" else resid * h
    head_input = (2 * h if case.amp else (4 * h if case.fp32 else 0)) if case.full else 0
    if job.gradient_checkpointing:
        kept: float = tokens * (layers * resid * h + final_norm + head_input)
        recompute = tokens * (per_layer + 2 * resid * h) + eager_layer
        return kept, recompute, (f"checkpointing: {layers} layer inputs × b·s·h·{resid} B + one layer recomputed "
                                 f"({per_layer / h:.1f}·h B/token{' + eager a·s² scores' if eager_layer else ''})")
    kept = tokens * (layers * per_layer + final_norm + head_input - first_layer_discount(arch, job)) + layers * eager_layer
    return kept, 0.0, (f"{layers} layers × b·s × {per_layer / h:.1f}·h B (saved tensors per token"
                       f"{', SDPA: no s² term' if case.attention == 'sdpa' else ', eager: + a·s² scores'})")


def _autocast_copies(case: _Case) -> MemoryItem | None:
    """autocast's bf16 copies of the weights (AMP only): alive from forward through backward."""
    if not case.amp:
        return None
    head = case.parts["lm_head"] or case.parts["embeddings"]
    checkpointing = case.job.gradient_checkpointing
    copies = (case.quantizable + head) * 2 if not checkpointing else (case.layer_linear + head) * 2
    return MemoryItem(name="weights", label="bf16 working weights (autocast copies)", bytes=int(copies // case.shard),
                      formula=("all linear weights × 2 B, cached by autocast and kept for backward" if not checkpointing
                               else "LM head + one recomputed layer × 2 B (checkpointing recasts per layer)"))


def _backward_phase(case: _Case, static: list[MemoryItem], trainable: int, quantized_matmul_keeps_input: bool) -> list[MemoryItem]:
    """What is live at the start of backward: weights, saved activations, the fp32 logits path."""
    arch, job = case.arch, case.job
    kept, recompute, formula = _activation_bytes(case, quantized_matmul_keeps_input)
    vocab_copies = 12 + (2 if arch.model_type == "gemma2" else 0)
    logits_bytes = case.tokens * arch.vocab_size * vocab_copies
    items = list(static)
    copies = _autocast_copies(case)
    if copies:
        items.append(copies)
    if not case.full:
        items.append(MemoryItem(name="gradients", label="Gradients (adapters only, fp32)", bytes=trainable * 4 // case.shard,
                                formula=f"{trainable / 1e6:.1f}M trainable × 4 B — the frozen base gets no gradients"))
    items.append(MemoryItem(name="activations", label="Activations", bytes=int(kept + (recompute if recompute > logits_bytes else 0)),
                            formula=formula))
    if recompute <= logits_bytes:
        items.append(MemoryItem(
            name="logits", label="Logits and loss (fp32)", bytes=int(logits_bytes),
            formula=f"b·s·V × {vocab_copies} B = {case.tokens}×{arch.vocab_size}×{vocab_copies}: HF's loss upcasts logits to fp32, "
                    "log_softmax keeps its fp32 output, backward holds its gradient and the input gradient",
        ))
    if case.padded_batches:
        b, s = job.micro_batch_size, job.seq_len
        items.append(MemoryItem(name="attention_mask", label="Padding attention mask", bytes=b * s * s, formula=f"b·s² bool = {b}×{s}²"))
    return items


def _optimizer_phase(case: _Case, static: list[MemoryItem], trainable: int) -> list[MemoryItem]:
    """What is live at the optimizer step: every gradient and the optimizer's temporaries."""
    eight_bit = case.job.optimizer in ("adamw_8bit", "paged_adamw_8bit")
    items = list(static)
    items.append(MemoryItem(name="gradients", label="Gradients (fp32)", bytes=trainable * 4 // case.shard,
                            formula=f"{trainable / 1e6:.1f}M trainable × 4 B" + case.sharded()))
    step_temp = 0 if eight_bit else trainable * 4 // case.shard
    if not case.on_cuda and not eight_bit:  # per-tensor AdamW on CPU
        step_temp = 2 * 4 * max(case.parts["embeddings"], case.parts["lm_head"]) if case.full else 0
    if step_temp:
        items.append(MemoryItem(name="optimizer_step", label="AdamW step temporaries", bytes=step_temp,
                                formula="sqrt(v) for all parameters at once (torch's foreach AdamW, 4 B/param; fused AdamW needs none)"))
    return items


def _finish(case: _Case, items: list[MemoryItem]) -> list[MemoryItem]:
    """Add what a GPU holds beyond the tensors: allocator fragmentation and the CUDA context."""
    items = list(items)
    if case.on_cuda:
        allocated = sum(i.bytes for i in items)
        items.append(MemoryItem(name="allocator_overhead", label="Allocator fragmentation", bytes=int(allocated * ALLOCATOR_OVERHEAD),
                                formula=f"{ALLOCATOR_OVERHEAD:.0%} of the allocated peak (assumed)"))
        items.append(MemoryItem(name="cuda_context", label="CUDA context", bytes=CUDA_CONTEXT_BYTES,
                                formula="CUDA context + cuBLAS workspace, typically 0.5–1 GiB (assumed 0.75)"))
    return items

