"""Is a rank loading, stopped or blocked? Pure bookkeeping over the node helper's process samples.

Before a run's first step there is no progress line to watch, and the first-step grace (model
download and load) is long. What tells a *loading* rank from a *hung* one is on the node: the
process state (``T``: stopped), and whether its CPU time and I/O (files, pipes and sockets: a
download moves it) still move. :class:`ActivityTracker` keeps, per global rank, when it last moved
and since when it is stopped; :func:`hang_before_first_step` is the rule the supervisor applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from tui.launch.messages import RankSample

__all__ = ["ActivityTracker", "Hang", "RankActivity", "hang_before_first_step"]

#: CPU ticks (1/100 s) between two samples below which a rank counts as idle: a blocked process
#: still gets the odd tick from its idle threads.
CPU_TICKS_MOVING = 3
#: Bytes of I/O between two samples below which a rank counts as idle.
IO_BYTES_MOVING = 16 * 1024


@dataclass
class RankActivity:
    """What the samples say about one rank."""

    node: str
    pid: int
    first_seen: float
    last_active: float
    """When its CPU time or I/O last moved (or it was first seen, or it was in ``D`` state)."""
    stopped_since: Optional[float] = None
    """Since when it is in state ``T`` (None while it is not)."""
    cpu_ticks: int = 0
    io_bytes: int = 0
    state: str = "?"


@dataclass(frozen=True)
class Hang:
    """A hang found before the first step: the ranks to blame and why."""

    ranks: tuple[int, ...]
    """The odd rank(s) out (every rank when none stands out)."""
    why: str


class ActivityTracker:
    """Per-rank activity from :class:`~tui.launch.messages.RankSamples`; thread-confined to the supervisor."""

    def __init__(self) -> None:
        self.ranks: dict[int, RankActivity] = {}

    def observe(self, node: str, samples: Iterable[RankSample], now: float) -> None:
        """Fold one node's samples taken at ``now``."""
        for s in samples:
            known = self.ranks.get(s.rank)
            if known is None or known.pid != s.pid:
                self.ranks[s.rank] = RankActivity(node, s.pid, now, now, now if s.state == "T" else None, s.cpu_ticks, s.io_bytes, s.state)
                continue
            moved = s.cpu_ticks - known.cpu_ticks >= CPU_TICKS_MOVING or s.io_bytes - known.io_bytes >= IO_BYTES_MOVING
            if s.state == "T":
                known.stopped_since = known.stopped_since if known.stopped_since is not None else now
            else:
                known.stopped_since = None
                if moved or s.state == "D":
                    known.last_active = now
            known.cpu_ticks, known.io_bytes, known.state = s.cpu_ticks, s.io_bytes, s.state

    def resume_all(self, now: float) -> None:
        """Forget old silences (the controller was cut off from the nodes: its samples stopped, not the ranks)."""
        for a in self.ranks.values():
            a.last_active = now
            if a.stopped_since is not None:
                a.stopped_since = now


def hang_before_first_step(
    ranks: Mapping[int, RankActivity], now: float, window_s: float, *, expected_ranks: Optional[int], reached: Iterable[int] = ()
) -> Optional[Hang]:
    """The rule: a rank stopped for ``window_s``, or every rank idle for ``window_s``; else None.

    ``expected_ranks`` is the world size (every rank must have been sampled before "every rank is
    idle" can hold: a rank not yet started may still be loading); ``reached`` are the ranks that said
    they joined the process group (the built-in workloads' ``started`` line). A rank whose CPU or I/O
    moves within the window is loading, and keeps the first-step grace.
    """
    stopped = sorted(r for r, a in ranks.items() if a.stopped_since is not None and now - a.stopped_since >= window_s)
    if stopped:
        return Hang(tuple(stopped), f"stopped (process state T) for {window_s:.0f} s")
    if not ranks or (expected_ranks is not None and len(ranks) < expected_ranks):
        return None
    if any(now - a.last_active < window_s for a in ranks.values()):
        return None
    reached_set = set(reached)
    missing = sorted(r for r in ranks if r not in reached_set)
    if reached_set and missing:
        return Hang(tuple(missing), f"never reached the process group while every rank sat idle for {window_s:.0f} s")
    return Hang(tuple(sorted(ranks)), f"every rank idle (no CPU or I/O) for {window_s:.0f} s: blocked, e.g. in the first collective")
