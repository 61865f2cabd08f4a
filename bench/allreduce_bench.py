"""All-reduce check vs. a bare ``torch.distributed.all_reduce`` loop: same ranks, sizes, iterations, run.

One torchrun job (2 ranks on loopback; gloo on this CPU machine, nccl where CUDA is present) runs this
file as a script with the workloads package on PYTHONPATH, copied the way the launcher ships it. For every
size and round it measures, back to back in the same processes:

- the workload: ``ftwiz_workloads.allreduce.measure`` — the very function behind the workload's
  ``allreduce`` lines (verify, warm up, barrier, timed loop, verify again, mean time over ranks);
- the bare loop: warm up, barrier, timed ``dist.all_reduce`` loop, mean time over ranks, nothing else.

The order alternates every round (ABBA), so load from neighbours on shared cores hits both alike; a size's
figures are medians over rounds. Small sizes get more iterations (each timed loop moves at least
``MIN_LOOP_MB`` per rank), so a loop lasts long enough that a scheduler hiccup on the shared cores is a
small part of it. Target: workload ≥ 0.95 × bare loop.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 0.95
NPROC = 2
MB = 1 << 20
MIN_LOOP_MB = 320  # per timed loop and rank: 1 MB runs 320 iterations, 64 MB and up the configured count


def loop_iterations(size_mb: float, iterations: int, min_loop_mb: float = MIN_LOOP_MB) -> int:
    """Iterations for one timed loop of ``size_mb``: ``iterations``, or more to move ``min_loop_mb``."""
    return max(iterations, -(-int(min_loop_mb) // max(1, int(size_mb))))


def run(args) -> list[dict]:
    """Run the paired measurement under torchrun; one row per size plus the worst-size ratio."""
    quick = bool(getattr(args, "quick", False))
    sizes = [1, 16] if quick else [1, 4, 16, 64, 256]
    iterations, warmup, rounds = (10, 3, 6) if quick else (20, 5, 6)
    min_loop_mb = 64 if quick else MIN_LOOP_MB
    with tempfile.TemporaryDirectory(prefix="ftwiz-allreduce-bench-") as tmp:
        rundir = Path(tmp)
        shutil.copytree(REPO / "agent" / "workloads", rundir / "ftwiz_workloads", ignore=shutil.ignore_patterns("__pycache__"))
        stdout = _torchrun(rundir, [str(Path(__file__).resolve()), "--worker", "--sizes-mb", *map(str, sizes),
                                    "--iterations", str(iterations), "--warmup", str(warmup), "--rounds", str(rounds),
                                    "--min-loop-mb", str(min_loop_mb)])
    samples: dict[tuple[str, int], list[float]] = {}
    backend = "gloo"
    for line in stdout.splitlines():
        if line.startswith('{"bench"'):
            record = json.loads(line)
            backend = record["backend"]
            samples.setdefault((record["bench"], record["size_bytes"]), []).append(record["busbw_gbps"])
    rows = []
    for size_bytes in sorted({size for _, size in samples}):
        ours, bare = samples[("workload", size_bytes)], samples[("bare", size_bytes)]
        value, baseline = statistics.median(ours), statistics.median(bare)
        rows.append({
            "measure": f"allreduce busbw {size_bytes / MB:g} MB, {NPROC} ranks {backend}",
            "value": round(value, 4), "unit": "GB/s", "baseline": round(baseline, 4),
            "ratio": round(value / baseline, 3) if baseline else None, "target": f">= {TARGET_RATIO} x bare loop",
            "samples": [round(x, 4) for x in ours], "baseline_samples": [round(x, 4) for x in bare],
            "iterations": loop_iterations(size_bytes / MB, iterations, min_loop_mb), "rounds": rounds,
        })
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        rows.append({"measure": "allreduce busbw ratio, worst size", "value": min(ratios), "unit": "x bare loop",
                     "target": f">= {TARGET_RATIO}", "ratio": min(ratios)})
    return rows


def _torchrun(rundir: Path, target: list[str]) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(rundir), OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={NPROC}",
            "--master-addr=127.0.0.1", f"--master-port={port}", *target]
    proc = subprocess.run(argv, env=env, cwd=rundir, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def worker_main(argv: list[str]) -> int:
    """One rank of the paired measurement (started by torchrun)."""
    import torch
    import torch.distributed as dist
    from ftwiz_workloads.allreduce import bus_factor, measure

    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--sizes-mb", type=float, nargs="+", required=True)
    parser.add_argument("--iterations", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--min-loop-mb", type=float, default=MIN_LOOP_MB)
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    world, rank = dist.get_world_size(), dist.get_rank()

    def report(who: str, size_bytes: int, seconds: float) -> None:
        if rank == 0:
            busbw = size_bytes / seconds / 1e9 * bus_factor(world)
            print(json.dumps({"bench": who, "backend": backend, "size_bytes": size_bytes, "busbw_gbps": busbw}), flush=True)

    for size_mb in args.sizes_mb:
        iterations = loop_iterations(size_mb, args.iterations, args.min_loop_mb)
        for round_number in range(args.rounds):
            order = ("workload", "bare") if round_number % 2 == 0 else ("bare", "workload")
            for who in order:
                if who == "workload":
                    result = measure(size_mb, rank=rank, device=device, iterations=iterations, warmup=args.warmup)
                    assert result.correct, f"wrong all-reduce sum at {size_mb} MB"
                    report(who, result.size_bytes, result.seconds)
                else:
                    size_bytes, seconds = _bare(size_mb, device, iterations, args.warmup)
                    report(who, size_bytes, seconds)
    dist.destroy_process_group()
    return 0


def _bare(size_mb: float, device, iterations: int, warmup: int) -> tuple[int, float]:
    """The plainest timed loop: bytes and mean seconds per all_reduce (mean over ranks)."""
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    tensor = torch.ones(max(1, int(size_mb * MB) // 4), dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    if cuda:
        torch.cuda.synchronize(device)
    seconds = torch.tensor([(time.perf_counter() - start) / iterations], dtype=torch.float64, device=device)
    dist.all_reduce(seconds)
    return tensor.numel() * 4, seconds.item() / dist.get_world_size()


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
