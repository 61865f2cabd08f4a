"""The all-reduce check: a size sweep with verified sums and nccl-tests bandwidth figures.

Per size: a float32 tensor filled with ``rank + 1`` is summed and checked against n(n+1)/2 on every
element; then ``warmup_iterations`` untimed and ``iterations`` timed all-reduces (barrier first, CUDA
synchronised around the loop); then a second verified all-reduce. Every rank's verdict and time are
reduced, so all ranks agree: rank 0 emits one ``allreduce`` line per size and prints a table, and every
rank exits 3 when any element on any rank was wrong. With ``pause_s``, every rank waits that long
before the next size (a long soak that keeps the links in use without keeping the cores busy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .dist import Ranks, device_for
from .errors import EXIT_VERIFY_FAILED, report_error
from .protocol import emit
from .spec import Spec

MB = 1 << 20  # sizes follow nccl-tests: "1M" is 1048576 bytes
FLOAT_BYTES = 4


def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n."""
    return 2.0 * (world_size - 1) / world_size if world_size > 1 else 1.0


@dataclass(frozen=True)
class SizeResult:
    """One size of the sweep, agreed by every rank: bytes, mean seconds per all-reduce, verdict."""

    size_bytes: int
    seconds: float
    correct: bool
    world_size: int

    @property
    def algbw_gbps(self) -> float:
        """nccl-tests algbw: bytes / time, in GB/s (1e9)."""
        return self.size_bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def busbw_gbps(self) -> float:
        """nccl-tests all-reduce busbw: algbw x 2(n-1)/n."""
        return self.algbw_gbps * bus_factor(self.world_size)


def run(spec: Spec, ranks: Ranks, backend: str) -> int:
    """Sweep ``spec['sizes_mb']``; return the process exit code."""
    import torch.distributed as dist

    device = device_for(backend, ranks)
    world = dist.get_world_size()
    iterations, warmup = int(spec["iterations"]), int(spec["warmup_iterations"])
    pause_s = float(spec["pause_s"])
    if ranks.is_main:
        print(f"# ftwiz all-reduce: world_size={world} backend={backend} iterations={iterations} warmup={warmup}", flush=True)
        print(f"# {'size(B)':>12} {'time(us)':>11} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}  correct", flush=True)
    all_correct = True
    for step, size_mb in enumerate(spec["sizes_mb"], 1):
        result = measure(size_mb, rank=ranks.rank, device=device, iterations=iterations, warmup=warmup)
        all_correct = all_correct and result.correct
        emit("heartbeat", rank=ranks.rank, step=step, time=round(time.time(), 3))
        if ranks.is_main:
            emit(
                "allreduce", rank=0, size_bytes=result.size_bytes, world_size=world, iterations=iterations,
                time_us=round(result.seconds * 1e6, 3), algbw_gbps=round(result.algbw_gbps, 6),
                busbw_gbps=round(result.busbw_gbps, 6), correct=result.correct,
            )
            print(f"  {result.size_bytes:>12} {result.seconds * 1e6:>11.1f} {result.algbw_gbps:>12.3f} "
                  f"{result.busbw_gbps:>12.3f}  {'yes' if result.correct else 'NO'}", flush=True)
        if pause_s and step < len(spec["sizes_mb"]):
            time.sleep(pause_s)
    if not all_correct:
        report_error(
            f"all-reduce returned wrong sums (expected {world * (world + 1) // 2} in every element on every rank): "
            "a rank, NIC or NCCL transport is corrupting data; rerun with NCCL_DEBUG=INFO and check the failing size",
            rank=ranks.rank,
        )
        return EXIT_VERIFY_FAILED
    emit("done", rank=ranks.rank, status="ok")
    return 0


def measure(size_mb: float, *, rank: int, device, iterations: int, warmup: int) -> SizeResult:
    """Verify, warm up, time and verify again one message size; every rank returns the same result."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    elements = max(1, int(size_mb * MB) // FLOAT_BYTES)
    tensor = torch.empty(elements, dtype=torch.float32, device=device)
    correct = _verified_all_reduce(tensor, rank, world)
    tensor.zero_()  # timed sums of zeros stay finite however many iterations run
    for _ in range(warmup):
        dist.all_reduce(tensor)
    seconds = _timed(tensor, iterations, device)
    correct = _verified_all_reduce(tensor, rank, world) and correct
    # agree on the verdict (MIN over 1/0) and average the time over ranks, as nccl-tests does
    verdict = torch.tensor([1.0 if correct else 0.0], dtype=torch.float64, device=device)
    total = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(verdict, op=dist.ReduceOp.MIN)
    dist.all_reduce(total)
    return SizeResult(elements * FLOAT_BYTES, total.item() / world, verdict.item() == 1.0, world)


def _verified_all_reduce(tensor, rank: int, world: int) -> bool:
    """Fill with rank+1, sum over ranks, check every element equals n(n+1)/2 (exact in float32)."""
    import torch.distributed as dist

    tensor.fill_(float(rank + 1))
    dist.all_reduce(tensor)
    expected = float(world * (world + 1) // 2)
    low, high = tensor.aminmax()  # two reductions over the whole tensor, no full-size temporary
    return low.item() == expected and high.item() == expected


def _timed(tensor, iterations: int, device) -> float:
    """Mean seconds per all-reduce of ``tensor`` over ``iterations``, all ranks starting together."""
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    dist.barrier()
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    if cuda:
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / iterations
