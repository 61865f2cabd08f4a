"""Process-group setup shared by the workloads: ranks, backend, stack dumps, the ``started`` line."""

from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta

from .errors import WorkloadError
from .protocol import emit

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True)
class Ranks:
    """Where this process sits: torchrun's RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @property
    def is_main(self) -> bool:
        """Global rank 0: the one that reports progress and results."""
        return self.rank == 0


def ranks_from_env() -> Ranks:
    """The ranks torchrun put in the environment; a plain ``python -m`` run is rank 0 of 1.

    For a plain run the rendezvous env is filled in (loopback, a free port) so the same code path works.
    """
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return Ranks(
        rank=int(os.environ["RANK"]),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        world_size=world,
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))),
    )


def register_stack_dump() -> None:
    """On SIGUSR1, write every thread's Python stack to stderr (the launcher's dump before a stall stop)."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def die_with_parent() -> None:
    """Under torchrun, have the kernel SIGKILL this worker when its torchrun agent dies (Linux).

    torchrun starts every worker in a session of its own, so a SIGKILL to torchrun's process group
    (or the OOM killer taking torchrun) would otherwise orphan the workers, and a worker stuck in a
    collective would never end. torchrun spawns workers from its main thread, which lives as long as it.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not fatal: the launcher's stop-all still reaps by FTWIZ_RUN_ID
    if os.getppid() == 1 or os.getppid() != parent:  # the agent died before the request took effect
        os._exit(128 + signal.SIGKILL)


def init_process_group(ranks: Ranks, *, workload: str, timeout_s: float) -> str:
    """Pick the device, start the process group (nccl on CUDA, gloo otherwise) and emit ``started``.

    Returns the backend name. The timeout is generous but finite, so a rank that loses its peers ends
    with an error instead of waiting forever when no launcher is watching.
    """
    import torch
    import torch.distributed as dist

    backend = "gloo"
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if ranks.local_rank >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
            raise WorkloadError(
                f"local rank {ranks.local_rank} has no GPU: this node shows {count} (CUDA_VISIBLE_DEVICES={visible}); "
                f"start at most {count} processes here (--nproc-per-node / the node's gpus setting)"
            )
        torch.cuda.set_device(ranks.local_rank)
        backend = "nccl"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    emit(
        "started",
        rank=ranks.rank,
        local_rank=ranks.local_rank,
        world_size=dist.get_world_size(),
        local_world_size=ranks.local_world_size,
        hostname=socket.gethostname(),
        backend=backend,
        pid=os.getpid(),
        workload=workload,
    )
    return backend


def device_for(backend: str, ranks: Ranks):
    """The torch device collectives use on this rank."""
    import torch

    return torch.device("cuda", ranks.local_rank) if backend == "nccl" else torch.device("cpu")


def destroy_process_group() -> None:
    """Tear the process group down if it is up (a clean exit, no NCCL warning)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_memory(backend: str) -> dict[str, int]:
    """``{"peak_allocated_bytes": N}`` on CUDA (``torch.cuda.max_memory_allocated``, what the estimator predicts), else ``{}``."""
    import torch

    return {"peak_allocated_bytes": int(torch.cuda.max_memory_allocated())} if backend == "nccl" else {}


def exit_without_teardown(code: int) -> None:
    """Flush stdout/stderr and leave with ``os._exit(code)``: no interpreter teardown.

    A rank was seen killed by SIGABRT while exiting ("terminate called without an active exception": a C++
    thread of torch's distributed stack still joinable when its static objects are destroyed) — a finished rank
    reported as failed, or a peer's echo of another rank's error blamed first. Callers run what must still run
    (``atexit`` handlers, ``logging.shutdown``) before this.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said anyway
            pass
    os._exit(code)

