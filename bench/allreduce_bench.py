"""All-reduce check vs. a bare ``torch.distributed.all_reduce`` loop: same ranks, sizes, iterations, run.

Both run under torchrun on loopback with 2 ranks (gloo on this CPU machine, nccl where CUDA is present):
the shipped workload (``python -m ftwiz_workloads --spec``, copied the way the launcher ships it) and this
file run as a script (``--bare``: init, warm up, barrier, time the loop, mean time over ranks, nothing
else). They alternate (ABBA) for a few rounds and each size keeps its best busbw, so a burst of load from a
neighbour on the shared cores does not decide the ratio. Target: workload ≥ 0.95 × bare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 0.95
NPROC = 2
MB = 1 << 20


def run(args) -> list[dict]:
    """Measure both, ``rounds`` times alternating; one row per size (and a summary row)."""
    quick = bool(getattr(args, "quick", False))
    sizes = [1, 16, 64] if quick else [1, 4, 16, 64, 256]
    iterations, warmup, rounds = (10, 3, 2) if quick else (20, 5, 4)
    with tempfile.TemporaryDirectory(prefix="ftwiz-allreduce-bench-") as tmp:
        rundir = Path(tmp)
        shutil.copytree(REPO / "agent" / "workloads", rundir / "ftwiz_workloads", ignore=shutil.ignore_patterns("__pycache__"))
        spec = rundir / "job.json"
        spec.write_text(json.dumps({"workload": "allreduce", "sizes_mb": sizes, "iterations": iterations,
                                    "warmup_iterations": warmup, "run_id": "bench"}))
        workload: dict[int, list[float]] = {}
        bare: dict[int, list[float]] = {}
        bare_argv = [str(Path(__file__).resolve()), "--bare", "--sizes-mb", *map(str, sizes),
                     "--iterations", str(iterations), "--warmup", str(warmup)]
        for round_number in range(rounds):
            pair = [(workload, ["-m", "ftwiz_workloads", "--spec", str(spec)], "allreduce"), (bare, bare_argv, "bare")]
            for into, target, kind in pair if round_number % 2 == 0 else reversed(pair):  # ABBA: neither always goes first
                _collect(into, _torchrun(rundir, target), kind)
    rows = []
    backend = "nccl" if _has_cuda() else "gloo"
    for size_bytes in sorted(workload):
        value, baseline = max(workload[size_bytes]), max(bare.get(size_bytes, [0.0]))
        rows.append({
            "measure": f"allreduce busbw {size_bytes / MB:g} MB, {NPROC} ranks {backend}",
            "value": round(value, 4), "unit": "GB/s", "baseline": round(baseline, 4),
            "ratio": round(value / baseline, 3) if baseline else None, "target": f">= {TARGET_RATIO} x bare loop",
            "samples": [round(x, 4) for x in workload[size_bytes]], "baseline_samples": [round(x, 4) for x in bare.get(size_bytes, [])],
            "iterations": iterations, "rounds": rounds,
        })
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        rows.append({"measure": "allreduce busbw ratio, worst size", "value": min(ratios), "unit": "x bare loop",
                     "target": f">= {TARGET_RATIO}", "ratio": min(ratios)})
    return rows


def _collect(into: dict[int, list[float]], stdout: str, kind: str) -> None:
    for line in stdout.splitlines():
        start = line.find('{"ftwiz"')
        if start < 0:
            continue
        record = json.loads(line[start:])
        if record["ftwiz"] == kind:
            if kind == "allreduce" and not record["correct"]:
                raise RuntimeError(f"the workload reported a wrong sum at {record['size_bytes']} bytes")
            into.setdefault(int(record["size_bytes"]), []).append(float(record["busbw_gbps"]))


def _torchrun(rundir: Path, target: list[str]) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(rundir), OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={NPROC}",
            "--master-addr=127.0.0.1", f"--master-port={port}", *target]
    proc = subprocess.run(argv, env=env, cwd=rundir, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def bare_main(argv: list[str]) -> int:
    """The baseline: the plainest timed all_reduce loop, one JSON line per size from rank 0."""
    import time

    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--sizes-mb", type=float, nargs="+", required=True)
    parser.add_argument("--iterations", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    world = dist.get_world_size()
    for size_mb in args.sizes_mb:
        tensor = torch.ones(max(1, int(size_mb * MB) // 4), dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(tensor)
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iterations):
            dist.all_reduce(tensor)
        if cuda:
            torch.cuda.synchronize()
        seconds = torch.tensor([(time.perf_counter() - start) / args.iterations], dtype=torch.float64, device=device)
        dist.all_reduce(seconds)
        mean = seconds.item() / world
        size_bytes = tensor.numel() * 4
        busbw = size_bytes / mean / 1e9 * 2 * (world - 1) / world
        if dist.get_rank() == 0:
            print(json.dumps({"ftwiz": "bare", "size_bytes": size_bytes, "time_us": mean * 1e6, "busbw_gbps": busbw}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(bare_main(sys.argv[1:]))
