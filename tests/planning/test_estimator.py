"""Estimator: items, published and CPU-measured reference figures, seed 003, the ×20/×4 rules, verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.catalog import CATALOG, ModelArch, arch_from_hf_config, param_count
from shared.config import JobConfig
from shared.estimator import GIB, NF4_BITS_DOUBLE_QUANT, estimate, lora_trainable_params
from shared.fit import fit

DATA = Path(__file__).with_name("data")
LLAMA7 = CATALOG["meta-llama/Llama-2-7b-hf"].arch
LLAMA3_8 = CATALOG["meta-llama/Meta-Llama-3-8B"].arch


def job(**kw: Any) -> JobConfig:
    return JobConfig(**kw)


# ---------------------------------------------------------------- published measurements (LitGPT resource tables)

PUBLISHED = json.loads((DATA / "published_peaks.json").read_text())


def _published_arch(name: str) -> ModelArch:
    spec = PUBLISHED["models"][name]
    return CATALOG[spec].arch if isinstance(spec, str) else arch_from_hf_config(spec)


def _published_estimate(row: dict[str, Any]) -> tuple[float, ModelArch]:
    """Our estimate (GB, tensor bytes only) for a LitGPT row, with LitGPT's known differences removed."""
    arch = _published_arch(row["model"])
    tokens = PUBLISHED["longest_tokens"][row["model"]]
    quant = row["quantization"]
    j = job(method="qlora" if quant else "lora", lora_r=8, lora_alpha=16, lora_dropout=0.05, target_modules=["q_proj", "v_proj"],
            micro_batch_size=row["micro_batch_size"], seq_len=tokens, gradient_checkpointing=False, optimizer="adamw")
    est = estimate(arch, j, padded_batches=False, double_quant=quant != "bnb.nf4", quantized_matmul_keeps_input=bool(quant))
    allocated = est.allocated_bytes
    if arch.model_type == "phi":
        # LitGPT's phi uses the native tanh GELU (keeps its input); HF's gelu_new keeps 3 more bf16 tensors of width i
        allocated -= 3 * 2 * arch.intermediate_size * arch.num_hidden_layers * tokens * row["micro_batch_size"]
    return allocated / 1e9, arch


MEASURED_ROWS = [r for r in PUBLISHED["rows"] if r["max_gpu_ram_gb"] is not None]


@pytest.mark.parametrize("row", MEASURED_ROWS, ids=lambda r: f"{r['model']}-{r['quantization']}-b{r['micro_batch_size']}")
def test_published_litgpt_peaks_within_6_percent(row: dict[str, Any]) -> None:
    ours, _ = _published_estimate(row)
    assert ours == pytest.approx(row["max_gpu_ram_gb"], rel=0.06), PUBLISHED["source"]


@pytest.mark.parametrize("row", [r for r in MEASURED_ROWS if r["micro_batch_size"] == 1 and not r["quantization"]], ids=lambda r: r["model"])
def test_lora_trainable_count_matches_published(row: dict[str, Any]) -> None:
    arch = _published_arch(row["model"])
    assert lora_trainable_params(arch, job(lora_r=8, target_modules=["q_proj", "v_proj"])) == row["trainable_params"]


def test_published_ooms_are_predicted() -> None:
    for row in (r for r in PUBLISHED["rows"] if r.get("outcome") == "OOM on 40 GB"):
        ours, _ = _published_estimate(row)
        assert ours > 40 * GIB / 1e9 * 0.95, row


def test_beats_seed_001_rules_on_published_measurements() -> None:
    """Seed 001: LoRA ≈ 4 GB per billion parameters. Mean absolute error over all published rows."""
    ours, rule = [], []
    for row in MEASURED_ROWS:
        estimate_gb, arch = _published_estimate(row)
        measured = row["max_gpu_ram_gb"]
        ours.append(abs(estimate_gb / measured - 1))
        rule.append(abs(4 * param_count(arch) / 1e9 / measured - 1))
    mean_ours, mean_rule = sum(ours) / len(ours), sum(rule) / len(rule)
    assert mean_ours < 0.06 and mean_rule > 0.3
    assert mean_ours < mean_rule / 5


# ---------------------------------------------------------------- CPU measurements of real HF training steps

CPU = json.loads((DATA / "cpu_measured.json").read_text())  # committed data: its absence is a failure, not a skip


def _cpu_estimate(row: dict[str, Any]):
    config = dict(CPU["models"][row["model"]], num_hidden_layers=row["layers"])
    arch = arch_from_hf_config(config)
    targets = row["target_modules"] or ["q_proj", "v_proj"]
    j = job(method=row["method"], target_modules=[targets] if isinstance(targets, str) else targets, lora_r=16, lora_alpha=32,
            lora_dropout=0.05, gradient_checkpointing=row["gradient_checkpointing"], micro_batch_size=row["micro_batch_size"],
            seq_len=row["seq_len"], optimizer="adamw", precision="bf16")
    return arch, estimate(arch, j, padded_batches=False, device="cpu")


STATIC = ("master_weights", "lora_adapters", "optimizer_states")


def _dynamic(items, method: str) -> int:
    names = STATIC + (("weights",) if method != "full" else ())
    return sum(i.bytes for i in items if i.name not in names)


def _rows(**match: Any) -> list[dict[str, Any]]:
    if CPU is None:
        return []
    return [r for r in CPU["rows"] if all(r[k] == v for k, v in match.items())]


def _row_id(r: dict[str, Any]) -> str:
    return f"{r['model']}-{r['method']}-{r['target_modules'] if isinstance(r['target_modules'], str) else 'qv'}-gc{int(r['gradient_checkpointing'])}-L{r['layers']}-b{r['micro_batch_size']}-s{r['seq_len']}"


@pytest.mark.parametrize("row", _rows(gradient_checkpointing=False), ids=_row_id)
def test_cpu_saved_activations(row: dict[str, Any]) -> None:
    """Tensors autograd saved (measured) = activations + log_softmax output (+ autocast weight copies for AMP)."""
    arch, est = _cpu_estimate(row)
    tokens = row["micro_batch_size"] * row["seq_len"]
    predicted = est.bytes_of("activations", any_phase=True) + 4 * arch.vocab_size * tokens
    if row["method"] == "full":
        predicted += est.bytes_of("weights", any_phase=True)
    assert predicted == pytest.approx(row["saved_bytes"], rel=0.04)


@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_cpu_parameter_bytes(row: dict[str, Any]) -> None:
    _, est = _cpu_estimate(row)
    # weights (fp32 master for AMP, bf16 or NF4 otherwise) and fp32 adapters: present in both phases, so read the peak's
    static = sum(i.bytes for i in est.items if i.name in ("master_weights", "lora_adapters") or (i.name == "weights" and row["method"] != "full"))
    assert static == pytest.approx(row["param_bytes"], rel=0.01)


@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_cpu_peak_of_the_step(row: dict[str, Any]) -> None:
    """Peak live heap above the steady state (weights and optimizer states), measured after every aten op."""
    _, est = _cpu_estimate(row)
    predicted = max(_dynamic(est.items, row["method"]), _dynamic(est.other_items, row["method"]))
    assert predicted == pytest.approx(row["peak_step_bytes"], rel=0.05)


def test_cpu_rows_cover_the_matrix() -> None:
    assert {r["method"] for r in CPU["rows"]} == {"full", "lora", "qlora"}
    assert {r["gradient_checkpointing"] for r in CPU["rows"]} == {True, False}
    assert "measured on CPU" in CPU["source"] and "not a GPU measurement" in CPU["source"]


# ---------------------------------------------------------------- seed 003 (a hand estimate)

SEED3 = json.loads((DATA / "seed003.json").read_text())


def test_seed_003_order_of_magnitude() -> None:
    cfg = dict(SEED3["config"])
    arch = CATALOG[cfg.pop("model")].arch
    est = estimate(arch, job(**cfg))
    seed = SEED3["items_gb"]
    total = est.total_bytes / 1e9
    assert 0.3 < total / seed["total"] < 3  # same order of magnitude: ours ≈ 6.4 GB against the seed's 10 GB
    # Weights: 6.48B quantizable params at 4.127 bits + 0.26B embeddings/head in bf16 ≈ 3.9 GB; the seed's 2.8 GB is
    # below even 4 bits × 6.74B (3.4 GB): it leaves out the bf16 embeddings and the quantization constants.
    assert 0.3 < est.bytes_of("weights") / 1e9 / seed["weights"] < 3
    # The seed's 0.5 GB of LoRA weights, 2.0 GB of Adam state and 2.0 GB of gradients are wrong for LoRA r=16 on q/v:
    # only 8.4M adapter parameters exist (34 MB in fp32); only they get gradients (34 MB) and 8-bit Adam states (17 MB).
    # The frozen 4-bit base gets no gradients at all.
    assert est.trainable_params == 8_388_608
    assert est.bytes_of("lora_adapters") < seed["lora_adapters"] * 1e9 / 10
    assert est.bytes_of("gradients") < seed["gradients"] * 1e9 / 50
    assert est.bytes_of("optimizer_states") < seed["optimizer_states"] * 1e9 / 50
    # Activations with checkpointing plus the fp32 logits path: same order as the seed's 2.5 GB.
    act = (est.bytes_of("activations") + est.bytes_of("logits")) / 1e9
    assert 0.3 < act / seed["activations"] < 3


# ---------------------------------------------------------------- the ×20 / ×4 rules on full fine-tuning


def test_full_finetune_near_20_bytes_per_param_without_activations() -> None:
    """AMP + AdamW: fp32 weights 4 + fp32 grads 4 + m,v 8 + foreach step temporaries 4 = 20 B/param (the step phase)."""
    est = estimate(LLAMA7, job(method="full", optimizer="adamw", seq_len=512))
    allocated = est.allocated_bytes
    assert allocated / param_count(LLAMA7) == pytest.approx(20, rel=0.01)
    assert est.phase.startswith("optimizer step")


def test_qlora_far_below_the_4x_rule() -> None:
    est = estimate(LLAMA7, job(method="qlora"))
    assert est.total_bytes < 0.3 * 4 * param_count(LLAMA7)


# ---------------------------------------------------------------- items


def test_items_have_names_formulas_and_sum_to_total() -> None:
    est = estimate(LLAMA3_8, job(method="lora", gradient_checkpointing=False))
    names = [i.name for i in est.items]
    assert len(names) == len(set(names))
    assert all(i.formula for i in est.items)
    assert est.total_bytes == sum(i.bytes for i in est.items)
    assert est.allocated_bytes == est.total_bytes - est.bytes_of("cuda_context") - est.bytes_of("allocator_overhead")
    assert {"weights", "lora_adapters", "gradients", "optimizer_states", "activations", "logits", "cuda_context"} <= set(names)


def test_nf4_weight_bytes() -> None:
    assert NF4_BITS_DOUBLE_QUANT == pytest.approx(4.127, abs=0.001)
    est = estimate(LLAMA7, job(method="qlora"))
    linear = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    rest = param_count(LLAMA7) - linear
    assert est.bytes_of("weights") == pytest.approx(linear * 4.127 / 8 + rest * 2, rel=0.001)


def test_lora_adapter_count_with_gqa() -> None:
    # Llama-3-8B, r=16 on q/k/v/o: q,o 16×(4096+4096); k,v 16×(4096+1024) (8 KV heads × 128)
    j = job(method="lora", lora_r=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    assert lora_trainable_params(LLAMA3_8, j) == 32 * 16 * (2 * 8192 + 2 * 5120)


def test_all_linear_targets_every_projection() -> None:
    j = job(method="lora", lora_r=16, target_modules=["all-linear"])
    per_layer = 16 * (2 * 8192 + 2 * 5120 + 3 * (4096 + 14336))
    assert lora_trainable_params(LLAMA3_8, j) == 32 * per_layer


def test_logits_fp32_path() -> None:
    est = estimate(LLAMA3_8, job(method="qlora", seq_len=4096))
    assert est.bytes_of("logits") == 4096 * 128256 * 12


def test_eight_bit_optimizer_states() -> None:
    full = job(method="full")
    assert estimate(LLAMA7, full.model_copy(update={"optimizer": "adamw"})).bytes_of("optimizer_states", any_phase=True) == 8 * param_count(LLAMA7)
    eight = estimate(LLAMA7, full.model_copy(update={"optimizer": "adamw_8bit"}))
    assert eight.bytes_of("optimizer_states") == 2 * param_count(LLAMA7)
    paged = estimate(LLAMA7, full.model_copy(update={"optimizer": "paged_adamw_8bit"}))
    assert any("paged" in n for n in paged.notes)


# ---------------------------------------------------------------- internal consistency


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("gc", [True, False])
def test_monotonic_in_seq_len_and_batch(method: str, gc: bool) -> None:
    base = job(method=method, gradient_checkpointing=gc, seq_len=1024, micro_batch_size=1)
    totals = [estimate(LLAMA7, base.model_copy(update={"seq_len": s})).total_bytes for s in (512, 1024, 2048, 4096)]
    assert totals == sorted(totals)
    batches = [estimate(LLAMA7, base.model_copy(update={"micro_batch_size": b}), padded_batches=False).total_bytes for b in (1, 2, 4)]
    assert batches == sorted(batches)


def test_activations_scale_linearly_with_tokens_without_checkpointing() -> None:
    one = estimate(LLAMA7, job(method="lora", gradient_checkpointing=False, seq_len=1024), padded_batches=False)
    two = estimate(LLAMA7, job(method="lora", gradient_checkpointing=False, seq_len=1024, micro_batch_size=2), padded_batches=False)
    assert two.bytes_of("activations") == pytest.approx(2 * one.bytes_of("activations"), rel=1e-6)


def test_checkpointing_lowers_activations() -> None:
    off = estimate(LLAMA7, job(method="lora", gradient_checkpointing=False))
    on = estimate(LLAMA7, job(method="lora", gradient_checkpointing=True))
    assert on.bytes_of("activations") < off.bytes_of("activations") / 5
    assert on.total_bytes < off.total_bytes


def test_method_order() -> None:
    totals = {m: estimate(LLAMA7, job(method=m, optimizer="adamw")).total_bytes for m in ("full", "lora", "qlora")}
    assert totals["qlora"] < totals["lora"] < totals["full"]


def test_fsdp_divides_model_states() -> None:
    arch = CATALOG["meta-llama/Llama-2-70b-hf"].arch
    j = job(method="full", optimizer="adamw")
    one = estimate(arch, j, dp_size=1, sharding="fsdp")
    eight = estimate(arch, j, dp_size=8, sharding="fsdp")
    for name in ("master_weights", "optimizer_states", "gradients"):
        assert eight.bytes_of(name, any_phase=True) == pytest.approx(one.bytes_of(name, any_phase=True) / 8, rel=1e-6)
    assert eight.get("fsdp_unsharded", any_phase=True) is not None
    assert eight.total_bytes < one.total_bytes / 4


def test_ddp_replicates_and_adds_buckets() -> None:
    j = job(method="full", optimizer="adamw")
    one = estimate(LLAMA7, j, dp_size=1, sharding="ddp")
    four = estimate(LLAMA7, j, dp_size=4, sharding="ddp")
    assert four.bytes_of("master_weights") == one.bytes_of("master_weights")
    assert four.bytes_of("ddp_buckets") == 4 * param_count(LLAMA7)


def test_job_sharding_is_the_default() -> None:
    j = job(method="full", sharding="fsdp")
    assert estimate(LLAMA7, j, dp_size=4).sharding == "fsdp"
    assert estimate(LLAMA7, job(sharding="auto"), dp_size=4).sharding == "ddp"


def test_padded_batches_add_mask_and_expand_gqa() -> None:
    j = job(method="lora", gradient_checkpointing=False, micro_batch_size=2, seq_len=2048)
    padded = estimate(LLAMA3_8, j, padded_batches=True)
    packed = estimate(LLAMA3_8, j, padded_batches=False)
    assert padded.bytes_of("attention_mask") == 2 * 2048 * 2048
    assert padded.bytes_of("activations") > packed.bytes_of("activations")


def test_gemma2_eager_attention_has_the_s_squared_term() -> None:
    arch = CATALOG["google/gemma-2-2b"].arch
    j = job(method="lora", gradient_checkpointing=False, seq_len=4096)
    eager = estimate(arch, j)
    sdpa = estimate(arch, j, attention="sdpa")
    assert eager.bytes_of("activations") - sdpa.bytes_of("activations") == pytest.approx(26 * 8 * 8 * 4096 * 4096, rel=0.01)
    assert any("eager" in n for n in eager.notes)


def test_bad_dp_size() -> None:
    with pytest.raises(ValueError, match="dp_size"):
        estimate(LLAMA7, job(), dp_size=0)


# ---------------------------------------------------------------- verdicts and levers


def test_verdict_thresholds() -> None:
    est = estimate(LLAMA7, job(method="qlora"))
    need = est.total_bytes
    assert fit(est, int(need * 1.5)).status == "fits"
    assert fit(est, int(need * 1.05)).status == "tight"
    assert fit(est, int(need * 0.9)).status == "won't fit"
    assert fit(est, int(need * 1.5)).lever is None


def test_lever_qlora_for_lora_on_a_small_gpu() -> None:
    est = estimate(LLAMA7, job(method="lora"))
    verdict = fit(est, 12 * GIB)
    assert verdict.status == "won't fit"
    assert verdict.lever is not None and verdict.lever.name == "qlora"
    assert verdict.lever.new_total_bytes < 12 * GIB
    assert "qlora" in verdict.reason and "fits" in verdict.reason


def test_lever_checkpointing_for_long_sequences() -> None:
    est = estimate(LLAMA7, job(method="qlora", gradient_checkpointing=False, seq_len=4096))
    verdict = fit(est, 16 * GIB)
    assert verdict.status != "fits"
    assert verdict.lever is not None and verdict.lever.name == "gradient_checkpointing"


def test_lever_fsdp_when_the_weights_alone_do_not_fit() -> None:
    # Llama-2-70B QLoRA on 8 GPUs of 24 GB: ~35 GB of NF4 weights per GPU under DDP; FSDP shards them 8 ways.
    arch = CATALOG["meta-llama/Llama-2-70b-hf"].arch
    est = estimate(arch, job(method="qlora", seq_len=1024), dp_size=8, sharding="ddp")
    verdict = fit(est, 23 * GIB)
    assert verdict.status == "won't fit"
    assert verdict.lever is not None and verdict.lever.name == "fsdp"
    assert verdict.lever.new_total_bytes < 23 * GIB


def test_lever_seq_len_when_logits_dominate() -> None:
    # Qwen2.5's 152k vocabulary: at 8k tokens the fp32 logits path (12 B × s × V ≈ 15 GB) outweighs activations,
    # which checkpointing cannot remove; halving the sequence length can.
    est = estimate(CATALOG["Qwen/Qwen2.5-0.5B"].arch, job(method="qlora", gradient_checkpointing=False, seq_len=8192))
    verdict = fit(est, 8 * GIB)
    assert verdict.lever is not None and verdict.lever.name == "seq_len"


def test_no_lever_can_help() -> None:
    est = estimate(CATALOG["meta-llama/Llama-2-70b-hf"].arch, job(method="qlora", micro_batch_size=1, seq_len=128))
    verdict = fit(est, 4 * GIB)
    assert verdict.status == "won't fit"
    assert verdict.lever is None or verdict.lever.new_total_bytes > 4 * GIB
