"""Per-token activation bytes of one decoder layer and LoRA adapter sizes: the activation half of the estimator.

Pure arithmetic on a :class:`~shared.catalog.ModelArch` and a :class:`~shared.config.JobConfig`; the sources of the
formulas are listed in :mod:`shared.estimator`'s docstring, and the numbers were checked against saved-tensor and heap
measurements of real training steps on CPU (``tests/planning/measure_cpu.py``).
"""

from __future__ import annotations

from typing import Literal

from shared.catalog import Linear, ModelArch, linear_layers
from shared.config import JobConfig

__all__ = ["eager_attention_bytes", "first_layer_discount", "layer_activation_bytes_per_token", "lora_trainable_params",
           "mlp_saved_elements", "targeted_linears"]


def targeted_linears(arch: ModelArch, target_modules: list[str]) -> list[Linear]:
    """The linear kinds of a layer that LoRA adapts ('all-linear' selects all but the MoE router)."""
    wanted = {t.strip() for t in target_modules}
    if "all-linear" in wanted or "all_linear" in wanted:
        return [lin for lin in linear_layers(arch) if lin.name != "gate" or not arch.is_moe]
    return [lin for lin in linear_layers(arch) if lin.name in wanted or wanted & set(lin.aliases)]


def lora_trainable_params(arch: ModelArch, job: JobConfig) -> int:
    """Adapter parameters: A (r × in) and B (out × r) for every targeted linear of every layer."""
    r = job.lora_r
    per_layer = sum(r * (lin.in_features + lin.out_features) * lin.count for lin in targeted_linears(arch, job.target_modules))
    return per_layer * arch.num_hidden_layers


def mlp_saved_elements(arch: ModelArch, down_trainable: bool) -> float:
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
    total = float(arch.norms_per_layer * per_norm)

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

    total += act * mlp_saved_elements(arch, down_trainable=full) * i * routed
    if arch.is_moe:
        total += 4 * arch.num_local_experts  # router logits in fp32

    if job.method == "qlora" and quantized_matmul_keeps_input:
        total += act * (min(arch.norms_per_layer, 2) * h + i * routed)

    if not full:
        mask = dropout_mask_bytes if job.lora_dropout > 0 else 0
        for lin in targeted_linears(arch, job.target_modules):
            copies = routed if lin.count > 1 else 1
            total += copies * ((4 + mask) * lin.in_features + 4 * job.lora_r)
    return float(total)


def first_layer_discount(arch: ModelArch, job: JobConfig) -> float:
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
    adapted = {lin.name for lin in targeted_linears(arch, job.target_modules)}
    if parallel and not (adapted & mlp_names):
        discount += 2 * mlp_saved_elements(arch, down_trainable=False) * arch.intermediate_size
    return discount


def eager_attention_bytes(arch: ModelArch, job: JobConfig) -> float:
    """Per layer and sequence: the a×s×s tensors eager attention keeps (fp32 softmax 4 + bf16 probs 2, +2 tanh)."""
    per_element = 4 + 2 + (2 if arch.model_type == "gemma2" else 0)
    return per_element * arch.num_attention_heads * job.seq_len * job.seq_len

