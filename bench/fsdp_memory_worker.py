"""One rank of the FSDP-vs-DDP memory benchmark (run under torchrun by ``bench/fsdp_memory_bench.py``).

A full fine-tune step of a small Llama (the ``llama-gqa`` shape of ``tests/planning/measure_cpu.py``: hidden
512, GQA 8/2 heads, MLP 1792, vocab 32000) in fp32 with AdamW on CPU/gloo, sharded with the sft recipe's own
``agent.workloads.fsdp.shard`` or wrapped in ``DistributedDataParallel``. The heap is read with glibc
``mallinfo2`` after every aten op (as ``measure_cpu`` does); every figure is bytes above the heap in use
before the model was built. Writes ``OUT/<sharding>-rank<R>.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

MODEL: dict[str, Any] = {"hidden_size": 512, "intermediate_size": 1792, "num_attention_heads": 8, "num_key_value_heads": 2,
         "vocab_size": 32000, "tie_word_embeddings": False}

_libc = ctypes.CDLL("libc.so.6")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]


_libc.mallinfo2.restype = _MallInfo2


def live_heap() -> int:
    """Bytes in use by malloc: small-block arena use plus mmapped large blocks."""
    info = _libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


class PeakHeap(TorchDispatchMode):
    """The largest live heap seen after any aten op inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.peak = live_heap()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, live_heap())
        return out


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sharding", choices=["ddp", "fsdp"], required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    from agent.workloads.dist import ranks_from_env
    from agent.workloads.fsdp import shard

    ranks = ranks_from_env()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    ids = torch.randint(0, MODEL["vocab_size"], (1, args.seq_len))
    baseline = live_heap()
    model: Any = LlamaForCausalLM(LlamaConfig(num_hidden_layers=args.layers, **MODEL)).float()
    model.config.use_cache = False
    params = sum(p.numel() for p in model.parameters())
    if args.sharding == "fsdp":
        shard(model, ranks, "gloo", compute_dtype=None, offload=False)
        wrapped = model
    else:
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        loss = wrapped(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # creates the optimizer states
    steady = live_heap() - baseline
    with PeakHeap() as peak:
        step()
    states = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1]
    result = {"rank": ranks.rank, "world_size": ranks.world_size, "sharding": args.sharding, "params": params,
              "layers": args.layers, "seq_len": args.seq_len, "model": MODEL,
              "param_bytes": _local_bytes(model.parameters()), "optimizer_state_bytes": _local_bytes(states),
              "steady_bytes": steady, "peak_bytes": peak.peak - baseline, "torch": torch.__version__}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{args.sharding}-rank{ranks.rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
