"""Model architectures: parse an HF ``config.json`` dict, count parameters exactly, and a built-in catalog.

Pure: the caller reads a local ``config.json`` (or fetches one from the hub) and passes the parsed dict
to :func:`arch_from_hf_config`; nothing here touches the disk or the network.

The parameter count follows the module layout of the ``transformers`` implementations
(``LlamaForCausalLM``, ``MistralForCausalLM``, ``MixtralForCausalLM``, ``Qwen2ForCausalLM``,
``Gemma2ForCausalLM``, ``PhiForCausalLM``, ``GPTNeoXForCausalLM``, ``GPT2LMHeadModel``): embeddings,
attention projections with grouped-query K/V, the gated (SwiGLU/GeGLU: gate, up, down) or plain
(fc1, fc2) MLP, MoE experts plus router, norms, and the LM head unless tied to the embeddings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ArchError",
    "CATALOG",
    "CatalogEntry",
    "Linear",
    "ModelArch",
    "arch_from_hf_config",
    "linear_layers",
    "lookup",
    "param_count",
    "param_breakdown",
]


class ArchError(ValueError):
    """An HF config dict that cannot be turned into a :class:`ModelArch`; the message names key and fix."""


class ModelArch(BaseModel):
    """The facts of a decoder-only causal LM that memory planning needs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_type: str = Field(description="HF ``model_type``, e.g. 'llama', 'mixtral', 'phi'.")
    hidden_size: int = Field(gt=0, description="Width of the residual stream (h).")
    intermediate_size: int = Field(gt=0, description="MLP inner width (per expert for MoE).")
    num_hidden_layers: int = Field(gt=0, description="Decoder layers (L).")
    num_attention_heads: int = Field(gt=0, description="Query heads (a).")
    num_key_value_heads: int = Field(gt=0, description="K/V heads (GQA); equal to the query heads for MHA.")
    vocab_size: int = Field(gt=0, description="Vocabulary size (V).")
    tie_word_embeddings: bool = Field(False, description="LM head shares the input embedding matrix.")
    head_dim: Optional[int] = Field(None, gt=0, description="Per-head width when the config sets it (Gemma); else h / a.")
    num_local_experts: int = Field(0, ge=0, description="MoE experts per layer; 0 for a dense model.")
    num_experts_per_tok: int = Field(0, ge=0, description="Experts each token is routed to (top-k).")
    mlp: Literal["gated", "plain"] = Field("gated", description="gated: gate/up/down (SwiGLU, GeGLU); plain: fc1/fc2 (Phi, GPT-NeoX, GPT-2).")
    norm: Literal["rms", "layer"] = Field("rms", description="RMSNorm (weight only) or LayerNorm (weight and bias).")
    norms_per_layer: int = Field(2, ge=1, description="Norm modules per decoder layer (Gemma-2: 4, Phi: 1).")
    qk_norm: bool = Field(False, description="Per-head RMSNorm on queries and keys (Qwen3, Gemma-3).")
    qkv_bias: bool = Field(False, description="Bias on the q/k/v projections (Qwen2, Phi, GPT-NeoX).")
    o_bias: bool = Field(False, description="Bias on the attention output projection.")
    mlp_bias: bool = Field(False, description="Bias on the MLP projections.")
    lm_head_bias: bool = Field(False, description="Bias on the LM head (Phi-2).")
    learned_positions: int = Field(0, ge=0, description="Rows of a learned position embedding (GPT-2); 0 with RoPE.")

    @property
    def head_size(self) -> int:
        """Per-head width: ``head_dim`` when set, else ``hidden_size // num_attention_heads``."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        """Output width of the query projection (a × head size)."""
        return self.num_attention_heads * self.head_size

    @property
    def kv_dim(self) -> int:
        """Output width of each of the key and value projections (kv heads × head size)."""
        return self.num_key_value_heads * self.head_size

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.num_local_experts > 0


@dataclass(frozen=True)
class Linear:
    """One kind of linear projection inside a decoder layer."""

    name: str
    """Module name as HF/PEFT spell it, e.g. 'q_proj'."""
    in_features: int
    out_features: int
    count: int = 1
    """How many of it per layer (the number of experts for MoE expert projections)."""
    bias: bool = False
    aliases: tuple[str, ...] = ()
    """Other names that select it in LoRA ``target_modules`` (e.g. 'gate_proj' for Mixtral's 'w1')."""

    @property
    def weight_params(self) -> int:
        """Weight elements of all ``count`` copies."""
        return self.in_features * self.out_features * self.count


def linear_layers(arch: ModelArch) -> list[Linear]:
    """The linear projections of one decoder layer, with in/out widths (GQA-aware), in HF module names.

    Names follow the transformers implementation of the family so PEFT ``target_modules`` match them;
    the Llama names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj) are accepted as
    aliases everywhere.
    """
    h, i = arch.hidden_size, arch.intermediate_size
    if arch.model_type == "gpt2":
        attn = [
            Linear("c_attn", h, arch.q_dim + 2 * arch.kv_dim, bias=True, aliases=("q_proj", "k_proj", "v_proj")),
            Linear("c_proj", arch.q_dim, h, bias=True, aliases=("o_proj",)),
        ]
    elif arch.model_type == "gpt_neox":
        attn = [
            Linear("query_key_value", h, arch.q_dim + 2 * arch.kv_dim, bias=True, aliases=("q_proj", "k_proj", "v_proj")),
            Linear("dense", arch.q_dim, h, bias=True, aliases=("o_proj",)),
        ]
    else:
        o_name = "dense" if arch.model_type == "phi" else "o_proj"
        attn = [
            Linear("q_proj", h, arch.q_dim, bias=arch.qkv_bias),
            Linear("k_proj", h, arch.kv_dim, bias=arch.qkv_bias),
            Linear("v_proj", h, arch.kv_dim, bias=arch.qkv_bias),
            Linear(o_name, arch.q_dim, h, bias=arch.o_bias, aliases=("o_proj",) if o_name != "o_proj" else ()),
        ]
    if arch.is_moe:
        e = arch.num_local_experts
        mlp = [
            Linear("w1", h, i, count=e, aliases=("gate_proj",)),
            Linear("w3", h, i, count=e, aliases=("up_proj",)),
            Linear("w2", i, h, count=e, aliases=("down_proj",)),
            Linear("gate", h, e),  # the router
        ]
    elif arch.mlp == "gated":
        mlp = [
            Linear("gate_proj", h, i, bias=arch.mlp_bias),
            Linear("up_proj", h, i, bias=arch.mlp_bias),
            Linear("down_proj", i, h, bias=arch.mlp_bias),
        ]
    else:
        names = {"gpt2": ("c_fc", "c_proj_mlp"), "gpt_neox": ("dense_h_to_4h", "dense_4h_to_h")}.get(arch.model_type, ("fc1", "fc2"))
        mlp = [
            Linear(names[0], h, i, bias=arch.mlp_bias, aliases=("up_proj", "fc1")),
            Linear(names[1], i, h, bias=arch.mlp_bias, aliases=("down_proj", "fc2")),
        ]
    return attn + mlp


def param_breakdown(arch: ModelArch) -> dict[str, int]:
    """Exact parameter counts by group: embeddings, attention, mlp, norms, lm_head (all layers summed).

    ``lm_head`` is 0 when tied to the embeddings (the matrix is stored once).
    """
    h, layers = arch.hidden_size, arch.num_hidden_layers
    norm_params = h * (2 if arch.norm == "layer" else 1)
    attn = mlp = 0
    for lin in linear_layers(arch):
        params = lin.weight_params + (lin.out_features * lin.count if lin.bias else 0)
        if lin.name in ("q_proj", "k_proj", "v_proj", "o_proj", "dense", "c_attn", "c_proj", "query_key_value"):
            attn += params
        else:
            mlp += params
    if arch.qk_norm:
        attn += 2 * arch.head_size
    return {
        "embeddings": arch.vocab_size * h + arch.learned_positions * h,
        "attention": attn * layers,
        "mlp": mlp * layers,
        "norms": (arch.norms_per_layer * layers + 1) * norm_params,
        "lm_head": 0 if arch.tie_word_embeddings else arch.vocab_size * h + (arch.vocab_size if arch.lm_head_bias else 0),
    }


def param_count(arch: ModelArch) -> int:
    """Exact number of parameters stored in the checkpoint (tied matrices counted once)."""
    return sum(param_breakdown(arch).values())


# --------------------------------------------------------------------------- parsing

_FAMILIES: dict[str, dict[str, Any]] = {
    # model_type: architecture flags the config.json does not spell out
    "llama": {},
    "mistral": {},
    "mixtral": {},
    "qwen2": {"qkv_bias": True},
    "qwen3": {"qk_norm": True},
    "gemma": {},
    "gemma2": {"norms_per_layer": 4},
    "gemma3_text": {"norms_per_layer": 4, "qk_norm": True},
    "phi": {"mlp": "plain", "norm": "layer", "norms_per_layer": 1, "qkv_bias": True, "o_bias": True, "mlp_bias": True, "lm_head_bias": True},
    "phi3": {},
    "gpt_neox": {"mlp": "plain", "norm": "layer", "norms_per_layer": 2, "qkv_bias": True, "o_bias": True, "mlp_bias": True},
    "gpt2": {"mlp": "plain", "norm": "layer", "norms_per_layer": 2, "qkv_bias": True, "o_bias": True, "mlp_bias": True},
}

_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text", "gpt2"}


def _first(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def arch_from_hf_config(config: dict[str, Any]) -> ModelArch:
    """Build a :class:`ModelArch` from a parsed HF ``config.json`` dict.

    Understands the Llama/Mistral/Mixtral/Qwen2/Qwen3/Gemma/Gemma-2/Phi/Phi-3 key names and the
    GPT-2/GPT-NeoX spellings (``n_embd``, ``n_layer``, ``n_head``, ``n_inner``). A multimodal config's
    ``text_config`` is used when present. Unknown ``model_type`` values are read as Llama-like.
    Raises :class:`ArchError` naming the missing key.
    """
    if not isinstance(config, dict):
        raise ArchError(f"expected the dict of a config.json, got {type(config).__name__}")
    if isinstance(config.get("text_config"), dict):
        merged = dict(config["text_config"])
        merged.setdefault("tie_word_embeddings", config.get("tie_word_embeddings"))
        config = merged
    model_type = str(config.get("model_type") or "llama")
    family = dict(_FAMILIES.get(model_type, {}))
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(config, "num_attention_heads", "n_head")
    vocab = _first(config, "vocab_size", "padded_vocab_size")
    for key, value in (("hidden_size", hidden), ("num_hidden_layers", layers), ("num_attention_heads", heads), ("vocab_size", vocab)):
        if value is None:
            raise ArchError(
                f"config.json has no {key!r} (nor its GPT-2 spelling); pass the config.json of a decoder-only "
                "causal LM (Llama, Mistral, Mixtral, Qwen2, Gemma, Phi, GPT-NeoX, GPT-2 families)"
            )
    mlp_kind = family.get("mlp", "gated")
    intermediate = _first(config, "intermediate_size", "n_inner", "ffn_hidden_size", "moe_intermediate_size")
    if intermediate is None:
        if mlp_kind == "plain":
            intermediate = 4 * int(hidden)
        else:
            raise ArchError("config.json has no 'intermediate_size'; it is needed to size the MLP")
    kv_heads = _first(config, "num_key_value_heads", "multi_query_group_num") or heads
    experts = _first(config, "num_local_experts", "num_experts") or 0
    tied = config.get("tie_word_embeddings")
    if tied is None:
        tied = model_type in _TIED_BY_DEFAULT
    if "attention_bias" in config and model_type not in ("phi", "gpt_neox", "gpt2"):
        family["qkv_bias"] = bool(config["attention_bias"])
        family["o_bias"] = bool(config["attention_bias"])
    if "mlp_bias" in config:
        family["mlp_bias"] = bool(config["mlp_bias"])
    if model_type == "gpt2":
        family["learned_positions"] = int(config.get("n_positions") or config.get("max_position_embeddings") or 1024)
    try:
        return ModelArch(
            model_type=model_type,
            hidden_size=int(hidden),
            intermediate_size=int(intermediate),
            num_hidden_layers=int(layers),
            num_attention_heads=int(heads),
            num_key_value_heads=int(kv_heads),
            vocab_size=int(vocab),
            tie_word_embeddings=bool(tied),
            head_dim=int(config["head_dim"]) if config.get("head_dim") else None,
            num_local_experts=int(experts),
            num_experts_per_tok=int(config.get("num_experts_per_tok") or (2 if experts else 0)),
            **family,
        )
    except (TypeError, ValueError) as exc:
        raise ArchError(f"config.json values are not usable: {exc}") from None


# --------------------------------------------------------------------------- catalog


class CatalogEntry(BaseModel):
    """A well-known model: its published config.json facts and its published size."""

    model_config = ConfigDict(frozen=True)

    hf_id: str = Field(description="Hugging Face repository id.")
    config: dict[str, Any] = Field(description="The architecture keys of the published config.json.")
    published_params: float = Field(description="Published total parameter count.")
    source: str = Field(description="Where the published count comes from.")

    @property
    def arch(self) -> ModelArch:
        """The parsed architecture."""
        return arch_from_hf_config(self.config)

    @property
    def short_name(self) -> str:
        """The repository name without the organisation, e.g. 'Llama-2-7b-hf'."""
        return self.hf_id.split("/", 1)[-1]


def _llama(h: int, i: int, layers: int, heads: int, kv: int, vocab: int, tied: bool = False, model_type: str = "llama", **extra: Any) -> dict[str, Any]:
    return {
        "model_type": model_type, "hidden_size": h, "intermediate_size": i, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab, "tie_word_embeddings": tied, **extra,
    }


_SAFETENSORS = "HF safetensors metadata count, as quoted in public repositories (checked with the search tool)"
_QWEN_CARD = "Qwen model card, 'Number of Parameters'"

_ENTRIES = [
    # Llama 2 (config.json: rms_norm_eps 1e-5, no attention bias)
    ("meta-llama/Llama-2-7b-hf", _llama(4096, 11008, 32, 32, 32, 32000), 6_738_415_616, _SAFETENSORS),
    ("meta-llama/Llama-2-13b-hf", _llama(5120, 13824, 40, 40, 40, 32000), 13_015_864_320, _SAFETENSORS),
    ("meta-llama/Llama-2-70b-hf", _llama(8192, 28672, 80, 64, 8, 32000), 68_976_648_192, _SAFETENSORS),
    # Llama 3 / 3.1 share the architecture (vocab 128256, GQA 8 KV heads)
    ("meta-llama/Meta-Llama-3-8B", _llama(4096, 14336, 32, 32, 8, 128256), 8_030_261_248, _SAFETENSORS),
    ("meta-llama/Meta-Llama-3-70B", _llama(8192, 28672, 80, 64, 8, 128256), 70_553_706_496, _SAFETENSORS),
    ("meta-llama/Llama-3.1-8B", _llama(4096, 14336, 32, 32, 8, 128256), 8_030_261_248, _SAFETENSORS),
    ("meta-llama/Llama-3.1-70B", _llama(8192, 28672, 80, 64, 8, 128256), 70_553_706_496, _SAFETENSORS),
    ("meta-llama/Llama-3.2-1B", _llama(2048, 8192, 16, 32, 8, 128256, tied=True, head_dim=64), 1_235_814_400, _SAFETENSORS),
    ("meta-llama/Llama-3.2-3B", _llama(3072, 8192, 28, 24, 8, 128256, tied=True, head_dim=128), 3_212_749_824, _SAFETENSORS),
    ("mistralai/Mistral-7B-v0.1", _llama(4096, 14336, 32, 32, 8, 32000, model_type="mistral"), 7_241_732_096, _SAFETENSORS),
    ("mistralai/Mixtral-8x7B-v0.1", _llama(4096, 14336, 32, 32, 8, 32000, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2), 46_702_792_704, _SAFETENSORS),
    # Qwen2.5: q/k/v bias; the small ones tie the embeddings
    ("Qwen/Qwen2.5-0.5B", _llama(896, 4864, 24, 14, 2, 151936, tied=True, model_type="qwen2"), 0.49e9, _QWEN_CARD),
    ("Qwen/Qwen2.5-1.5B", _llama(1536, 8960, 28, 12, 2, 151936, tied=True, model_type="qwen2"), 1.54e9, _QWEN_CARD),
    ("Qwen/Qwen2.5-3B", _llama(2048, 11008, 36, 16, 2, 151936, tied=True, model_type="qwen2"), 3.09e9, _QWEN_CARD),
    ("Qwen/Qwen2.5-7B", _llama(3584, 18944, 28, 28, 4, 152064, model_type="qwen2"), 7.61e9, _QWEN_CARD),
    ("Qwen/Qwen2.5-14B", _llama(5120, 13824, 48, 40, 8, 152064, model_type="qwen2"), 14.7e9, _QWEN_CARD),
    ("Qwen/Qwen2.5-32B", _llama(5120, 27648, 64, 40, 8, 152064, model_type="qwen2"), 32.5e9, _QWEN_CARD),
    ("Qwen/Qwen2.5-72B", _llama(8192, 29568, 80, 64, 8, 152064, model_type="qwen2"), 72.7e9, _QWEN_CARD),
    ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", _llama(2048, 5632, 22, 32, 4, 32000), 1_100_048_384, _SAFETENSORS),
    (
        "microsoft/phi-2",
        {"model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": None, "vocab_size": 51200, "tie_word_embeddings": False,
         "partial_rotary_factor": 0.4},
        2_779_683_840, _SAFETENSORS,
    ),
    # Gemma 2: head_dim set explicitly, 4 norms per layer, tied embeddings, 256k vocab
    ("google/gemma-2-2b", _llama(2304, 9216, 26, 8, 4, 256000, tied=True, model_type="gemma2", head_dim=256), 2_614_341_888, _SAFETENSORS),
    ("google/gemma-2-9b", _llama(3584, 14336, 42, 16, 8, 256000, tied=True, model_type="gemma2", head_dim=256), 9_241_705_984, _SAFETENSORS),
    ("google/gemma-2-27b", _llama(4608, 36864, 46, 32, 16, 256000, tied=True, model_type="gemma2", head_dim=128), 27_227_128_320, _SAFETENSORS),
]

CATALOG: dict[str, CatalogEntry] = {
    hf_id: CatalogEntry(hf_id=hf_id, config=config, published_params=float(params), source=source)
    for hf_id, config, params, source in _ENTRIES
}
"""Built-in catalog keyed by HF id: published config.json architecture keys and published sizes."""


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


_OPTIONAL_PREFIXES = ("meta",)
_OPTIONAL_SUFFIXES = ("hf", "v0.1", "chatv1.0")


def _variants(name: str) -> set[str]:
    """Squashed spellings of a model name with the usual optional prefixes and suffixes dropped."""
    out = {_squash(name)}
    for prefix in _OPTIONAL_PREFIXES:
        out |= {v[len(prefix):] for v in out if v.startswith(prefix)}
    for suffix in _OPTIONAL_SUFFIXES:
        out |= {v[: -len(suffix)] for v in out if v.endswith(suffix)}
    return {v for v in out if v}


def lookup(model_id_or_name: str) -> Optional[CatalogEntry]:
    """Find a catalog model by HF id or short name, case-insensitively.

    Matches, in order: the exact id; the id ignoring case; the repository name without its
    organisation ('Llama-2-7b-hf'); the same with punctuation ignored and the usual 'Meta-' prefix and
    '-hf'/'-v0.1' suffixes optional ('llama2-7b', 'llama-3-8b', 'mistral-7b'); this also matches the
    last path component of a local directory named after the model ('/models/Qwen2.5-7B').
    Returns None when nothing matches, or when several models of different architectures do.
    """
    text = model_id_or_name.strip().rstrip("/")
    if not text:
        return None
    if text in CATALOG:
        return CATALOG[text]
    lowered = text.lower()
    for hf_id, entry in CATALOG.items():
        if hf_id.lower() == lowered:
            return entry
    tail = lowered.rsplit("/", 1)[-1]
    exact = [e for e in CATALOG.values() if e.short_name.lower() == tail]
    if len(exact) == 1:
        return exact[0]
    wanted = _variants(tail)
    found = [e for e in CATALOG.values() if wanted & _variants(e.short_name)]
    # Llama-3 and Llama-3.1 share one architecture: any of them answers the same question
    if found and len({e.arch for e in found}) == 1:
        return found[0]
    return None
