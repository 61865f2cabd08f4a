"""Which node bounds a data-parallel run, and how much ``[job] balance = "auto"`` should gain: a pure decision.

The agents' compute probe (``POST /v1/probe/compute``) gives each rank's matmul rate (TFLOP/s of the GPU it
will use, or of the CPU threads a CPU rank gets). Under a uniform split every rank trains on the same number of
samples per step, so each step waits for the slowest rank: the run goes at ``ranks × slowest rate``. A split in
proportion to speed (the ``sft`` recipe's ``balance = "auto"``, :mod:`agent.workloads.balance`) lets every
rank finish together: ``Σ rates`` at best (no memory cap, no sync cost). The ratio of the two is what the
checklist's ``plan.balance`` row shows; a slow node is a fact to plan with, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

__all__ = ["RECOMMEND_GAIN", "NodeCompute", "PacePlan", "ProbeFigures", "plan_pace"]

RECOMMEND_GAIN = 1.25
"""Recommend ``balance = "auto"`` when the balanced split promises at least this many times the uniform pace."""


@dataclass(frozen=True)
class NodeCompute:
    """One node's measured ranks: ``rates`` holds one TFLOP/s figure per rank it will run."""

    node: str
    rates: tuple[float, ...]
    what: str = ""
    """How it was measured, for the detail (``"2× RTX 3060 bfloat16"``, ``"cpu 4 threads float32"``)."""


@dataclass(frozen=True)
class ProbeFigures:
    """What the checklist's probe gives the launch (``balance = "auto"`` for your own code plans with it)."""

    rates: Optional[Mapping[str, tuple[float, ...]]]
    """Node → each of its ranks' TFLOP/s; None when nothing was measured."""
    note: str = ""
    """Why there are no figures, or which nodes were not measured."""

    @classmethod
    def of(cls, nodes: Sequence[NodeCompute], missing: Sequence[str] = ()) -> "ProbeFigures":
        return cls({n.node: tuple(n.rates) for n in nodes} or None, "; ".join(missing) or ("" if nodes else "no node measured"))


@dataclass(frozen=True)
class PacePlan:
    """The decision: the node that sets the pace, the balanced speed-up, and whether to recommend ``auto``."""

    bound: str
    ranks: int
    slowest: float
    balanced: float
    """Σ rates over ``ranks × slowest``: 1.00 on an even cluster."""
    recommend: bool
    summary: str
    per_node: str


def plan_pace(nodes: Sequence[NodeCompute], *, workload: str = "sft", balance: str = "off") -> PacePlan:
    """Name the bounding node (the lowest per-rank rate; the first in order on a tie) and the balanced gain.

    ``recommend`` is true for the built-in ``sft`` recipe and your own code (which then reads its share from
    ``FTWIZ_MICRO_BATCH``/``FTWIZ_GRAD_ACCUM``) with ``balance = "off"`` and a gain of at least
    :data:`RECOMMEND_GAIN`. Raises ``ValueError`` without a rank or with a rate that is not positive.
    """
    rates = [r for n in nodes for r in n.rates]
    if not rates:
        raise ValueError("no measured rank")
    if any(not r > 0 for r in rates):
        raise ValueError("every measured rate must be positive")
    bound = min(nodes, key=lambda n: min(n.rates) if n.rates else float("inf"))
    slowest = min(bound.rates)
    gain = sum(rates) / (len(rates) * slowest)
    recommend = workload in ("sft", "command") and balance == "off" and gain >= RECOMMEND_GAIN
    summary = (f"{bound.node} bounds the run; uniform: {len(rates)} rank(s) at {bound.node}'s pace = 1.00; "
               f"balanced: {gain:.2f}x")
    per_node = "; ".join(
        f"{n.node} {' '.join(f'{r:.3g}' for r in n.rates)} TFLOP/s per rank" + (f" ({n.what})" if n.what else "")
        for n in nodes)
    return PacePlan(bound.node, len(rates), slowest, gain, recommend, summary, per_node)
