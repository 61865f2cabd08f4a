"""The full mesh: which pairs to measure in which round, the matrix they fill, and which links are slow.

Pure (no I/O): the controller (``tui/checks/mesh.py``) runs the agents' connect and bandwidth probes in
the rounds :func:`round_robin` gives and fills a :class:`MeshMatrix`; :func:`slow_links` and
:func:`slow_latency` judge it, :func:`bottleneck` feeds the gradient-sync forecast (``shared/syncplan.py``).

Scheduling is the circle method of a round-robin tournament: with N nodes (plus a "bye" when N is odd)
there are N−1 rounds (N rounds when odd) in which every node is in at most one pair, and every pair
meets exactly once, so no two streams of a round share a node's link (each pair's two directions stream
one after the other).

The quick pass (:func:`ring_rounds`) streams around a ring in both directions, two rounds whatever N,
each node sending one stream and receiving another at once (links are full duplex): each node's link is
measured sending and receiving twice, against two different peers, which is what
names a slow node; :func:`disagreements` says when it no longer matches the cached full matrix.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

__all__ = [
    "DISAGREE_FRACTION",
    "MAX_LATENCY_MS",
    "MeshRun",
    "disagreements",
    "ring_rounds",
    "SLOW_FRACTION",
    "Link",
    "MeshMatrix",
    "bottleneck",
    "round_robin",
    "slow_latency",
    "slow_links",
]

SLOW_FRACTION = 0.25
"""A directed link below this fraction of the cluster's typical link (:meth:`MeshMatrix.typical_gbit`) is
named slow: a bad cable, a 100 Mbit/s switch port or a duplex mismatch shows as a tenth of its peers,
while streams over healthy links on a busy host vary by up to 3x (measured here on namespace nodes:
1.6-4.5 Gbit/s between unshaped pairs of one mesh), so half would name healthy links."""
MAX_LATENCY_MS = 10.0
"""TCP connect time above which a pair is named: a LAN answers in well under a millisecond."""


DISAGREE_FRACTION = 0.3
"""A link of the quick pass disagrees with the cached full matrix when its share of its own pass's typical
link is below this fraction of the cached share (or above its inverse where the cache had it slow).
Shares, not Gbit/s: the quick pass runs N streams at once where the full mesh ran N as well, but other
work on the hosts moves every figure together; healthy links here vary up to 3x between passes, so
only a change beyond that is a disagreement (a node shaped to 50 Mbit/s falls to a few percent)."""


SLOW_LINK_DRIFT = 1.5
"""A link the cached matrix named slow disagrees when its own Gbit/s rose by more than this factor.
A slow link is bound by the link (a shaped or a poor one), not by the hosts' load, so its figure is steady
between passes where healthy links vary up to 3x: a node re-shaped from 25 to 75 Mbit/s is still slow by
share, but the sync forecast built on the cached figure would be 3x wrong (tests/checks/test_mesh_cluster.py).
Downward, the quick pass's 0.5 s streams read a shaped link low (50 Mbit/s read 0.03, and on a busy CI host
0.01, against the full mesh's 0.05): only a fall past :data:`SLOW_LINK_FALL` is a disagreement."""

SLOW_LINK_FALL = 0.1
"""A link the cached matrix named slow disagrees when its own Gbit/s fell below this fraction of the cached
figure: an order of magnitude, beyond the 5x that a short stream over a shaped link read low (above); a link
that stayed slow is named slow by the quick pass either way."""


class Link(BaseModel):
    """One directed measurement: from ``src``'s agent to ``dst``'s agent."""

    src: str = Field(description="Node that connected / streamed.")
    dst: str = Field(description="Node that accepted / received.")
    latency_ms: float | None = Field(default=None, description="Best TCP connect time of the tries, ms; None when unreachable.")
    gbit_per_s: float | None = Field(default=None, description="Throughput of the HTTP stream, Gbit/s; None when the probe failed.")
    error: str | None = Field(default=None, description="Why a figure is missing.")


class MeshMatrix(BaseModel):
    """Every directed link between the nodes, measured in rounds of disjoint pairs."""

    nodes: list[str] = Field(description="Node names, in config order (rows and columns of the matrix).")
    links: list[Link] = Field(default_factory=list, description="One entry per ordered pair (src != dst).")
    rounds: int = Field(0, description="Rounds of disjoint pairs the measurement took.")
    seconds: float = Field(0.0, description="Wall time of the whole mesh measurement.")
    stream_seconds: float = Field(0.0, description="Seconds each bandwidth stream ran.")
    measured_at: float = Field(0.0, description="Unix time the measurement ended (the cached matrix's age).")

    def link(self, src: str, dst: str) -> Link | None:
        """The ``src → dst`` measurement, or None when it was not taken."""
        for link in self.links:
            if link.src == src and link.dst == dst:
                return link
        return None

    def matrix(self, field: str = "gbit_per_s") -> list[list[float | None]]:
        """``rows[i][j]`` = ``field`` of ``nodes[i] → nodes[j]`` (None on the diagonal and where missing)."""
        index = {(link.src, link.dst): getattr(link, field) for link in self.links}
        return [[index.get((a, b)) if a != b else None for b in self.nodes] for a in self.nodes]

    def median_gbit(self) -> float | None:
        """Median throughput over the links that have one."""
        values = [link.gbit_per_s for link in self.links if link.gbit_per_s is not None]
        return statistics.median(values) if values else None

    def typical_gbit(self) -> float | None:
        """The median over nodes of each node's fastest link (either direction).

        The plain median fails when one node of three is slow (four of six links are then slow); each
        node's best link is healthy unless the node itself is, so their median holds while fewer than
        half the nodes are bad.
        """
        best = []
        for node in self.nodes:
            values = [lk.gbit_per_s for lk in self.links if node in (lk.src, lk.dst) and lk.gbit_per_s is not None]
            if values:
                best.append(max(values))
        return statistics.median(best) if best else None


def round_robin(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint unordered pairs covering every pair once (circle method).

    >>> round_robin(["a", "b", "c", "d"])
    [[('a', 'd'), ('b', 'c')], [('a', 'c'), ('d', 'b')], [('a', 'b'), ('c', 'd')]]
    """
    players: list[str | None] = list(names)
    if len(players) < 2:
        return []
    if len(players) % 2:
        players.append(None)  # the bye: whoever meets it sits the round out
    n = len(players)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = players[i], players[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b))
        rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]  # keep the first, rotate the rest
    return rounds


def ring_rounds(names: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Two rounds of directed streams around the ring: every node to the next, then every node to the previous.

    >>> ring_rounds(["a", "b", "c"])
    [[('a', 'b'), ('b', 'c'), ('c', 'a')], [('b', 'a'), ('c', 'b'), ('a', 'c')]]
    >>> ring_rounds(["a", "b"])
    [[('a', 'b'), ('b', 'a')]]
    """
    n = len(names)
    if n < 2:
        return []
    forward = [(names[i], names[(i + 1) % n]) for i in range(n)]
    if n == 2:
        return [forward]
    return [forward, [(b, a) for a, b in forward]]


def disagreements(quick: MeshMatrix, cached: MeshMatrix, fraction: float = DISAGREE_FRACTION) -> list[tuple[Link, Link | None]]:
    """``(quick link, cached link)`` for each streamed link of ``quick`` that the cached matrix does not match.

    A link disagrees when the cache lacks it or has no figure for it, when it is unreachable now but
    was not then, or when its share of the pass's typical link moved beyond ``fraction`` of the cached
    share: down, to where the pass itself names it slow (below :data:`SLOW_FRACTION` of its typical link); or,
    for a link the cache named slow, when its own Gbit/s rose by more than :data:`SLOW_LINK_DRIFT` (fixed, or
    re-shaped: a slow link's figure feeds the sync forecast) or fell below :data:`SLOW_LINK_FALL` of the cached
    figure.
    A link the cache named slow is never judged by its share: its figure is the link's, while the typical
    link's moves with the hosts' load (two CI runs saw a quick pass's healthy links 3.3x faster, then 3.3x
    slower, than the full mesh just before, and a steady 0.05 Gbit/s link called a disagreement either way).
    """
    typical_now, typical_then = quick.typical_gbit(), cached.typical_gbit()
    found: list[tuple[Link, Link | None]] = []
    for link in quick.links:
        then = cached.link(link.src, link.dst)
        if link.error and (then is None or not then.error):
            found.append((link, then))
            continue
        if link.gbit_per_s is None:
            continue
        if then is None or then.gbit_per_s is None or not typical_now or not typical_then:
            found.append((link, then))
            continue
        now_share, then_share = link.gbit_per_s / typical_now, then.gbit_per_s / typical_then
        if then_share < SLOW_FRACTION:  # slow then, bound by its link: its own Gbit/s speaks (fell, or rose: fixed
            # or re-shaped), never its share of the healthy links, whose figures move 3x+ with the hosts' load
            moved = link.gbit_per_s < SLOW_LINK_FALL * then.gbit_per_s or link.gbit_per_s > SLOW_LINK_DRIFT * then.gbit_per_s
        else:  # became slow: by share, and slow by this pass's own measure
            moved = now_share < fraction * then_share and now_share < SLOW_FRACTION
        if moved:
            found.append((link, then))
    return found


class MeshRun(BaseModel):
    """What the checklist did about the mesh this time: the quick pass against the cache, or the full mesh."""

    mode: str = Field(description="'full' (every pair streamed this time) or 'quick' (ring streams and all-pairs connects).")
    age_s: float = Field(description="Age of the full matrix the checklist reports, seconds (0 when measured now).")
    reason: str = Field(description="Why this mode: no cached matrix, too old, --mesh, the quick pass disagreed, or agreed.")
    pairs: list[Link] = Field(default_factory=list, description="The links measured this time (connects and streams).")
    quick: MeshMatrix | None = Field(None, description="The quick pass, when one ran.")
    seconds: float = Field(0.0, description="Wall time of everything measured this time.")


def slow_links(mesh: MeshMatrix, fraction: float = SLOW_FRACTION) -> list[Link]:
    """Directed links below ``fraction`` × the typical link, slowest first (failed probes excluded)."""
    typical = mesh.typical_gbit()
    if typical is None:
        return []
    slow = [link for link in mesh.links if link.gbit_per_s is not None and link.gbit_per_s < fraction * typical]
    return sorted(slow, key=lambda link: link.gbit_per_s or 0.0)


def slow_latency(mesh: MeshMatrix, limit_ms: float = MAX_LATENCY_MS) -> list[Link]:
    """Directed links whose connect time exceeds ``limit_ms``, slowest first."""
    slow = [link for link in mesh.links if link.latency_ms is not None and link.latency_ms > limit_ms]
    return sorted(slow, key=lambda link: -(link.latency_ms or 0.0))


def bottleneck(mesh: MeshMatrix, nodes: Sequence[str] | None = None) -> Link | None:
    """The slowest measured link among ``nodes`` (default: all).

    A ring all-reduce runs at the pace of its slowest hop, and which ring the collective library builds
    follows rank order (arrival order under c10d), so the forecast assumes the worst link is in it.
    """
    keep = set(nodes) if nodes is not None else set(mesh.nodes)
    measured = [link for link in mesh.links if link.src in keep and link.dst in keep and link.gbit_per_s]
    return min(measured, key=lambda link: link.gbit_per_s or 0.0) if measured else None


def pairs_of(node: str, links: Sequence[Link]) -> list[Link]:
    """The links in ``links`` that start or end at ``node``."""
    return [link for link in links if node in (link.src, link.dst)]
