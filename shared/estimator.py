"""Per-GPU peak memory of a fine-tuning job, itemised, and a fit verdict with the biggest lever to pull.

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

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from shared.catalog import Linear, ModelArch, linear_layers, param_breakdown, param_count
from shared.config import JobConfig

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "ALLOCATOR_OVERHEAD",
    "Estimate",
    "Lever",
    "MemoryItem",
    "Verdict",
    "estimate",
    "fit",
    "layer_activation_bytes_per_token",
    "lora_trainable_params",
]

GIB = 1 << 30

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

    def get(self, name: str, *, any_phase: bool = False) -> Optional[MemoryItem]:
        """The item called ``name`` at the peak (or, with ``any_phase``, at the other phase too); None when absent."""
        found = next((i for i in self.items if i.name == name), None)
        if found is None and any_phase:
            found = next((i for i in self.other_items if i.name == name), None)
        return found

    def bytes_of(self, name: str, *, any_phase: bool = False) -> int:
        """Bytes of item ``name`` at the peak (0 when absent); ``any_phase`` looks at the other phase too."""
        item = self.get(name, any_phase=any_phase)
        return item.bytes if item else 0


# --------------------------------------------------------------------------- building blocks


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _targeted(arch: ModelArch, target_modules: list[str]) -> list[Linear]:
    """The linear kinds of a layer that LoRA adapts ('all-linear' selects all but the MoE router)."""
    wanted = {t.strip() for t in target_modules}
    if "all-linear" in wanted or "all_linear" in wanted:
        return [lin for lin in linear_layers(arch) if lin.name != "gate" or not arch.is_moe]
    return [lin for lin in linear_layers(arch) if lin.name in wanted or wanted & set(lin.aliases)]


def lora_trainable_params(arch: ModelArch, job: JobConfig) -> int:
    """Adapter parameters: A (r × in) and B (out × r) for every targeted linear of every layer."""
    r = job.lora_r
    per_layer = sum(r * (lin.in_features + lin.out_features) * lin.count for lin in _targeted(arch, job.target_modules))
    return per_layer * arch.num_hidden_layers


def _mlp_saved_elements(arch: ModelArch, down_trainable: bool) -> float:
    """Tensors of width ``intermediate_size`` that one MLP keeps for backward, per routed token.

    Gated (SwiGLU/GeGLU): gate output (activation input), up output and activation output (both
    inputs of the product); the product is kept only when the down projection is trained. Phi/GPT-2's
    ``gelu_new`` is four element-wise ops that each keep a tensor (measured on CPU); a native GELU keeps
    its input only.
    """
    if arch.mlp == "gated":
        base = 3.0
    elif arch.model_type in ("phi", "gpt2"):
        base = 4.0
    else:
        base = 1.0
    return base + (1.0 if down_trainable else 0.0)


def layer_activation_bytes_per_token(
    arch: ModelArch,
    job: JobConfig,
    *,
    attention: Literal["sdpa", "eager"] = "sdpa",
    padded_batches: bool = False,
    dropout_mask_bytes: int = 1,
    quantized_matmul_keeps_input: bool = False,
) -> float:
    """Bytes one decoder layer saves for backward, per token (no gradient checkpointing).

    The tensors the HF implementations save (checked against ``saved_tensors_hooks`` on CPU):

    - norms: RMSNorm upcasts its input to fp32 and keeps it (4h); when the norm weight trains it also
      keeps the fp32 normalised output (4h). LayerNorm keeps its input in the residual dtype.
    - full fine-tune under autocast: every linear fed from the fp32 residual stream keeps its own bf16
      cast of the input (2·in each: q, k, v, gate, up / fc1), the down projection keeps its input.
    - attention (SDPA flash / memory-efficient): q and k after RoPE, v, the output, and an fp32
      log-sum-exp per head and row — no s×s matrix. K and V are expanded to all query heads when a
      padding mask is present (transformers then cannot use SDPA's GQA). Eager attention adds the
      a×s×s scores: fp32 softmax output and bf16 probabilities (and tanh output with Gemma-2 softcapping),
      Korthikanti et al. 2022's ``5as/h`` term in their fp16 accounting.
    - MLP: see :func:`_mlp_saved_elements`; a MoE token goes through ``num_experts_per_tok`` experts.
    - LoRA, per targeted linear: PEFT casts the input to the fp32 adapter dtype, applies dropout
      (mask: 1 B/elt on CUDA's fused dropout, the input dtype on CPU) and keeps the dropped input (4·in)
      and A's output (4·r).
    - QLoRA: bitsandbytes 0.50.2 keeps only the packed weight of a 4-bit matmul; older releases (0.41.1, in the
      lit-gpt table) kept its input too (``quantized_matmul_keeps_input``): the normed attention and MLP
      inputs and the down-projection input.
    """
    h, q, kv, i = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    full = job.method == "full"
    fp32 = job.precision == "fp32"
    amp = full and not fp32
    act = 4 if fp32 else 2
    resid = 4 if (amp or fp32) else 2
    routed = arch.num_experts_per_tok if arch.is_moe else 1

    if arch.norm == "rms":
        per_norm = 4 * h + (4 * h if full else 0)
    else:
        per_norm = resid * h
    total: float = arch.norms_per_layer * per_norm

    names = [lin.name for lin in linear_layers(arch)]
    if full:
        # inputs read from the normed stream: q, k, v (or a fused qkv) and gate/up (or fc1; MoE: routed)
        attn_inputs = sum(1 for n in names if n in ("q_proj", "k_proj", "v_proj", "c_attn", "query_key_value"))
        mlp_inputs = 2 if arch.mlp == "gated" else 1
        if amp:
            total += 2 * h * (attn_inputs + mlp_inputs * routed)
        else:
            total += 4 * h * (1 if arch.norms_per_layer == 1 else 2)  # the normed output, shared by its readers

    kv_saved = q if (padded_batches and kv != q) else kv
    total += act * (2 * q + 2 * kv_saved) + 4 * arch.num_attention_heads

    total += act * _mlp_saved_elements(arch, down_trainable=full) * i * routed
    if arch.is_moe:
        total += 4 * arch.num_local_experts  # router logits in fp32

    if job.method == "qlora" and quantized_matmul_keeps_input:
        total += act * (min(arch.norms_per_layer, 2) * h + i * routed)

    if not full:
        mask = dropout_mask_bytes if job.lora_dropout > 0 else 0
        for lin in _targeted(arch, job.target_modules):
            copies = routed if lin.count > 1 else 1
            total += copies * ((4 + mask) * lin.in_features + 4 * job.lora_r)
    return float(total)


def _first_layer_discount(arch: ModelArch, job: JobConfig) -> float:
    """Bytes per token the first layer does not save when only adapters train (no checkpointing).

    The frozen embeddings' output needs no gradient, so layer 0 keeps nothing until the first adapter:
    its first norm saves nothing, and in a parallel block (Phi, GPT-NeoX: the MLP reads the layer input,
    not the attention output) the MLP saves nothing either unless an MLP projection is adapted
    (measured on CPU, tests/planning/data/cpu_measured.json).
    """
    if job.method == "full" or job.gradient_checkpointing:
        return 0.0
    h = arch.hidden_size
    discount = 4.0 * h if arch.norm == "rms" else 2.0 * h
    parallel = arch.model_type in ("phi", "gpt_neox")
    mlp_names = {lin.name for lin in linear_layers(arch)[-3:]} | {"gate_proj", "up_proj", "down_proj", "fc1", "fc2"}
    adapted = {lin.name for lin in _targeted(arch, job.target_modules)}
    if parallel and not (adapted & mlp_names):
        discount += 2 * _mlp_saved_elements(arch, down_trainable=False) * arch.intermediate_size
    return discount


def _eager_attention_bytes(arch: ModelArch, job: JobConfig) -> float:
    """Per layer and sequence: the a×s×s tensors eager attention keeps (fp32 softmax 4 + bf16 probs 2, +2 tanh)."""
    per_element = 4 + 2 + (2 if arch.model_type == "gemma2" else 0)
    return per_element * arch.num_attention_heads * job.seq_len * job.seq_len


# --------------------------------------------------------------------------- the estimate


def estimate(
    arch: ModelArch,
    job: JobConfig,
    *,
    dp_size: int = 1,
    sharding: Optional[Sharding] = None,
    attention: Optional[Literal["sdpa", "eager"]] = None,
    padded_batches: Optional[bool] = None,
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
    b, s = job.micro_batch_size, job.seq_len
    if padded_batches is None:
        padded_batches = b > 1
    tokens = b * s
    shard = dp_size if sharding == "fsdp" else 1
    on_cuda = device == "cuda"
    options = {"attention": attention, "padded_batches": padded_batches, "double_quant": double_quant,
               "upcast_non_quantized": upcast_non_quantized, "quantized_matmul_keeps_input": quantized_matmul_keeps_input,
               "device": device}

    parts = param_breakdown(arch)
    n_params = param_count(arch)
    layer_linear = sum(lin.weight_params for lin in linear_layers(arch))
    quantizable = layer_linear * arch.num_hidden_layers  # bitsandbytes quantizes the decoder layers' linears
    other = n_params - quantizable  # embeddings, LM head, norms, biases: left in 16 bit
    full = job.method == "full"
    fp32 = job.precision == "fp32"
    amp = full and not fp32
    compute_bytes = 4 if fp32 else 2
    notes: list[str] = []
    static: list[MemoryItem] = []

    # weights ----------------------------------------------------------------------------------------------
    if job.method == "qlora":
        bits = NF4_BITS_DOUBLE_QUANT if double_quant else NF4_BITS_SINGLE_QUANT
        other_bytes = 4 if (upcast_non_quantized or fp32) else 2
        w = int(quantizable * bits / 8 + other * other_bytes)
        static.append(MemoryItem(
            name="weights", label="Model weights (NF4 + 16-bit rest)", bytes=w // shard,
            formula=f"{quantizable / 1e9:.2f}B layer-linear params × {bits:.3f} bits (NF4{' + double quant' if double_quant else ''})"
                    f" + {other / 1e9:.2f}B embeddings/head/norms × {other_bytes} B" + (f", ÷ {shard} (FSDP)" if shard > 1 else ""),
        ))
    elif amp:
        static.append(MemoryItem(
            name="master_weights", label="fp32 master weights (AMP keeps the model in fp32)", bytes=n_params * 4 // shard,
            formula=f"{n_params / 1e9:.2f}B params × 4 B" + (f" ÷ {shard} (FSDP)" if shard > 1 else ""),
        ))
    else:
        static.append(MemoryItem(
            name="weights", label=f"Model weights ({'fp32' if fp32 else job.precision})", bytes=n_params * compute_bytes // shard,
            formula=f"{n_params / 1e9:.2f}B params × {compute_bytes} B" + (f" ÷ {shard} (FSDP)" if shard > 1 else ""),
        ))

    # trainable parameters, adapters -----------------------------------------------------------------------
    if full:
        trainable = n_params
        grad_bytes_per = 4
    else:
        trainable = lora_trainable_params(arch, job)
        grad_bytes_per = 4  # PEFT keeps adapters in fp32 (autocast_adapter_dtype)
        if trainable == 0:
            notes.append(f"target_modules {job.target_modules} match no linear layer of this {arch.model_type} model")
        static.append(MemoryItem(
            name="lora_adapters", label="LoRA adapters (fp32)", bytes=trainable * 4 // shard,
            formula=f"r={job.lora_r} × (in + out) per targeted linear {sorted({lin.name for lin in _targeted(arch, job.target_modules)})}"
                    f" × {arch.num_hidden_layers} layers = {trainable / 1e6:.1f}M params × 4 B",
        ))

    # optimizer states ---------------------------------------------------------------------------------------
    eight_bit = job.optimizer in ("adamw_8bit", "paged_adamw_8bit")
    state_per = 2 if eight_bit else 8
    opt_label = {"adamw": "AdamW m+v (fp32)", "adamw_8bit": "8-bit AdamW m+v", "paged_adamw_8bit": "paged 8-bit AdamW m+v"}[job.optimizer]
    static.append(MemoryItem(
        name="optimizer_states", label=opt_label, bytes=trainable * state_per // shard,
        formula=f"{trainable / 1e6:.1f}M trainable × {state_per} B" + (f" ÷ {shard} (FSDP)" if shard > 1 else ""),
    ))
    if job.optimizer == "paged_adamw_8bit":
        notes.append("paged 8-bit AdamW: same size, but bitsandbytes pages the states to CPU RAM under memory pressure instead of failing")

    grads_total = trainable * grad_bytes_per // shard
    if sharding == "ddp" and dp_size > 1:
        static.append(MemoryItem(
            name="ddp_buckets", label="DDP gradient buckets", bytes=trainable * grad_bytes_per,
            formula=f"a second copy of the gradients ({_gib(trainable * grad_bytes_per)}); 0 with gradient_as_bucket_view=True",
        ))
    if sharding == "fsdp" and dp_size > 1:
        layer_params = layer_linear + (arch.norms_per_layer * arch.hidden_size)
        unit_bytes = layer_params * (NF4_BITS_DOUBLE_QUANT / 8 if job.method == "qlora" else compute_bytes)
        root = (parts["embeddings"] + parts["lm_head"]) * (2 if job.method == "qlora" else compute_bytes)
        static.append(MemoryItem(
            name="fsdp_unsharded", label="FSDP all-gathered units", bytes=int(2 * unit_bytes + root),
            formula=f"2 decoder layers gathered (current + prefetch) × {_gib(unit_bytes)} + root unit (embeddings, head) {_gib(root)}",
        ))

    # activations ----------------------------------------------------------------------------------------------
    per_layer = layer_activation_bytes_per_token(arch, job, attention=attention, padded_batches=padded_batches,
                                                 dropout_mask_bytes=1 if on_cuda else 4,
                                                 quantized_matmul_keeps_input=quantized_matmul_keeps_input)
    eager_layer = _eager_attention_bytes(arch, job) * b if attention == "eager" else 0.0
    h = arch.hidden_size
    resid = 4 if (amp or fp32) else 2
    final_norm = (4 * h + (4 * h if full else 0)) if arch.norm == "rms" else resid * h
    head_input = (2 * h if amp else (4 * h if fp32 else 0)) if full else 0
    layers = arch.num_hidden_layers
    mask_bytes = b * s * s if padded_batches else 0
    ckpt: float
    recompute: float
    if job.gradient_checkpointing:
        ckpt = tokens * (layers * resid * h + final_norm + head_input)
        recompute = tokens * (per_layer + 2 * resid * h) + eager_layer
        act_formula = (f"checkpointing: {layers} layer inputs × b·s·h·{resid} B + one layer recomputed "
                       f"({per_layer / h:.1f}·h B/token{' + eager a·s² scores' if eager_layer else ''})")
    else:
        ckpt = tokens * (layers * per_layer + final_norm + head_input - _first_layer_discount(arch, job)) + layers * eager_layer
        recompute = 0.0
        act_formula = (f"{layers} layers × b·s × {per_layer / h:.1f}·h B (saved tensors per token"
                       f"{', SDPA: no s² term' if attention == 'sdpa' else ', eager: + a·s² scores'})")

    vocab_copies = 12 + (2 if arch.model_type == "gemma2" else 0)
    logits_bytes = tokens * arch.vocab_size * vocab_copies
    logits_item = MemoryItem(
        name="logits", label="Logits and loss (fp32)", bytes=int(logits_bytes),
        formula=f"b·s·V × {vocab_copies} B = {tokens}×{arch.vocab_size}×{vocab_copies}: HF's loss upcasts logits to fp32, "
                "log_softmax keeps its fp32 output, backward holds its gradient and the input gradient",
    )

    # autocast's bf16 copies of the weights (AMP only): alive from forward through backward
    if amp:
        linear_all = quantizable + (parts["lm_head"] or parts["embeddings"])
        copies = linear_all * 2 if not job.gradient_checkpointing else (layer_linear + (parts["lm_head"] or parts["embeddings"])) * 2
        copies //= shard if shard > 1 else 1
        copies_item = MemoryItem(
            name="weights", label="bf16 working weights (autocast copies)", bytes=int(copies),
            formula=("all linear weights × 2 B, cached by autocast and kept for backward" if not job.gradient_checkpointing
                     else "LM head + one recomputed layer × 2 B (checkpointing recasts per layer)"),
        )
    else:
        copies_item = None

    phase_a: list[MemoryItem] = list(static)
    if copies_item:
        phase_a.append(copies_item)
    if not full:
        phase_a.append(MemoryItem(name="gradients", label="Gradients (adapters only, fp32)", bytes=grads_total,
                                  formula=f"{trainable / 1e6:.1f}M trainable × 4 B — the frozen base gets no gradients"))
    phase_a.append(MemoryItem(name="activations", label="Activations", bytes=int(ckpt + (recompute if recompute > logits_bytes else 0)),
                              formula=act_formula))
    if recompute <= logits_bytes:
        phase_a.append(logits_item)
    if mask_bytes:
        phase_a.append(MemoryItem(name="attention_mask", label="Padding attention mask", bytes=mask_bytes,
                                  formula=f"b·s² bool = {b}×{s}²"))

    step_temp = 0 if eight_bit else trainable * 4 // shard
    if not on_cuda and not eight_bit:
        step_temp = 2 * 4 * max(parts["embeddings"], parts["lm_head"]) if full else 0  # per-tensor AdamW on CPU
    phase_b: list[MemoryItem] = list(static)
    phase_b.append(MemoryItem(name="gradients", label=f"Gradients ({'fp32' if grad_bytes_per == 4 else 'bf16'})", bytes=grads_total,
                              formula=f"{trainable / 1e6:.1f}M trainable × {grad_bytes_per} B" + (f" ÷ {shard} (FSDP)" if shard > 1 else "")))
    if step_temp:
        phase_b.append(MemoryItem(name="optimizer_step", label="AdamW step temporaries", bytes=step_temp,
                                  formula="sqrt(v) for all parameters at once (torch's foreach AdamW, 4 B/param; fused AdamW needs none)"))

    def finish(items: list[MemoryItem]) -> list[MemoryItem]:
        items = list(items)
        if on_cuda:
            allocated = sum(i.bytes for i in items)
            items.append(MemoryItem(name="allocator_overhead", label="Allocator fragmentation", bytes=int(allocated * ALLOCATOR_OVERHEAD),
                                    formula=f"{ALLOCATOR_OVERHEAD:.0%} of the allocated peak (assumed)"))
            items.append(MemoryItem(name="cuda_context", label="CUDA context", bytes=CUDA_CONTEXT_BYTES,
                                    formula="CUDA context + cuBLAS workspace, typically 0.5–1 GiB (assumed 0.75)"))
        return items

    a_items, b_items = finish(phase_a), finish(phase_b)
    a_total, b_total = sum(i.bytes for i in a_items), sum(i.bytes for i in b_items)
    phase_a_name = "start of backward: activations and the fp32 logits path live"
    phase_b_name = "optimizer step: all gradients and the optimizer's temporaries live"
    if a_total >= b_total:
        peak, phase, other_phase, other_items = a_items, phase_a_name, phase_b_name, b_items
    else:
        peak, phase, other_phase, other_items = b_items, phase_b_name, phase_a_name, a_items
    if attention == "eager":
        notes.append("eager attention keeps a×s² scores per layer (transformers' default for Gemma-2); SDPA/flash attention would not")
    if job.method == "qlora" and not upcast_non_quantized:
        notes.append("QLoRA: embeddings, LM head and norms counted in bf16; prepare_model_for_kbit_training would upcast them to fp32")
    return Estimate(
        arch=arch, job=job, dp_size=dp_size, sharding=sharding, options=options, params=n_params, trainable_params=trainable,
        phase=phase, items=peak, other_phase=other_phase, other_items=other_items, notes=notes,
    )


# --------------------------------------------------------------------------- verdict


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
    lever: Optional[Lever] = Field(None, description="The change that saves the most, when it is tight or does not fit.")
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


def best_lever(est: Estimate) -> Optional[Lever]:
    """Re-estimate with each lever and return the one that lowers the peak the most (None if none helps)."""
    best: Optional[Lever] = None
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
