"""Catalog: exact parameter counts, HF config.json parsing, name lookup."""

from __future__ import annotations

import pytest

from shared.catalog import CATALOG, ArchError, arch_from_hf_config, linear_layers, lookup, param_breakdown, param_count

# Published sizes quoted in the task brief (billions); the catalog's own published counts are checked too.
BRIEF_SIZES = {
    "meta-llama/Llama-2-7b-hf": 6.74,
    "meta-llama/Meta-Llama-3-8B": 8.03,
    "mistralai/Mistral-7B-v0.1": 7.24,
    "mistralai/Mixtral-8x7B-v0.1": 46.7,
    "Qwen/Qwen2.5-7B": 7.62,
    "TinyLlama/TinyLlama-1.1B-Chat-v1.0": 1.10,
    "microsoft/phi-2": 2.78,
    "google/gemma-2-9b": 9.24,
}


@pytest.mark.parametrize("hf_id", sorted(CATALOG))
def test_catalog_count_within_2_percent_of_published(hf_id: str) -> None:
    entry = CATALOG[hf_id]
    assert param_count(entry.arch) == pytest.approx(entry.published_params, rel=0.02), entry.source


@pytest.mark.parametrize("hf_id, billions", sorted(BRIEF_SIZES.items()))
def test_brief_sizes(hf_id: str, billions: float) -> None:
    assert param_count(CATALOG[hf_id].arch) / 1e9 == pytest.approx(billions, rel=0.02)


def test_exact_counts_of_well_known_models() -> None:
    # These equal sum(p.numel()) of the transformers implementation on the meta device (see test_against_transformers).
    assert param_count(CATALOG["meta-llama/Llama-2-7b-hf"].arch) == 6_738_415_616
    assert param_count(CATALOG["mistralai/Mixtral-8x7B-v0.1"].arch) == 46_702_792_704
    assert param_count(CATALOG["microsoft/phi-2"].arch) == 2_779_683_840


def test_breakdown_of_llama2_7b() -> None:
    parts = param_breakdown(CATALOG["meta-llama/Llama-2-7b-hf"].arch)
    assert parts["embeddings"] == parts["lm_head"] == 32000 * 4096
    assert parts["attention"] == 32 * 4 * 4096 * 4096
    assert parts["mlp"] == 32 * 3 * 4096 * 11008
    assert parts["norms"] == (2 * 32 + 1) * 4096


def test_tied_embeddings_counted_once() -> None:
    arch = CATALOG["Qwen/Qwen2.5-0.5B"].arch
    assert arch.tie_word_embeddings and param_breakdown(arch)["lm_head"] == 0


def test_gqa_linear_shapes() -> None:
    shapes = {lin.name: (lin.in_features, lin.out_features) for lin in linear_layers(CATALOG["meta-llama/Llama-2-70b-hf"].arch)}
    assert shapes["q_proj"] == (8192, 8192)
    assert shapes["k_proj"] == shapes["v_proj"] == (8192, 1024)  # 8 KV heads × 128
    assert shapes["down_proj"] == (28672, 8192)


def test_gemma_head_dim_from_config() -> None:
    arch = CATALOG["google/gemma-2-9b"].arch
    assert arch.head_size == 256 and arch.q_dim == 4096 != arch.hidden_size


def test_moe_router_and_experts() -> None:
    lins = {lin.name: lin for lin in linear_layers(CATALOG["mistralai/Mixtral-8x7B-v0.1"].arch)}
    assert lins["w1"].count == 8 and "gate_proj" in lins["w1"].aliases
    assert (lins["gate"].in_features, lins["gate"].out_features) == (4096, 8)


# ---------------------------------------------------------------- parsing of config.json dicts


def test_parse_llama_config() -> None:
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    }
    arch = arch_from_hf_config(config)
    assert (arch.kv_dim, arch.head_size, arch.mlp, arch.norm) == (1024, 128, "gated", "rms")
    assert param_count(arch) == 8_030_261_248


def test_parse_mixtral_config() -> None:
    config = {
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
        "num_experts_per_tok": 2, "tie_word_embeddings": False,
    }
    arch = arch_from_hf_config(config)
    assert arch.is_moe and arch.num_experts_per_tok == 2
    assert param_count(arch) == 46_702_792_704


def test_parse_qwen2_has_qkv_bias() -> None:
    arch = arch_from_hf_config({
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
    })
    assert arch.qkv_bias and not arch.o_bias
    assert param_count(arch) == 494_032_768


def test_parse_gemma2_config_defaults_to_tied() -> None:
    arch = arch_from_hf_config({
        "model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
    })
    assert arch.tie_word_embeddings and arch.norms_per_layer == 4
    assert param_count(arch) == 2_614_341_888


def test_parse_phi_config() -> None:
    arch = arch_from_hf_config({
        "model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "vocab_size": 51200, "partial_rotary_factor": 0.4,
        "tie_word_embeddings": False,
    })
    assert (arch.mlp, arch.norm, arch.num_key_value_heads) == ("plain", "layer", 32)
    assert param_count(arch) == 2_779_683_840


def test_parse_gpt2_spelling() -> None:
    # GPT-2 small: n_embd/n_layer/n_head, MLP 4×, learned positions, tied head: 124,439,808 parameters.
    arch = arch_from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024})
    assert arch.intermediate_size == 3072 and arch.tie_word_embeddings
    assert param_count(arch) == 124_439_808


def test_parse_gpt_neox_config() -> None:
    arch = arch_from_hf_config({
        "model_type": "gpt_neox", "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 6,
        "num_attention_heads": 8, "vocab_size": 50304, "tie_word_embeddings": False,
    })
    assert param_count(arch) == 70_426_624  # Pythia-70M


def test_parse_multimodal_text_config() -> None:
    config = {"model_type": "llava", "text_config": dict(CATALOG["meta-llama/Llama-2-7b-hf"].config)}
    assert param_count(arch_from_hf_config(config)) == 6_738_415_616


@pytest.mark.parametrize("bad, needle", [
    ({"model_type": "llama", "hidden_size": 8}, "num_hidden_layers"),
    ({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 10}, "intermediate_size"),
    ([1, 2], "dict"),
])
def test_parse_errors_name_the_key(bad: object, needle: str) -> None:
    with pytest.raises(ArchError, match=needle):
        arch_from_hf_config(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- lookup


@pytest.mark.parametrize("name, hf_id", [
    ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
    ("META-LLAMA/llama-2-7b-HF", "meta-llama/Llama-2-7b-hf"),
    ("Llama-2-13b-hf", "meta-llama/Llama-2-13b-hf"),
    ("llama2-7b", "meta-llama/Llama-2-7b-hf"),
    ("llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
    ("mistral-7b", "mistralai/Mistral-7B-v0.1"),
    ("tinyllama-1.1b", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    ("/models/Qwen2.5-7B/", "Qwen/Qwen2.5-7B"),
    ("phi-2", "microsoft/phi-2"),
])
def test_lookup(name: str, hf_id: str) -> None:
    entry = lookup(name)
    assert entry is not None and entry.hf_id == hf_id


@pytest.mark.parametrize("name", ["", "llama", "gpt-5", "qwen"])
def test_lookup_unknown_or_ambiguous(name: str) -> None:
    assert lookup(name) is None


@pytest.mark.slow
def test_against_transformers_on_meta_device() -> None:
    """The count equals transformers' own module tree (no weights: the meta device allocates nothing)."""
    import torch  # the training extra, which make test installs: a missing one is a failure, not a skip
    import transformers
    for hf_id in ("meta-llama/Llama-2-70b-hf", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen2.5-7B", "microsoft/phi-2", "google/gemma-2-27b"):
        config = {k: v for k, v in CATALOG[hf_id].config.items() if v is not None}
        model_type = config.pop("model_type")
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **config))
        assert sum(p.numel() for p in model.parameters()) == param_count(CATALOG[hf_id].arch), hf_id
