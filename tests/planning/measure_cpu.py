"""Measure the memory of real HF training steps on CPU and write ``data/cpu_measured.json``.

A developer tool, not a test (pytest does not collect it): it needs torch, transformers, peft and
bitsandbytes and took about 40 minutes on two shared cores for its 72 steps. Run from the repository root:

    .venv/bin/python -m tests.planning.measure_cpu

What it measures, for small models with the proportions of real ones (bf16, SDPA attention):

- ``param_bytes``: bytes of every parameter storage after loading (NF4 packing and quant state
  included for QLoRA: bitsandbytes quantizes on CPU too);
- ``saved_bytes``: tensors autograd saved for backward by the end of the forward, storages
  counted once, parameters excluded (torch.autograd.graph.saved_tensors_hooks);
- ``fwd_end_bytes``, ``peak_fwd_bwd_bytes``, ``peak_step_bytes``: live heap above the steady-state
  baseline (weights, optimizer states; gradients freed with ``zero_grad(set_to_none=True)``) at the end of
  the forward, at the peak of forward + backward, and at the peak including the optimizer step.
  The heap is read with glibc ``mallinfo2`` (in-use + mmapped bytes) after every aten op through a
  ``TorchDispatchMode``, so the peak is the largest live total seen between ops.

These are CPU figures: they measure what the PyTorch/transformers/peft code allocates, which is what
``torch.cuda.max_memory_allocated`` counts on a GPU, but not CUDA kernels' private workspaces
(cuBLAS, flash attention) nor the caching allocator's rounding; CPU kernels may also allocate their
own temporaries. Nothing here is a GPU measurement.
"""

from __future__ import annotations

import ctypes
import gc
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

OUT = Path(__file__).with_name("data") / "cpu_measured.json"

MODELS: dict[str, dict[str, Any]] = {
    # Llama-2-style MHA, MLP ratio 11008/4096
    "llama-mha": {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8,
                  "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": False},
    # Llama-3/Mistral-style GQA (4 query heads per KV head), MLP ratio 14336/4096
    "llama-gqa": {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1792, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "vocab_size": 32000, "tie_word_embeddings": False},
    # Qwen2.5-style: q/k/v bias, tied embeddings, large vocabulary
    "qwen2-tied": {"model_type": "qwen2", "hidden_size": 448, "intermediate_size": 2432, "num_attention_heads": 7,
                   "num_key_value_heads": 1, "vocab_size": 151936, "tie_word_embeddings": True},
    # Phi-2-style: parallel attention and plain GELU MLP, LayerNorm, biases
    "phi": {"model_type": "phi", "hidden_size": 640, "intermediate_size": 2560, "num_attention_heads": 8,
            "num_key_value_heads": 8, "vocab_size": 51200, "tie_word_embeddings": False, "partial_rotary_factor": 0.4},
}

LORA_QV = ["q_proj", "v_proj"]
LORA_ALL = "all-linear"


def _cases() -> list[dict[str, Any]]:
    cases = []
    for model in MODELS:
        for method, targets in (("full", None), ("lora", LORA_QV), ("lora", LORA_ALL), ("qlora", LORA_QV)):
            for gc_on in (False, True):
                for layers in (2, 4):
                    cases.append({"model": model, "method": method, "target_modules": targets, "gradient_checkpointing": gc_on,
                                  "layers": layers, "micro_batch_size": 1, "seq_len": 512})
    # batch and length scaling on one model
    for method, targets in (("lora", LORA_QV), ("full", None)):
        for gc_on in (False, True):
            for b, s in ((2, 512), (1, 1024)):
                cases.append({"model": "llama-gqa", "method": method, "target_modules": targets, "gradient_checkpointing": gc_on,
                              "layers": 4, "micro_batch_size": b, "seq_len": s})
    return cases


# --------------------------------------------------------------------------- heap accounting

_libc = ctypes.CDLL("libc.so.6")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_libc.mallinfo2.restype = _MallInfo2


def live_heap() -> int:
    """Bytes in use by malloc: small-block arena use plus mmapped large blocks."""
    info = _libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


class PeakHeap(TorchDispatchMode):
    """Samples the live heap after every aten op and keeps the maximum."""

    def __init__(self) -> None:
        super().__init__()
        self.peak = live_heap()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, live_heap())
        return out


def _storage_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


# --------------------------------------------------------------------------- model building

_SAVED_DIRS: dict[tuple[str, int], str] = {}


def _hf_config(model: str, layers: int):
    from transformers import AutoConfig

    cfg = dict(MODELS[model])
    model_type = cfg.pop("model_type")
    return AutoConfig.for_model(model_type, num_hidden_layers=layers, **cfg)


def _build(case: dict[str, Any]):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    torch.manual_seed(0)
    config = _hf_config(case["model"], case["layers"])
    method = case["method"]
    if method == "full":
        model = AutoModelForCausalLM.from_config(config).to(torch.float32)  # AMP: fp32 master weights
    elif method == "lora":
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    else:
        key = (case["model"], case["layers"])
        if key not in _SAVED_DIRS:
            path = tempfile.mkdtemp(prefix="ftwiz-measure-")
            AutoModelForCausalLM.from_config(config).to(torch.bfloat16).save_pretrained(path)
            _SAVED_DIRS[key] = path
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                   bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(_SAVED_DIRS[key], quantization_config=quant, dtype=torch.bfloat16, device_map="cpu")
    if case["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
    if method != "full":
        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=case["target_modules"], task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    model.config.use_cache = False
    model.train()
    return model


def measure(case: dict[str, Any]) -> dict[str, Any]:
    """One training step measured after a warm-up step (steady state: optimizer states exist)."""
    model = _build(case)
    params = [p for p in model.parameters()]
    trainable = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)
    b, s = case["micro_batch_size"], case["seq_len"]
    ids = torch.randint(0, model.config.vocab_size, (b, s))
    amp = case["method"] == "full"

    def forward() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            return model(input_ids=ids, labels=ids).loss

    forward().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    gc.collect()

    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in param_ptrs:
            saved[st.data_ptr()] = st.nbytes()
        return t

    baseline = live_heap()
    started = time.perf_counter()
    mode = PeakHeap()
    with mode:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = forward()
        fwd_end = live_heap()
        loss.backward()
        del loss
        peak_fwd_bwd = mode.peak
        optimizer.step()
    peak_step = mode.peak
    grads = _storage_bytes(p.grad for p in trainable if p.grad is not None)
    seconds = time.perf_counter() - started
    state_bytes = _storage_bytes(v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    result = dict(case)
    result.update({
        "param_bytes": _storage_bytes(params),
        "trainable_params": sum(p.numel() for p in trainable),
        "optimizer_state_bytes": state_bytes,
        "grad_bytes": grads,
        "saved_bytes": sum(saved.values()),
        "fwd_end_bytes": fwd_end - baseline,
        "peak_fwd_bwd_bytes": peak_fwd_bwd - baseline,
        "peak_step_bytes": peak_step - baseline,
        "seconds": round(seconds, 2),
    })
    del model, optimizer
    gc.collect()
    return result


def main() -> None:
    import bitsandbytes
    import peft
    import transformers

    torch.set_num_threads(2)
    rows = []
    for case in _cases():
        row = measure(case)
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("model", "method", "target_modules", "gradient_checkpointing", "layers",
                                               "micro_batch_size", "seq_len", "saved_bytes", "peak_fwd_bwd_bytes", "seconds")}), flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "source": "measured on CPU by tests/planning/measure_cpu.py (saved_tensors_hooks + glibc mallinfo2 after every aten op); "
                  "not a GPU measurement",
        "command": ".venv/bin/python -m tests.planning.measure_cpu",
        "environment": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
                        "peft": peft.__version__, "bitsandbytes": bitsandbytes.__version__, "machine": platform.machine(),
                        "processor": platform.processor()},
        "lora": {"r": 16, "lora_alpha": 32, "lora_dropout": 0.05},
        "precision": "full: fp32 weights + torch.autocast(bfloat16) (AMP); lora: bf16 model, PEFT adapters in fp32 "
                     "(autocast_adapter_dtype default); qlora: bitsandbytes NF4 + double quant, compute bf16, "
                     "no prepare_model_for_kbit_training",
        "optimizer": "torch.optim.AdamW (fp32 states), zero_grad(set_to_none=True)",
        "models": MODELS,
        "rows": rows,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
