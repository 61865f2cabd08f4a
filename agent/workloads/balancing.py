"""``balance = "auto"`` at run time: measure each rank's speed, fix the shares, feed each rank its part.

The plan and its mathematics are in :mod:`.balance`. Here: the global batches (one seeded permutation of the
dataset per epoch, cut into ``micro_batch_size × grad_accum_steps × world`` samples: the same sets for every
mode), a calibration before the first step (each rank times its own compute: under DDP forward+backward passes with
no gradient sync; under FSDP, where every forward all-gathers each unit's parameters and so waits for the
slowest peer, the forward passes less the time spent in FSDP's own pre- and post-forward hooks, where the
all-gathers wait: :class:`ForwardClock`), and a check :data:`FIRST_CHECK` steps after the first, then every
:data:`CHECK_EVERY` steps, of each rank's compute speed (DDP: its samples over its forward+backward passes less
its own time in the all-reduce; FSDP: over its forward compute, measured the same way): when one drifted by
more than 20 % the shares are planned again and the log says so. Every rank's heartbeat carries its
``compute_s`` and, under DDP, ``sync_s`` (the straggler decision's input).

On a GPU the FSDP clock synchronises the device at each hook (the kernels run after their launch) during the
calibration only; the per-step drift check under FSDP runs on CPU ranks alone (synchronising every hook of every
step would cost the overlap of the all-gathers with compute).
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from typing import Any, Optional

from shared.nodewire import NODE_ENV

from .balance import DRIFT, RankShare, drifted, fit_costs, plan_shares, speed_of, step_slices, weighted_loss
from .dist import Ranks
from .errors import WorkloadError, note
from .protocol import emit

__all__ = ["Balancer", "ForwardClock", "wrap_ddp"]

CHECK_EVERY = 10
"""Steps between drift checks (one small all-gather each)."""
FIRST_CHECK = 3
"""Steps after the first before the first check: the calibration's few passes run while peers still load and
warm up, so its shares are the least sure (a 2-node run on a shared host calibrated 14 vs 12 samples/s for
speeds of 62 vs 16)."""
CALIBRATION_PASSES = 3
"""Timed forward+backward passes per rank before the first step (after one untimed warm-up)."""


def wrap_ddp(model: Any, ranks: Ranks, backend: str) -> Any:
    """The model under DDP (balance = "auto" with sharding = "ddp" trains in this loop, not the HF Trainer)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    if backend == "nccl":
        device = torch.device("cuda", ranks.local_rank)
        if not any(p.device.type == "cuda" for p in model.parameters()):
            model = model.to(device)
        return DistributedDataParallel(model, device_ids=[ranks.local_rank], broadcast_buffers=False, find_unused_parameters=False)
    return DistributedDataParallel(model, broadcast_buffers=False, find_unused_parameters=False)


class Balancer:
    """Drives one rank's share of every optimizer step (see the module docstring)."""

    def __init__(self, model: Any, dataset: Any, collate: Any, spec: Any, ranks: Ranks, *, fsdp: bool) -> None:
        self.model, self.dataset, self.collate, self.ranks, self.fsdp = model, dataset, collate, ranks, fsdp
        self.micro = int(spec["micro_batch_size"])
        self.global_batch = self.micro * int(spec["grad_accum_steps"]) * ranks.world_size
        self.seed = int(spec.seed)
        self.node = os.environ.get(NODE_ENV) or socket.gethostname()
        # job.json: each GPU node's largest micro-batch, from the checklist's memory fit (a claim: checked here)
        caps = spec.job.get("max_micro_batch") or {}
        cap = caps.get(self.node) if isinstance(caps, dict) else None
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise WorkloadError(f"job spec {spec.path}: max_micro_batch[{self.node!r}] must be a whole number >= 1 (got {cap!r})")
        self.max_micro = max(self.micro, cap) if cap is not None else self.micro
        self.steps_per_epoch = max(1, len(dataset) // self.global_batch)
        self.shares: list[RankShare] = []
        self.speeds: list[float] = []
        self.fixed: list[float] = []
        """Each rank's seconds per micro-step whatever its size, from the calibration (:func:`fit_costs`)."""
        self._window: deque = deque(maxlen=CHECK_EVERY)
        self._timer = None
        self._clock: Optional[ForwardClock] = None  # FSDP: installed by calibrate(), before the first forward
        if not fsdp:
            from .synctime import SyncTimer

            self._timer = SyncTimer()
            model.register_comm_hook(model.process_group, self._timer.hook)
        self._started = 0.0
        self._passes_s = 0.0
        self._checked = False
        self._first_done: Optional[float] = None
        self._tokens_after_first = 0
        self._steps_after_first = 0

    # ------------------------------------------------------------------ calibration

    def calibrate(self, start: int) -> None:
        """Time this rank's compute on its own, gather every rank's speed, fix the shares (a collective)."""
        import torch

        # its largest micro-batch (the cap its memory fit allows), then one sample: two sizes far apart give the speed
        # per sample and the fixed cost of a micro-step apart (every rank runs the same passes in the same order:
        # under FSDP each forward is a collective)
        indices = self._global_batch(start + 1)[: max(self.micro, self.max_micro)]
        self._sync(False)
        cuda = torch.cuda.is_available()
        if self.fsdp:
            self._clock = self._clock or ForwardClock(self.model)
            self._clock.synchronize = cuda
        least: list[float] = []
        for first, size in ((True, len(indices)), (False, 1)):  # both on every rank, even at a cap of one: the same passes
            batch = self._to_device(self.collate([self.dataset[i] for i in indices[:size]]))
            times = []
            for attempt in range(CALIBRATION_PASSES + (1 if first else 0)):
                if self._clock is not None:
                    self._clock.take()  # the warm-up pass's forward (lazy init, first allocations) does not count
                began = time.perf_counter()
                with self.model.no_sync() if not self.fsdp else _Nothing():  # DDP: no all-reduce, no waiting for a peer
                    loss, _ = weighted_loss(self.model, batch, world_size=self.ranks.world_size, global_batch=self.global_batch)
                    loss.backward()
                if cuda:
                    torch.cuda.synchronize()
                if attempt or not first:
                    # FSDP: every forward waits for the slowest peer's all-gathers, so the wall time would give every rank
                    # the slowest one's speed (a uniform split, whatever the cards): its forward compute alone instead
                    times.append(self._clock.take() if self._clock is not None else time.perf_counter() - began)
            # the least: a neighbour's burst only adds time to a pass of the same work, and the median of three still
            # took a burst that hit two of them (a loaded 2-core host gave a rank of a second's fixed cost 1 sample of 16)
            least.append(min(times))
        if self._clock is not None:
            self._clock.synchronize = False
        self.model.zero_grad(set_to_none=True)
        if self._timer is not None:
            self._timer.take_step()  # nothing of the calibration counts as the first step's sync
        speed, fixed = fit_costs(len(indices), least[0], least[1])
        how = "forward passes, the all-gathers' waits left out" if self.fsdp else "forward+backward"
        self._plan(self._gather(speed), self._gather(fixed), reason=f"calibrated on each rank's own {how}")

    def _plan(self, speeds: list[float], fixed: list[float], *, reason: str) -> None:
        nodes = self._gather_nodes()
        caps = self._gather_caps()
        self.speeds, self.fixed = speeds, fixed
        self.shares = plan_shares(self.global_batch, speeds, caps, nodes, same_accum=self.fsdp, fixed_s=fixed)
        record = {"mode": "auto", "ranks": [s.as_dict() for s in self.shares]}
        if self.ranks.is_main:
            parts = ", ".join(f"r{s.rank}@{s.node} {s.samples_per_step} ({s.micro_batch}x{s.accum}, {speeds[s.rank]:.1f} samples/s"
                              f" + {fixed[s.rank] * 1000:.0f} ms per micro-step)" for s in self.shares)
            message = f"balance: {reason}: samples per step {parts}; global batch {self.global_batch}"
            print(f"ftwiz: {message}", flush=True)
            emit("note", rank=self.ranks.rank, message=message, balance=record)

    # ------------------------------------------------------------------ steps

    def step(self, step: int) -> tuple[float, int]:
        """Forward+backward of this rank's share of ``step``'s global batch; ``(its part of the mean loss, tokens)``."""
        self._started = time.perf_counter()
        if self._clock is not None:
            self._clock.take()  # this step's forwards only
        indices = self._global_batch(step)
        slices = step_slices(self.shares, self.ranks.rank)
        total, tokens = 0.0, 0
        for micro, (start, stop) in enumerate(slices):
            batch = self._to_device(self.collate([self.dataset[i] for i in indices[start:stop]]))
            last = micro == len(slices) - 1
            self._sync(last)
            context = self.model.no_sync() if not self.fsdp and not last else _Nothing()
            with context:
                loss, part = weighted_loss(self.model, batch, world_size=self.ranks.world_size, global_batch=self.global_batch)
                loss.backward()
            total += part
            tokens += int(batch["attention_mask"].sum())
        self._passes_s = time.perf_counter() - self._started
        if self._first_done is not None:
            self._tokens_after_first += tokens
        return total / self.global_batch, tokens

    def finish_step(self, step: int) -> dict[str, Any]:
        """After the optimizer step: this rank's ``compute_s``/``sync_s`` for the heartbeat; re-balance on drift."""
        now = time.perf_counter()
        step_s = now - self._started
        sync = self._timer.take_step() if self._timer is not None else None
        compute = max(step_s - (sync or 0.0), 1e-9)
        if self._first_done is None:
            self._first_done = now  # the first step carries warm-up (allocator, lazy init): no speed from it
        else:
            self._steps_after_first += 1
            # its speed: samples over its forward+backward passes alone (not the optimizer's fixed time, which would
            # make a rank with a small share look slower than it is, and shrink its share again at the next check)
            # under FSDP: its forward compute, as calibrated (the passes' wall time holds the peers' all-gather waits)
            busy = self._clock.take() if self._clock is not None else self._passes_s - (sync or 0.0)
            mine = self.shares[self.ranks.rank]
            self._window.append((mine.samples_per_step, mine.accum, max(busy, 1e-9)))
        # every rank counts the same steps, so every rank joins the check's all-gather at the same one
        if self._checks_drift() and len(self._window) >= (CHECK_EVERY if self._checked else FIRST_CHECK):
            self._checked = True
            self._check_drift()
        timing: dict[str, Any] = {"compute_s": round(compute, 5)}
        if sync is not None:
            timing["sync_s"] = round(sync, 5)
        return timing

    def _checks_drift(self) -> bool:
        """DDP: always; FSDP: on CPU ranks (on a GPU the forward clock is exact only while it synchronises)."""
        if self._clock is None:
            return True
        import torch

        return not torch.cuda.is_available()

    def _check_drift(self) -> None:
        samples, steps, busy = (sum(column) for column in zip(*self._window, strict=True))
        measured = self._gather(speed_of(samples, steps, busy, self.fixed[self.ranks.rank]))
        moved = drifted(self.speeds, measured, tolerance=DRIFT)
        self._window.clear()
        if not moved:
            return
        what = "; ".join(f"r{r} {self.speeds[r]:.1f} -> {measured[r]:.1f} samples/s" for r in moved)
        if self.ranks.is_main:
            note(f"balance: speed drifted by more than {DRIFT:.0%} ({what}): re-balancing", rank=self.ranks.rank)
        self._plan(measured, self.fixed, reason="re-balanced after a drift")

    def throughput(self) -> dict[str, Any]:
        """``{"tokens_per_s", "steps"}`` over every rank since the end of the first step (a collective)."""
        elapsed = time.perf_counter() - self._first_done if self._first_done is not None else 0.0
        tokens = sum(self._gather(float(self._tokens_after_first)))
        return {"tokens_per_s": round(tokens / elapsed, 1) if elapsed > 0 else None, "steps": self._steps_after_first}

    # ------------------------------------------------------------------ helpers

    def _global_batch(self, step: int) -> list[int]:
        """The dataset indices of ``step``'s global batch: a seeded permutation per epoch, cut in order."""
        import torch

        epoch, k = divmod(step - 1, self.steps_per_epoch)
        order = torch.randperm(len(self.dataset), generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()
        return [order[i % len(order)] for i in range(k * self.global_batch, (k + 1) * self.global_batch)]

    def _sync(self, on: bool) -> None:
        if self.fsdp:
            self.model.set_requires_gradient_sync(on)

    def _to_device(self, batch: dict) -> dict:
        import torch

        if not torch.cuda.is_available():
            return batch
        device = torch.device("cuda", self.ranks.local_rank)
        return {k: v.to(device) for k, v in batch.items()}

    def _gather(self, value: float) -> list[float]:
        import torch.distributed as dist

        everyone: list = [None] * self.ranks.world_size
        dist.all_gather_object(everyone, float(value))
        return [float(v) for v in everyone]

    def _gather_nodes(self) -> list[str]:
        import torch.distributed as dist

        everyone: list = [None] * self.ranks.world_size
        dist.all_gather_object(everyone, self.node)
        return [str(v) for v in everyone]

    def _gather_caps(self) -> list[int]:
        return [max(1, int(v)) for v in self._gather(float(self.max_micro))]


class ForwardClock:
    """FSDP: this rank's forward compute per pass, the time in FSDP's own forward hooks left out.

    FSDP2's pre-forward hook of each unit all-gathers its parameters and waits for them (so for the slowest
    peer); its post-forward hook reshards. Each unit gets a hook before and one after FSDP's on both sides
    (``prepend``), and a forward of the root counts its wall time less the time between those brackets. The
    recomputation of a checkpointed layer in backward (no root forward around it) is not counted.
    """

    def __init__(self, model: Any) -> None:
        from torch.distributed.fsdp import FSDPModule

        self.synchronize = False
        """Synchronise the GPU at each bracket (the calibration on a GPU: kernels run after their launch)."""
        self._root = model
        self._compute = 0.0
        self._began: Optional[float] = None
        self._opened = 0.0
        self._waited = 0.0
        units: list[Any] = [m for m in model.modules() if isinstance(m, FSDPModule)]
        for unit in units:
            unit.register_forward_pre_hook(self._pre_open, prepend=True)  # runs before FSDP's pre-forward
            unit.register_forward_pre_hook(self._pre_close)  # and this one after it
            unit.register_forward_hook(self._post_open, prepend=True)  # before FSDP's post-forward
            unit.register_forward_hook(self._post_close)  # after it

    def take(self) -> float:
        """Seconds of forward compute since the last call; resets."""
        compute, self._compute = self._compute, 0.0
        return compute

    def _now(self) -> float:
        if self.synchronize:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def _pre_open(self, module: Any, args: Any) -> None:
        now = self._now()
        if module is self._root:
            self._began, self._waited = now, 0.0
        self._opened = now

    def _pre_close(self, module: Any, args: Any) -> None:
        if self._began is not None:
            self._waited += self._now() - self._opened

    def _post_open(self, module: Any, args: Any, output: Any) -> None:
        self._opened = self._now()

    def _post_close(self, module: Any, args: Any, output: Any) -> None:
        if self._began is None:
            return
        now = self._now()
        self._waited += now - self._opened
        if module is self._root:
            self._compute += now - self._began - self._waited
            self._began = None


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
