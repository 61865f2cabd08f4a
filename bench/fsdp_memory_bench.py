"""Per-rank memory of a full fine-tune step, FSDP beside DDP, on CPU/gloo (torchrun on loopback).

Each case starts ``bench/fsdp_memory_worker.py`` under torchrun with N ranks and reads what every rank
measured: the parameter and optimizer-state bytes it holds and its heap peak during one training step
(glibc ``mallinfo2`` after every aten op, above the heap before the model was built). The baseline of each
FSDP row is the DDP figure of the same world size measured in the same run; the target for model states is
1/N of DDP's (ZeRO-3: Rajbhandari et al. 2020, §5).

    .venv/bin/python -m bench fsdp_memory              # N = 2 and 4
    .venv/bin/python -m bench.fsdp_memory_bench --write tests/planning/data/fsdp_cpu_measured.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORLD_SIZES = (2, 4)


def measure(world_size: int, sharding: str, *, layers: int = 4, seq_len: int = 256) -> list[dict[str, Any]]:
    """Run one case; every rank's measurement, by rank."""
    with tempfile.TemporaryDirectory(prefix="fsdp-mem-") as out, socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={world_size}",
                "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "bench.fsdp_memory_worker",
                "--sharding", sharding, "--layers", str(layers), "--seq-len", str(seq_len), "--out", out]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{sharding} x{world_size} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return [json.loads((Path(out) / f"{sharding}-rank{r}.json").read_text()) for r in range(world_size)]


def cases(world_sizes=WORLD_SIZES) -> list[dict[str, Any]]:
    """Every rank of every (world size, sharding) case."""
    rows = []
    for n in world_sizes:
        for sharding in ("ddp", "fsdp"):
            rows.extend(measure(n, sharding))
    return rows


def table(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bench rows: per world size, FSDP's per-rank model states and peak beside DDP's (the worst rank of each)."""
    rows = []
    for n in sorted({r["world_size"] for r in ranks}):
        worst = {s: max((r for r in ranks if r["world_size"] == n and r["sharding"] == s), key=lambda r: r["peak_bytes"])
                 for s in ("ddp", "fsdp")}
        states = {s: (w["param_bytes"] + w["optimizer_state_bytes"]) / 1e6 for s, w in worst.items()}
        rows.append({"measure": f"full fine-tune, {n} ranks: params+AdamW states per rank, FSDP (baseline DDP)",
                     "value": round(states["fsdp"], 1), "unit": "MB", "baseline": round(states["ddp"], 1),
                     "ratio": round(states["fsdp"] / states["ddp"], 3), "target": f"<= {1 / n:.3f} + 1%"})
        peaks = {s: w["peak_bytes"] / 1e6 for s, w in worst.items()}
        rows.append({"measure": f"full fine-tune, {n} ranks: heap peak of a step per rank, FSDP (baseline DDP)",
                     "value": round(peaks["fsdp"], 1), "unit": "MB", "baseline": round(peaks["ddp"], 1),
                     "ratio": round(peaks["fsdp"] / peaks["ddp"], 3), "target": "< 1"})
    return rows


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``make bench`` entry: N = 2 (and 4 unless --quick)."""
    return table(cases((2,) if getattr(args, "quick", False) else WORLD_SIZES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fsdp_memory_bench", description=__doc__)
    parser.add_argument("--write", metavar="JSON", help="also write every rank's measurement here (the estimator's test data)")
    args = parser.parse_args(argv)
    ranks = cases()
    for row in table(ranks):
        print(row)
    if args.write:
        import platform

        import torch

        data = {"source": "measured on CPU by bench/fsdp_memory_bench.py (torchrun on loopback, gloo; glibc mallinfo2 after "
                          "every aten op); not a GPU measurement",
                "command": ".venv/bin/python -m bench.fsdp_memory_bench --write tests/planning/data/fsdp_cpu_measured.json",
                "environment": {"python": platform.python_version(), "torch": torch.__version__},
                "job": {"method": "full", "precision": "fp32", "optimizer": "adamw (torch, per-tensor on CPU)",
                        "gradient_checkpointing": False, "micro_batch_size": 1},
                "ranks": ranks}
        Path(args.write).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
