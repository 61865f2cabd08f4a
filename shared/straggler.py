"""Who sets the pace of a run: the straggler rank, its node, by how much, and why (compute or network).

Pure: the controller folds each rank's per-step timings (the built-in recipes put ``compute_s`` and
``sync_s`` in every rank's heartbeat, see ``shared/protocol.py``) into :class:`RankTiming` rows and asks
:func:`name_straggler`. The rules, in order:

1. **compute**: the rank whose compute time per step (forward, backward, optimizer; not the gradient
   sync) is the largest, when its step (that compute plus the collective's own time: what the others spent
   in sync beyond waiting for it) is at least :data:`THRESHOLD` times a step at the others' median compute.
   Its peers then wait for it in the gradient sync, so their ``sync_s`` is high too: that wait is its
   fault, which is why compute is decided first.
   Except on the node whose own link the pre-launch mesh found slow, while the sync takes longer than the
   compute: its extra time is then the other collectives it sends over that link, so the why is network.
2. **network**: otherwise, the node whose ranks spend the most time in the gradient sync per step (less
   the time each waited for the slowest peer's compute), when a step with that sync is at least
   :data:`THRESHOLD` times a step with the other nodes' median sync: a slow link slows its own node's
   collective.
3. **network, from the pre-launch mesh**: otherwise, when the checklist's mesh named one node's own link as
   slow and the sync makes every step at least :data:`THRESHOLD` times the compute (every rank waits
   equally long in a ring, so only the mesh can say whose link it is), that node; the slowdown is then the
   step time over the compute time (what the link costs every step).

``None`` when nobody is :data:`THRESHOLD` times slower than the others (or fewer than two ranks report).

**Your own code** (``workload = "command"``) prints no per-rank timings; :func:`name_busy_straggler` decides
from what the node sees of each rank's process instead (:class:`RankBusy`): the share of wall time its main
thread wanted a CPU, running or runnable (``/proc/PID/schedstat``). In a data-parallel loop every rank does
the same work per step, so CPU time alone says nothing (a rank held by a quota spends the same CPU-seconds,
over a longer wall time); but the slow rank wants the CPU the whole step while its peers, done early, sleep in
the collective waiting for it. The rank whose busy share is :data:`THRESHOLD` times the others' median (and
at least :data:`BUSY_FLOOR`) is the straggler, why compute, slowdown that ratio (its step over a peer's
compute). When nobody is busy (every rank waits: the network sets the pace) the mesh's slow-link node is
named, why network. GPU ranks whose main thread spins in CUDA waits read as busy everywhere: nobody is named.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal, Optional

__all__ = ["BUSY_FLOOR", "THRESHOLD", "RankBusy", "RankTiming", "Straggler", "name_busy_straggler", "name_straggler"]

THRESHOLD = 1.3
"""A rank (or node) at least this many times slower than the median of the others is named."""

BUSY_FLOOR = 0.5
"""A rank whose main thread wanted a CPU less than this share of the time is waiting, not computing."""


@dataclass(frozen=True)
class RankTiming:
    """One rank's recent timings per optimizer step (means over a window of steps)."""

    rank: int
    node: str
    compute_s: Optional[float] = None
    """Seconds per step spent computing (everything but the gradient sync)."""
    sync_s: Optional[float] = None
    """Seconds per step this rank spent in the gradient sync (including waiting for slower peers)."""


@dataclass(frozen=True)
class RankBusy:
    """One rank's process as its node saw it over recent seconds (your own code: no timings of its own)."""

    rank: int
    node: str
    busy: float
    """Share of wall time its main thread was on a CPU or runnable and waiting for one (0..1)."""


@dataclass(frozen=True)
class Straggler:
    """The rank that sets the pace: ``run.json``'s ``straggler``."""

    node: str
    rank: int
    slowdown: Optional[float]
    """How many times longer its step is than a step of the median other rank: with its compute (compute),
    with its node's sync (network)."""
    why: Literal["compute", "network"]

    def as_dict(self) -> dict:
        """``{"node", "rank", "slowdown", "why"}`` for run.json and the wire."""
        return asdict(self)

    def describe(self) -> str:
        """``"straggler node1/r2 2.4x (compute)"``: one phrase for the progress line."""
        times = f" {self.slowdown:.1f}x" if self.slowdown is not None else ""
        return f"straggler {self.node}/r{self.rank}{times} ({self.why})"


def name_straggler(ranks: Sequence[RankTiming], *, slow_link_node: Optional[str] = None,
                   threshold: float = THRESHOLD) -> Optional[Straggler]:
    """The straggler among ``ranks``, or None (see the module docstring for the rules).

    ``slow_link_node`` is the node the pre-launch mesh found with a slow link of its own, when known.
    """
    if len(ranks) < 2:
        return None
    compute = _slow_compute(ranks, threshold)
    if compute is not None:
        syncs = [r.sync_s for r in ranks if r.sync_s is not None]
        computes = [r.compute_s for r in ranks if r.compute_s is not None]
        if compute.node == slow_link_node and syncs and min(syncs) > statistics.median(computes):
            # on the slow link while the sync sets the pace: its extra time is the other collectives it sends
            # over that link (token counts, loss means), not arithmetic
            return Straggler(compute.node, compute.rank, compute.slowdown, "network")
        return compute
    network = _slow_node(ranks, threshold)
    if network is not None:
        return network
    return _slow_link(ranks, slow_link_node, threshold)


def _slow_compute(ranks: Sequence[RankTiming], threshold: float) -> Optional[Straggler]:
    """The rank computing longest, when its step (its compute + the collective's own sync) is ``threshold``
    times a step at the others' median compute: extra compute hidden under a slow network names nobody."""
    known = [r for r in ranks if r.compute_s is not None and r.compute_s >= 0]
    if len(known) < 2:
        return None
    slow = max(known, key=lambda r: (r.compute_s or 0.0, -r.rank))
    others = statistics.median(r.compute_s or 0.0 for r in known if r is not slow)
    # the collective's own time: what the others spent in sync beyond waiting for this rank's longer compute
    # (its own sync is no guide: a CPU-starved rank is slow inside the collective too)
    spare = [max(0.0, r.sync_s - ((slow.compute_s or 0.0) - (r.compute_s or 0.0))) for r in known if r is not slow and r.sync_s is not None]
    collective = statistics.median(spare) if spare else 0.0
    if others + collective <= 0:
        return None
    ratio = ((slow.compute_s or 0.0) + collective) / (others + collective)
    return Straggler(slow.node, slow.rank, round(ratio, 2), "compute") if ratio >= threshold else None


def _slow_node(ranks: Sequence[RankTiming], threshold: float) -> Optional[Straggler]:
    by_node: dict[str, list[RankTiming]] = {}
    for rank in ranks:
        if rank.sync_s is not None:
            by_node.setdefault(rank.node, []).append(rank)
    if len(by_node) < 2:
        return None
    slowest = max((r.compute_s for r in ranks if r.compute_s is not None), default=None)
    floor = min(r.sync_s for r in ranks if r.sync_s is not None)
    node_sync = {node: statistics.median(_own_sync(r, slowest, floor) for r in rows) for node, rows in by_node.items()}
    node = max(node_sync, key=lambda name: (node_sync[name], name))
    others = statistics.median(v for name, v in node_sync.items() if name != node)
    compute = statistics.median([r.compute_s for r in ranks if r.compute_s is not None] or [0.0])
    if compute + others <= 0:
        return None
    ratio = (compute + node_sync[node]) / (compute + others)  # its step over the others' step
    if ratio < threshold:
        return None
    rank = max(by_node[node], key=lambda r: (_own_sync(r, slowest, floor), -r.rank))
    return Straggler(node, rank.rank, round(ratio, 2), "network")


def _own_sync(rank: RankTiming, slowest_compute: Optional[float], collective: float) -> float:
    """Its sync time less the wait for the slowest peer's compute (a fast rank arrives early and waits), never
    below the collective's own time (the least any rank spent in it)."""
    wait = slowest_compute - rank.compute_s if slowest_compute is not None and rank.compute_s is not None else 0.0
    return max(collective, (rank.sync_s or 0.0) - wait)


def _slow_link(ranks: Sequence[RankTiming], node: Optional[str], threshold: float) -> Optional[Straggler]:
    if node is None:
        return None
    on_node = [r for r in ranks if r.node == node]
    syncs = [r.sync_s for r in ranks if r.sync_s is not None]
    computes = [r.compute_s for r in ranks if r.compute_s is not None]
    if not on_node or not syncs or not computes:
        return None
    sync, compute = statistics.median(syncs), statistics.median(computes)
    if compute <= 0:
        return None
    ratio = (compute + sync) / compute
    if ratio < threshold:
        return None  # the link costs less than the threshold asks of any straggler
    return Straggler(node, min(r.rank for r in on_node), round(ratio, 2), "network")


def name_busy_straggler(ranks: Sequence[RankBusy], *, slow_link_node: Optional[str] = None,
                        threshold: float = THRESHOLD) -> Optional[Straggler]:
    """The straggler among ``ranks`` by their busy shares (see the module docstring), or None."""
    if len(ranks) < 2:
        return None
    slow = max(ranks, key=lambda r: (r.busy, -r.rank))
    others = statistics.median(r.busy for r in ranks if r is not slow)
    if slow.busy >= BUSY_FLOOR:
        ratio = slow.busy / others if others > 0 else float("inf")
        if ratio < threshold:
            return None
        return Straggler(slow.node, slow.rank, round(min(ratio, 99.0), 2), "compute")
    if slow_link_node is None:
        return None
    on_node = [r.rank for r in ranks if r.node == slow_link_node]
    return Straggler(slow_link_node, min(on_node), None, "network") if on_node else None
