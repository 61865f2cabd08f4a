"""Trainer events as protocol lines: heartbeat (every rank), progress and checkpoint (global rank 0).

Every rank's heartbeat carries its own timing of the step: ``sync_s`` (its time in the gradient
all-reduce, waiting for slower peers included: :mod:`.synctime`) and ``compute_s`` (the rest of the
step), so the controller can name the rank that sets the pace (``shared/straggler.py``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from transformers import TrainerCallback

from .dist import Ranks
from .protocol import emit


class ProtocolCallback(TrainerCallback):
    """Trainer events → protocol lines: heartbeat (every rank), progress and checkpoint (rank 0)."""

    def __init__(self, ranks: Ranks, output_dir: Path):
        self.ranks = ranks
        self.output_dir = output_dir
        self._last_time: Optional[float] = None
        self._last_tokens = 0
        self._step_started: Optional[float] = None
        self.sync: Any = None
        """The :class:`.synctime.SyncTimeCallback` when the trainer syncs gradients (its last step's seconds)."""

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.time()
        self._step_started = time.perf_counter()
        self._last_tokens = state.num_input_tokens_seen
        if self.ranks.is_main:
            print(f"ftwiz: training from step {state.global_step} to {state.max_steps}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        step_s = now - self._step_started if self._step_started is not None else None
        self._step_started = now
        emit("heartbeat", rank=self.ranks.rank, step=state.global_step, **step_timing(step_s, self.sync.last_step_s if self.sync else None))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs:
            return
        now = time.time()
        tokens = state.num_input_tokens_seen
        elapsed = now - (self._last_time or now)
        rate = (tokens - self._last_tokens) / elapsed if elapsed > 0 else None
        self._last_time, self._last_tokens = now, tokens
        emit(
            "progress", rank=self.ranks.rank, step=state.global_step, total_steps=state.max_steps,
            loss=_number(logs.get("loss")), learning_rate=_number(logs.get("learning_rate")),
            tokens_per_s=round(rate, 1) if rate is not None else None,
            epoch=round(state.epoch, 4) if state.epoch is not None else None,
            **({"sync_s": _number(logs["sync_s"])} if "sync_s" in logs else {}),
        )

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            emit("checkpoint", rank=self.ranks.rank, step=state.global_step, path=str(self.output_dir / f"checkpoint-{state.global_step}"))



def step_timing(step_s: Optional[float], sync_s: Optional[float]) -> dict[str, Any]:
    """``{"compute_s", "sync_s"}`` of one optimizer step for the heartbeat (empty when unknown)."""
    if step_s is None:
        return {}
    sync = min(max(sync_s or 0.0, 0.0), step_s)
    timing: dict[str, Any] = {"compute_s": round(step_s - sync, 5)}
    if sync_s is not None:
        timing["sync_s"] = round(sync, 5)
    return timing


def _number(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    return round(float(value), 8) if isinstance(value, (int, float)) else value
