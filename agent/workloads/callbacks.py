"""Trainer events as protocol lines: heartbeat (every rank), progress and checkpoint (global rank 0)."""

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

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.time()
        self._last_tokens = state.num_input_tokens_seen
        if self.ranks.is_main:
            print(f"ftwiz: training from step {state.global_step} to {state.max_steps}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        emit("heartbeat", rank=self.ranks.rank, step=state.global_step)

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



def _number(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    return round(float(value), 8) if isinstance(value, (int, float)) else value
