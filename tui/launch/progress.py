"""The progress model: workload protocol lines in, step/loss/lr/tokens/s/epoch/ETA out.

Workers print one JSON object per line with an ``"ftwiz"`` kind (``started``, ``progress``,
``heartbeat``, ``allreduce``, ``checkpoint``, ``done``, ``error``); torchrun prefixes each worker
line with ``[rank<N>]:`` (:func:`shared.logprefix.split_rank` strips it), :func:`parse_protocol` reads the
typed record (:mod:`shared.protocol`), and :class:`ProgressModel` folds them into a :class:`ProgressSnapshot`. It also remembers
when each rank last *moved* (a progress or heartbeat line), which the stall detector reads.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from shared.protocol import Allreduce, Checkpoint, Done, Error, Heartbeat, Progress, Record, Started, parse_line
from shared.straggler import RankBusy, RankTiming, name_busy_straggler, name_straggler
from tui.launch.trainer_output import parse_trainer_line

__all__ = ["ProgressModel", "ProgressSnapshot", "parse_protocol", "format_progress"]

#: Shortest span of TRL ``num_tokens`` records that gives a tokens/s figure (the training bar's elapsed
#: time has whole-second resolution: one second is the least it can say).
_TOKEN_WINDOW_MIN_S = 1.0
#: Steps of each rank's timings the straggler decision looks at (means: a CPU quota or a shared GPU slows a
#: rank in bursts, a few steps of each window, so a median would miss it).
TIMING_WINDOW = 8
#: Steps a rank must have reported before it takes part (the first carries loading and warm-up).
TIMING_MIN_STEPS = 3
#: The node helper's process samples (one a tick) each rank's busy share is measured over, for code that
#: reports no timings of its own, and the fewest that count.
BUSY_WINDOW = 8
BUSY_MIN_SAMPLES = 4


def parse_protocol(text: str) -> Optional[Record]:
    """The protocol record in ``text``, or None for any other line.

    Besides ftwiz's own lines (``shared/protocol.py``), what the common trainers print counts as a
    :class:`~shared.protocol.Progress` record (HF/TRL/axolotl log dicts, tqdm bars, LLaMA-Factory records: see
    :mod:`tui.launch.trainer_output`), so a user's script shows progress without changing its code.
    """
    obj = parse_line(text)
    if obj is not None:
        return obj
    if "{" in text or "%|" in text:
        return parse_trainer_line(text)
    return None


@dataclass(frozen=True)
class ProgressSnapshot:
    """Where the job stands, for display."""

    step: Optional[int] = None
    """Latest optimizer step seen (any rank)."""
    total_steps: Optional[int] = None
    """Planned steps, when the workload says."""
    loss: Optional[float] = None
    learning_rate: Optional[float] = None
    tokens_per_s: Optional[float] = None
    sync_s: Optional[float] = None
    """Seconds per optimizer step rank 0 spent in gradient sync (mean since the last progress line)."""
    sync_forecast_s: Optional[float] = None
    """The checklist's forecast of ``sync_s``, when the launcher passes it (shown beside the measurement)."""
    epoch: Optional[float] = None
    eta_s: Optional[float] = None
    """Seconds left at the recent step rate; None until two steps were seen."""
    steps_per_s: Optional[float] = None
    world_size: Optional[int] = None
    ranks_started: int = 0
    ranks_done: int = 0
    last_checkpoint: Optional[str] = None
    last_checkpoint_step: Optional[int] = None
    allreduce: tuple[dict, ...] = ()
    """Rows of the allreduce check (size_bytes, algbw_gbps, busbw_gbps, correct)."""
    straggler: Optional[dict] = None
    """The rank that sets the pace (``shared.straggler.Straggler.as_dict``), None while nobody is 1.3x slower."""
    updated_at: Optional[float] = None


@dataclass
class RankInfo:
    """What a ``started`` line told us about one rank."""

    rank: int
    node: str
    local_rank: Optional[int] = None
    pid: Optional[int] = None
    hostname: Optional[str] = None
    backend: Optional[str] = None
    status: Optional[str] = None
    """From the ``done`` line."""


@dataclass
class ProgressModel:
    """Folds protocol objects into a snapshot; thread-confined to the run's supervisor."""

    snapshot: ProgressSnapshot = field(default_factory=ProgressSnapshot)
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    """Global rank → where it runs (from ``started``)."""
    last_moved: dict[int, float] = field(default_factory=dict)
    """Global rank → monotonic time of its last progress or heartbeat line."""
    last_step: dict[int, int] = field(default_factory=dict)
    """Global rank → its last reported step."""
    errors: list[tuple[str, Optional[int], str]] = field(default_factory=list)
    """(node, rank, message) from ``error`` lines."""
    timings: dict[int, deque] = field(default_factory=dict)
    """Global rank → its last ``(compute_s, sync_s)`` per step from its heartbeats."""
    slow_link_node: Optional[str] = None
    """The node whose own link the pre-launch mesh found slow (the straggler decision's last rule)."""
    demand: dict[int, deque] = field(default_factory=dict)
    """Global rank → its last ``(time, pid, node, run_ns + wait_ns)`` from the node helper's samples."""
    settled: bool = False
    """The run began to end (a stop was asked, a node ended, a rank failed): the straggler it had while it ran
    stays named; the ranks' last, dying steps and samples say nothing about who set the pace."""
    _history: deque = field(default_factory=lambda: deque(maxlen=30))
    _tokens_seen: deque = field(default_factory=lambda: deque(maxlen=30))
    _train_elapsed_s: Optional[float] = None

    def update(self, node: str, rank: Optional[int], record: Record, *, now: Optional[float] = None) -> bool:
        """Apply one protocol record from ``node`` (``rank``: its line's rank prefix, when the record names none); True
        when the snapshot changed."""
        now = time.monotonic() if now is None else now
        rank = record.rank if record.rank is not None else rank
        snap = self.snapshot
        if isinstance(record, Started):
            if rank is not None:
                self.ranks[rank] = RankInfo(rank=rank, node=node, local_rank=record.local_rank, pid=record.pid,
                                            hostname=record.hostname, backend=record.backend)
            world = record.world_size if record.world_size is not None else snap.world_size
            self.snapshot = replace(snap, world_size=world, ranks_started=len(self.ranks), updated_at=time.time())
            return True
        if isinstance(record, (Progress, Heartbeat)):
            if rank is not None:
                self.last_moved[rank] = now
                if record.step is not None:
                    self.last_step[rank] = record.step
            if isinstance(record, Heartbeat):
                return rank is not None and self._timing(rank, record)
            return self._progress(record, now)
        if isinstance(record, Checkpoint):
            self.snapshot = replace(snap, last_checkpoint=record.path, last_checkpoint_step=record.step, updated_at=time.time())
            return True
        if isinstance(record, Allreduce):
            row = {"size_bytes": record.size_bytes, "algbw_gbps": record.algbw_gbps, "busbw_gbps": record.busbw_gbps, "correct": record.correct}
            self.snapshot = replace(snap, allreduce=(*snap.allreduce, row), updated_at=time.time())
            if rank is not None:
                self.last_moved[rank] = now
            return True
        if isinstance(record, Done):
            if rank is not None and rank in self.ranks:
                self.ranks[rank].status = record.status
            done = sum(1 for r in self.ranks.values() if r.status)
            self.snapshot = replace(snap, ranks_done=done, updated_at=time.time())
            return True
        if isinstance(record, Error):
            self.errors.append((node, rank, record.message or ""))
        return False

    def _timing(self, rank: int, beat: Heartbeat) -> bool:
        """Fold a heartbeat's ``compute_s``/``sync_s`` in; True when the named straggler changed."""
        compute, sync = beat.compute_s, beat.sync_s
        if compute is None and sync is None:
            return False
        self.timings.setdefault(rank, deque(maxlen=TIMING_WINDOW)).append((compute, sync))
        if self.settled:
            return False
        straggler = self.straggler()
        found = straggler.as_dict() if straggler is not None else None
        same = _who(found) == _who(self.snapshot.straggler)
        # a new slowdown figure alone rides along with the next progress line; a new name is news at once
        self.snapshot = replace(self.snapshot, straggler=found, updated_at=self.snapshot.updated_at if same else time.time())
        return not same

    def straggler(self):
        """The straggler by the ranks' recent timings (``shared.straggler.name_straggler``), or None.

        Code that prints no timings of its own (``workload = "command"``): by the ranks' busy shares from the
        node helper's samples (``shared.straggler.name_busy_straggler``)."""
        if not self.timings:
            busy = [row for row in (self._busy(rank, window) for rank, window in sorted(self.demand.items())) if row is not None]
            return name_busy_straggler(busy, slow_link_node=self.slow_link_node)
        rows = []
        for rank, window in sorted(self.timings.items()):
            info = self.ranks.get(rank)
            if info is None or len(window) < TIMING_MIN_STEPS:
                continue
            rows.append(RankTiming(rank, info.node, _mean([c for c, _ in window]), _mean([s for _, s in window])))
        return name_straggler(rows, slow_link_node=self.slow_link_node)

    def sampled(self, node: str, samples: Any, now: float) -> bool:
        """Fold the node helper's samples of ``node``'s workers in; True when the named straggler changed.

        Only code without timings of its own is decided from them (the built-in recipes' heartbeats say more)."""
        for s in samples:
            if s.run_ns is None or s.wait_ns is None:
                continue
            window = self.demand.setdefault(s.rank, deque(maxlen=BUSY_WINDOW))
            if window and window[-1][1] != s.pid:
                window.clear()  # another process holds the rank now
            window.append((now, s.pid, node, s.run_ns + s.wait_ns))
        if self.timings or self.settled:
            return False
        straggler = self.straggler()
        found = straggler.as_dict() if straggler is not None else None
        same = _who(found) == _who(self.snapshot.straggler)
        self.snapshot = replace(self.snapshot, straggler=found, updated_at=self.snapshot.updated_at if same else time.time())
        return not same

    @staticmethod
    def _busy(rank: int, window: deque) -> Optional[RankBusy]:
        if len(window) < BUSY_MIN_SAMPLES:
            return None
        (t0, _, _, d0), (t1, _, node, d1) = window[0], window[-1]
        if t1 <= t0:
            return None
        return RankBusy(rank, node, max(0.0, (d1 - d0) / 1e9 / (t1 - t0)))

    def _progress(self, record: Progress, now: float) -> bool:
        snap, step = self.snapshot, record.step
        if record.source == "tqdm" and _is_other_bar(snap, step, record.total_steps):
            return False  # an evaluation or data bar after the training bar took hold
        total = record.total_steps if record.total_steps is not None else snap.total_steps
        if step is not None and (snap.step is None or step >= snap.step):
            self._history.append((now, step))
        rate = _rate(self._history)
        new_step = step if step is not None and (snap.step is None or step >= snap.step) else snap.step
        eta = (total - new_step) / rate if rate and total is not None and new_step is not None else None
        self.snapshot = replace(
            snap,
            step=new_step,
            total_steps=total,
            loss=_said(record.loss, snap.loss),
            learning_rate=_said(record.learning_rate, snap.learning_rate),
            tokens_per_s=self._tokens_per_s(record, now),
            sync_s=_said(record.sync_s, snap.sync_s),
            epoch=_said(record.epoch, snap.epoch),
            steps_per_s=rate,
            eta_s=max(0.0, eta) if eta is not None else _said(record.eta_s, snap.eta_s if step is None else None),
            updated_at=time.time(),
        )
        return True


    def _tokens_per_s(self, record: Progress, now: float) -> Optional[float]:
        """Tokens/s as said, or from TRL's cumulative ``num_tokens``, or axolotl's per-GPU rate × ranks."""
        if record.tokens_per_s is not None:
            return record.tokens_per_s
        if record.tokens_per_s_per_gpu is not None:
            return record.tokens_per_s_per_gpu * (self.snapshot.world_size or max(1, len(self.ranks)) or 1)
        if record.elapsed_s is not None:
            self._train_elapsed_s = record.elapsed_s
        tokens = record.num_tokens
        if tokens is not None and self._train_elapsed_s is not None and self._train_elapsed_s >= _TOKEN_WINDOW_MIN_S:
            # TRL's count is cumulative over every rank; the training bar's elapsed time is the worker's own
            # clock, so bursts of lines arriving together do not skew the rate.
            return tokens / self._train_elapsed_s
        if tokens is not None:
            # Over a window of records: log lines reach us in bursts, so two neighbours' arrival times say little.
            self._tokens_seen.append((now, tokens))
            (t0, n0), (t1, n1) = self._tokens_seen[0], self._tokens_seen[-1]
            if t1 - t0 >= _TOKEN_WINDOW_MIN_S and n1 > n0:
                return (n1 - n0) / (t1 - t0)
        return self.snapshot.tokens_per_s


def _who(straggler: Optional[dict]) -> Optional[tuple]:
    return None if straggler is None else (straggler.get("node"), straggler.get("rank"), straggler.get("why"))


def _mean(values: list[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _is_other_bar(snap: ProgressSnapshot, step: Optional[int], total: Optional[int]) -> bool:
    return snap.total_steps is not None and total is not None and total != snap.total_steps and snap.step is not None and (step or 0) < snap.step


def _rate(history: deque) -> Optional[float]:
    if len(history) < 2:
        return None
    (t0, s0), (t1, s1) = history[0], history[-1]
    if t1 <= t0 or s1 <= s0:
        return None
    return (s1 - s0) / (t1 - t0)


def _said(value: Optional[float], default: Optional[float]) -> Optional[float]:
    return default if value is None else value


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_progress(snap: ProgressSnapshot) -> str:
    """One compact line for headless output, e.g. ``step 12/100 loss 2.31 lr 2e-04 1.2k tok/s ep 0.40 ETA 3:05``."""
    parts = []
    if snap.step is not None:
        parts.append(f"step {snap.step}/{snap.total_steps}" if snap.total_steps else f"step {snap.step}")
    if snap.loss is not None:
        parts.append(f"loss {snap.loss:.4g}")
    if snap.learning_rate is not None:
        parts.append(f"lr {snap.learning_rate:.2e}")
    if snap.tokens_per_s is not None:
        parts.append(f"{snap.tokens_per_s:,.0f} tok/s")
    if snap.sync_s is not None:
        forecast = f" (forecast {snap.sync_forecast_s:.2f})" if snap.sync_forecast_s is not None else ""
        parts.append(f"sync {snap.sync_s:.2f} s/step{forecast}")
    if snap.epoch is not None:
        parts.append(f"ep {snap.epoch:.2f}")
    if snap.eta_s is not None:
        parts.append(f"ETA {_duration(snap.eta_s)}")
    if snap.last_checkpoint_step is not None:
        parts.append(f"ckpt @{snap.last_checkpoint_step}")
    if snap.straggler:
        s = snap.straggler
        times = f" {s['slowdown']:.1f}x" if isinstance(s.get("slowdown"), (int, float)) else ""
        parts.append(f"straggler {s.get('node')}/r{s.get('rank')}{times} ({s.get('why')})")
    if snap.allreduce:
        row = snap.allreduce[-1]
        size = (row.get("size_bytes") or 0) / 1e6
        parts.append(f"allreduce {size:g} MB busbw {row.get('busbw_gbps') or 0:.3g} GB/s{'' if row.get('correct', True) else ' WRONG'}")
    return "  ".join(parts) if parts else "waiting for the first step"
