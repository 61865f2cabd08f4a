"""Time the ranks spend in gradient synchronisation per optimizer step, for the progress lines.

A DDP communication hook wraps PyTorch's default ``allreduce_hook``: each gradient bucket's all-reduce is
timed from the moment DDP hands the bucket over to the moment its future completes (the callback runs on
the collective's completion). Buckets overlap with each other and with the rest of backward, so the time
per step is the *union* of the buckets' intervals: wall time during which some gradient was in flight.

DDP waits for every bucket's future before ``backward()`` returns, so at ``on_step_end`` the step's
intervals are all in. Gradient accumulation syncs only on the optimizer step (``no_sync`` elsewhere).
Per step the minimum over ranks counts (the last rank to arrive waits for no straggler, so its time is
the collective's own); the mean of those per step since the last log goes into the ``logs`` dict as
``sync_s`` (the progress line carries it, see :mod:`agent.workloads.callbacks`). Measured here with gloo
on CPU; with NCCL the future completes when the GPU work does, so the figure includes stream waits.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from transformers import TrainerCallback

__all__ = ["SyncTimeCallback", "SyncTimer", "attach", "union_seconds"]


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total = 0.0
    current: list[float] | None = None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    if current is not None:
        total += current[1] - current[0]
    return total


class SyncTimer:
    """A DDP comm hook (:meth:`hook`) that records each bucket's all-reduce interval."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._intervals: list[tuple[float, float]] = []

    def hook(self, state, bucket):  # DDP rejects any annotation but its own types (GradBucket)
        """``register_comm_hook(state, timer.hook)``: the default all-reduce, timed."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        start = time.perf_counter()
        future = default_hooks.allreduce_hook(state, bucket)

        def finished(done: Any) -> Any:
            with self._lock:
                self._intervals.append((start, time.perf_counter()))
            return done.value()

        return future.then(finished)

    def take_step(self) -> float:
        """Seconds of sync since the last call (the union of the buckets' intervals); resets."""
        with self._lock:
            intervals, self._intervals = self._intervals, []
        return union_seconds(intervals)


class SyncTimeCallback(TrainerCallback):
    """Registers the timer on the trainer's DDP model and puts ``sync_s`` (mean per step) into each log."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.timer = SyncTimer()
        self.active = False
        self._steps: list[float] = []
        self.last_step_s: float | None = None
        """This rank's seconds of sync in the last optimizer step (the heartbeat carries it)."""

    def on_train_begin(self, args, state, control, **kwargs):
        from torch.nn.parallel import DistributedDataParallel

        model = self.trainer.model_wrapped
        if isinstance(model, DistributedDataParallel):
            model.register_comm_hook(model.process_group, self.timer.hook)
            self.active = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.active:
            self.last_step_s = self.timer.take_step()
            self._steps.append(self.last_step_s)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # Every rank logs at the same steps (logging_steps), so every rank reaches this collective.
        if not self.active or logs is None or not self._steps:
            return
        steps, self._steps = self._steps, []
        logs["sync_s"] = round(sum(self._network_part(steps)) / len(steps), 4)

    def _network_part(self, steps: list[float]) -> list[float]:
        """Per step, the least any rank spent in sync: the last rank to arrive waits for no straggler.

        A rank that reaches the all-reduce early waits there for the slowest peer's backward; that wait
        is compute skew, not the network. The minimum over ranks (one small MIN all-reduce per progress
        line) is the collective's own duration.
        """
        import torch
        import torch.distributed as dist

        model = self.trainer.model_wrapped
        values = torch.tensor(steps, dtype=torch.float64, device=self.trainer.args.device)
        dist.all_reduce(values, op=dist.ReduceOp.MIN, group=model.process_group)
        return [float(v) for v in values.tolist()]


def attach(trainer: Any) -> SyncTimeCallback:
    """Add the sync timer to ``trainer`` ahead of the other callbacks (so ``sync_s`` is in the logs they see)."""
    callback = SyncTimeCallback(trainer)
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback
