"""The shares of ``[job] balance = "auto"``: a pure plan, the same for the built-in recipe and your own code.

Each rank trains on a share of every optimizer step's global batch in proportion to its speed; the global
batch stays what the user configured (``micro_batch_size × grad_accum_steps × world size``). The built-in
``sft`` recipe (:mod:`agent.workloads.balance`, :mod:`agent.workloads.balancing`) measures the speeds on its
first steps and plans with :func:`plan_shares`. Your own code (``workload = "command"``) is planned before
launch from the checklist's compute probe (:func:`plan_command`): every rank runs the same number of
micro-steps (``FTWIZ_GRAD_ACCUM``) of its own micro-batch (``FTWIZ_MICRO_BATCH``), so a loop, an FSDP model or
the HF Trainer need nothing else, and ``micro × accum`` is exactly the rank's ``FTWIZ_SAMPLES_PER_STEP``.

Pure: no torch, no I/O, standard library only: the launcher ships this file beside the workloads under the same
name (``tui.launch.support.SHIPPED_SHARED``), as it ships ``shared/protocol.py``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

__all__ = [
    "DRIFT", "ENV_KEYS", "MIN_GAIN", "CommandBalance", "RankShare", "drifted", "env_for", "fit_costs", "plan_command",
    "plan_even_steps", "plan_shares", "speed_of", "step_slices", "step_time",
]

DRIFT = 0.2
"""Re-balance when a rank's measured speed moved by more than this fraction since the shares were fixed."""
_MORE_STEPS = 4
"""FSDP with fixed costs: common micro-step counts tried beyond the uniform split's (each costs every rank its fixed
cost once more, and lets the larger shares grow)."""
MIN_GAIN = 0.1
"""Split unevenly only when the measured speeds promise steps at least this much faster than the uniform split."""
ENV_KEYS = ("FTWIZ_BALANCE", "FTWIZ_GLOBAL_BATCH", "FTWIZ_SAMPLES_PER_STEP", "FTWIZ_MICRO_BATCH", "FTWIZ_GRAD_ACCUM")
"""The variables your own code reads (:func:`env_for`), set on every rank of a ``workload = "command"`` run."""


@dataclass(frozen=True)
class RankShare:
    """One rank's part of every optimizer step: ``run.json``'s ``balance.ranks[]``."""

    rank: int
    node: str
    samples_per_step: int
    micro_batch: int
    accum: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_shares(global_batch: int, speeds: Sequence[float], max_micro: Sequence[int], nodes: Sequence[str], *,
                same_accum: bool = True, min_gain: float = MIN_GAIN, fixed_s: Optional[Sequence[float]] = None) -> list[RankShare]:
    """Shares of ``global_batch`` samples in proportion to ``speeds`` (samples/s per rank).

    Every rank gets at least one sample. ``same_accum`` (FSDP: every forward is a collective) gives every rank
    the least number of micro-steps that keeps each micro-batch within its ``max_micro`` (the estimator's fit for
    its GPU), and so at least that many samples; otherwise (DDP syncs once, after each rank's last backward)
    each rank runs its own least number, so a slow rank's few samples stay in full micro-batches.
    ``fixed_s`` is each rank's cost per micro-step whatever its size (seconds: kernel launches, the Python of a
    forward, a hook); with it a rank's step takes ``micro-steps × fixed + samples / speed`` and the shares even
    those times out (one sample at a time to the rank that finishes it first), so a rank whose micro-steps cost
    much more than their samples is not handed samples it cannot finish in time.
    The split is uniform unless the other one promises steps at least ``min_gain`` faster by the measured speeds
    (a noisy measure of equal ranks must not cost the even cluster).
    """
    world = len(speeds)
    if world == 0 or len(max_micro) != world or len(nodes) != world:
        raise ValueError("speeds, max_micro and nodes need one entry per rank")
    if fixed_s is not None and len(fixed_s) != world:
        raise ValueError("fixed_s needs one entry per rank")
    if global_batch < world:
        raise ValueError(f"global batch {global_batch} is smaller than the {world} ranks")
    if any(m < 1 for m in max_micro):
        raise ValueError("every rank must fit a micro-batch of at least one sample")
    weights = [max(float(s), 0.0) for s in speeds]
    fixed = [max(float(f), 0.0) for f in fixed_s] if fixed_s is not None else [0.0] * world
    uniform = _with_accums(_largest_remainder(global_batch, [1.0] * world), max_micro, nodes, same_accum)
    if min(weights) <= 0:
        return uniform

    def modelled(plan: list[RankShare]) -> float:
        return step_time([s.samples_per_step for s in plan], weights, fixed_s=fixed, accums=[s.accum for s in plan])

    if not any(fixed):
        planned = _with_accums(_largest_remainder(global_batch, weights), max_micro, nodes, same_accum)
    else:  # under FSDP every rank pays its fixed cost once per common micro-step: try a few counts from the uniform split's
        least = max(s.accum for s in uniform)
        counts = range(least, least + _MORE_STEPS + 1) if same_accum else [None]
        splits = [_even_times(global_batch, weights, fixed, max_micro, steps) for steps in counts]
        planned = min((_with_accums(split, max_micro, nodes, same_accum) for split in splits if split is not None),
                      key=modelled, default=uniform)
    return planned if modelled(uniform) >= (1 + min_gain) * modelled(planned) else uniform


def _with_accums(shares: list[int], caps: Sequence[int], nodes: Sequence[str], same_accum: bool) -> list[RankShare]:
    """Each rank's micro-batch and micro-steps for ``shares`` (see :func:`plan_shares`)."""
    world, shares = len(shares), list(shares)
    if not same_accum:
        accums = [math.ceil(share / cap) for share, cap in zip(shares, caps, strict=True)]
        return [RankShare(rank, nodes[rank], share, math.ceil(share / accums[rank]), accums[rank]) for rank, share in enumerate(shares)]
    accum = max(math.ceil(share / cap) for share, cap in zip(shares, caps, strict=True))
    # each rank runs `accum` micro-steps, so each needs `accum` samples at least: take them from the largest
    while min(shares) < accum:
        low, high = shares.index(min(shares)), shares.index(max(shares))
        if shares[high] - 1 < accum:
            raise ValueError(f"global batch {sum(shares)} is too small for {world} ranks × {accum} micro-steps")
        shares[low] += 1
        shares[high] -= 1
        accum = max(math.ceil(share / cap) for share, cap in zip(shares, caps, strict=True))
    return [RankShare(rank, nodes[rank], share, math.ceil(share / accum), accum) for rank, share in enumerate(shares)]


def plan_even_steps(global_batch: int, speeds: Sequence[float], max_micro: Sequence[int], *, uniform: tuple[int, int],
                    min_gain: float = MIN_GAIN) -> tuple[int, list[int]]:
    """``(accum, micro-batch per rank)``: every rank runs ``accum`` micro-steps of its own micro-batch, and
    ``Σ micro × accum == global_batch`` exactly (no rank's last micro-batch is short).

    ``uniform`` is ``(micro_batch_size, grad_accum_steps)``, what ``off`` runs. Of the ``accum`` values that
    divide the global batch, the one whose split in proportion to ``speeds`` (each micro-batch within its
    ``max_micro``) gives the shortest step wins (the smallest ``accum`` on a tie); it replaces the uniform split
    only when it promises steps ``min_gain`` faster.
    """
    world = len(speeds)
    micro, accum = uniform
    if world == 0 or len(max_micro) != world or micro * accum * world != global_batch:
        raise ValueError("one speed and one cap per rank, and micro × accum × ranks must be the global batch")
    best = (accum, [micro] * world)
    if min(speeds) <= 0:
        return best
    best_time = step_time([micro * accum] * world, speeds)
    uniform_time = best_time
    for steps in _divisors(global_batch, up_to=global_batch // world):
        split = _capped_split(global_batch // steps, speeds, max_micro)
        if split is not None and step_time([m * steps for m in split], speeds) < best_time - 1e-12:
            best, best_time = (steps, split), step_time([m * steps for m in split], speeds)
    return best if uniform_time >= (1 + min_gain) * best_time else (accum, [micro] * world)


def step_time(shares: Sequence[int], speeds: Sequence[float], *, fixed_s: Optional[Sequence[float]] = None,
              accums: Optional[Sequence[int]] = None) -> float:
    """Seconds of the slowest rank's compute per step with ``shares`` at ``speeds`` (samples/s, all > 0), plus
    each rank's ``accums`` micro-steps at its ``fixed_s`` each when given."""
    world = len(shares)
    fixed = fixed_s if fixed_s is not None else [0.0] * world
    steps = accums if accums is not None else [1] * world
    return max(a * f + share / speed for share, speed, f, a in zip(shares, speeds, fixed, steps, strict=True))


def _even_times(total: int, speeds: Sequence[float], fixed: Sequence[float], caps: Sequence[int],
                common: Optional[int]) -> Optional[list[int]]:
    """``total`` samples, the least each at first, then one at a time to the rank whose step would end first with it
    (``micro-steps × fixed + samples / speed``). With ``common`` micro-steps on every rank each rank needs that many
    samples and takes at most ``common × cap`` (None: they do not add up); else each runs its own least number."""
    world = len(speeds)
    least = common or 1
    limits = [common * cap if common is not None else total for cap in caps]
    if least * world > total or sum(limits) < total:
        return None
    shares = [least] * world

    def ends(rank: int, share: int) -> float:
        steps = common if common is not None else math.ceil(share / caps[rank])
        return steps * fixed[rank] + share / speeds[rank]

    queue = [(ends(rank, least + 1), rank) for rank in range(world) if least < limits[rank]]
    heapq.heapify(queue)
    for _ in range(total - least * world):
        _, rank = heapq.heappop(queue)
        shares[rank] += 1
        if shares[rank] < limits[rank]:
            heapq.heappush(queue, (ends(rank, shares[rank] + 1), rank))
    return shares


def step_slices(shares: Sequence[RankShare], rank: int) -> list[tuple[int, int]]:
    """The ``(start, stop)`` positions inside one global batch of ``rank``'s micro-batches, in order."""
    start = sum(s.samples_per_step for s in shares[:rank])
    mine = shares[rank]
    base, extra = divmod(mine.samples_per_step, mine.accum)
    out = []
    for micro in range(mine.accum):
        size = base + (1 if micro < extra else 0)
        out.append((start, start + size))
        start += size
    return out


UNRESOLVED_SAMPLE = 0.01
"""The per-sample time :func:`fit_costs` takes, as a fraction of the larger pass per sample, when the two passes'
times cannot tell a sample's cost from their noise (one sample as slow as the whole micro-batch)."""


def fit_costs(micro: int, micro_pass_s: float, one_pass_s: float) -> tuple[float, float]:
    """``(samples/s, seconds per micro-step whatever its size)`` from a pass of ``micro`` samples and one of one.

    A pass costs ``fixed + samples / speed``: two sizes give both. When one sample took as long as ``micro`` (or
    longer), the samples cost less than the passes' noise: the pass is a fixed cost, and more samples do not lengthen
    it. A per-sample time of zero would promise a rank any number of samples for free, so it is taken as
    :data:`UNRESOLVED_SAMPLE` of the pass per sample, the rest fixed. (Reading such a rank as all per-sample, as before,
    gave a rank with a second's fixed cost 1 sample of 16, for a step no shorter.) When ``micro`` is 1 the two sizes
    are one: the speed is the plain ``1 / micro_pass_s`` and the fixed cost 0.
    """
    if micro <= 1 or one_pass_s <= 0:
        return micro / max(micro_pass_s, 1e-9), 0.0
    per_sample = max((micro_pass_s - one_pass_s) / (micro - 1), UNRESOLVED_SAMPLE * micro_pass_s / micro)
    return 1.0 / per_sample, max(0.0, min(one_pass_s, micro_pass_s) - per_sample)


def speed_of(samples: int, micro_steps: int, busy_s: float, fixed_s: float) -> float:
    """Samples/s of ``samples`` in ``micro_steps`` that took ``busy_s``, their fixed cost (``fixed_s`` each) left out.

    A rank left with a sample or two spends most of its time on the fixed cost; dividing by the whole time would read
    it slower than it is, and shrink its share again at the next check. The fixed cost taken out is at most 95 % of
    the time (a cost measured at the start cannot make a later step's samples free).
    """
    busy = max(busy_s, 1e-9)
    return samples / max(busy - micro_steps * fixed_s, 0.05 * busy)


def drifted(fixed: Sequence[float], measured: Sequence[float], *, tolerance: float = DRIFT) -> list[int]:
    """Ranks whose ``measured`` speed moved by more than ``tolerance`` from the ``fixed`` one."""
    return [rank for rank, (then, now) in enumerate(zip(fixed, measured, strict=True)) if then > 0 and abs(now - then) / then > tolerance]


def env_for(share: RankShare, mode: str, global_batch: int) -> dict[str, str]:
    """The rank's numbers as environment variables, for your own code (:data:`ENV_KEYS`, see README)."""
    return {
        "FTWIZ_BALANCE": mode,
        "FTWIZ_GLOBAL_BATCH": str(global_batch),
        "FTWIZ_SAMPLES_PER_STEP": str(share.samples_per_step),
        "FTWIZ_MICRO_BATCH": str(share.micro_batch),
        "FTWIZ_GRAD_ACCUM": str(share.accum),
    }


@dataclass(frozen=True)
class CommandBalance:
    """Your own code's shares, decided once before launch: each node's ranks in local-rank order."""

    mode: str
    """``"off"`` or ``"auto"``, as ``[job] balance`` says (the value of ``FTWIZ_BALANCE``)."""
    global_batch: int
    nodes: Mapping[str, tuple[RankShare, ...]]
    """Node → its ranks' shares, local rank 0 first (``RankShare.rank`` is the local rank here: torchrun gives
    the global ranks only when the nodes join)."""
    why: str
    """How the shares were decided: from the probe's figures, or why the split is uniform."""

    @property
    def sets_env(self) -> bool:
        """Whether the ranks get ``FTWIZ_*`` batch numbers (not with ``off`` and no batch declared)."""
        return bool(self.nodes)

    def env(self, node: str, local_rank: int) -> dict[str, str]:
        """What one rank of ``node`` gets (empty when the plan has no such rank)."""
        ranks = self.nodes.get(node, ())
        return env_for(ranks[local_rank], self.mode, self.global_batch) if 0 <= local_rank < len(ranks) else {}

    def record(self) -> dict[str, Any]:
        """``run.json``'s ``balance``: ``rank`` is null until the rank's ``started`` line names it."""
        ranks = [{"rank": None, "node": node, "local_rank": s.rank, "samples_per_step": s.samples_per_step,
                  "micro_batch": s.micro_batch, "accum": s.accum} for node, shares in self.nodes.items() for s in shares]
        return {"mode": self.mode, "global_batch": self.global_batch, "why": self.why, "ranks": ranks}

    def summary(self) -> str:
        """One line for the launch log: ``balance auto: node1 r0 12 (6x2), node2 r0 4 (2x2) of 16 (why)``."""
        if not self.nodes:
            return f"balance {self.mode}: no FTWIZ_* batch variables set; {self.why}"
        parts = ", ".join(f"{node} r{s.rank} {s.samples_per_step} ({s.micro_batch}x{s.accum})"
                          for node, shares in self.nodes.items() for s in shares)
        return f"balance {self.mode}: samples per step {parts} of {self.global_batch}; {self.why}"


def plan_command(mode: str, ranks: Mapping[str, int], *, micro_batch: int, grad_accum: int,
                 rates: Optional[Mapping[str, Sequence[float]]], no_rates: str = "no compute probe ran",
                 max_micro: Optional[Mapping[str, int]] = None, declared: bool = True) -> CommandBalance:
    """The shares of your own code's ranks: ``ranks`` is node → its process count (config order).

    ``mode = "auto"`` with ``rates`` (node → each rank's TFLOP/s from the compute probe) for every node splits by
    :func:`plan_even_steps`; otherwise every rank gets ``micro_batch × grad_accum`` and ``why`` says why
    (``no_rates``: why there are no figures). ``max_micro`` caps a node's micro-batch (default ``micro_batch``,
    the size the checklist's memory fit was checked for). ``declared`` false (the job names no batch) with ``off``
    sets nothing: the numbers would be defaults your code never chose.
    """
    names = [n for n, count in ranks.items() for _ in range(count)]
    world = len(names)
    global_batch = micro_batch * grad_accum * world
    caps = [(max_micro or {}).get(n, micro_batch) for n in names]
    accum, micros = grad_accum, [micro_batch] * world
    if mode != "auto" and not declared:
        return CommandBalance(mode, global_batch, {}, "declare [job] micro_batch_size and grad_accum_steps to have them")
    if mode != "auto":
        why = 'balance = "off": every rank the same micro-batch and accumulation'
    elif rates is None:
        why = f"uniform split: {no_rates}"
    elif missing := [n for n in ranks if len(rates.get(n) or ()) != ranks[n] or not all(r > 0 for r in rates.get(n) or ())]:
        why = f"uniform split: no compute figure for {', '.join(missing)}"
    else:
        speeds = [float(r) for n in ranks for r in rates[n]]
        accum, micros = plan_even_steps(global_batch, speeds, caps, uniform=(micro_batch, grad_accum))
        figures = ", ".join(f"{n} {' '.join(f'{r:.3g}' for r in rates[n])}" for n in ranks)
        kept = micros == [micro_batch] * world and accum == grad_accum
        why = (f"uniform split: the probe's figures ({figures} TFLOP/s per rank) promise less than {MIN_GAIN:.0%} faster steps"
               if kept else f"in proportion to the compute probe ({figures} TFLOP/s per rank)")
    nodes: dict[str, tuple[RankShare, ...]] = {}
    slot = 0
    for node, count in ranks.items():
        nodes[node] = tuple(RankShare(local, node, micros[slot + local] * accum, micros[slot + local], accum) for local in range(count))
        slot += count
    return CommandBalance(mode, global_batch, nodes, why)


def _divisors(number: int, *, up_to: int) -> list[int]:
    """The divisors of ``number`` that are at most ``up_to``, ascending (trial division up to its square root)."""
    small = [d for d in range(1, math.isqrt(number) + 1) if number % d == 0]
    return sorted(d for d in {*small, *(number // d for d in small)} if d <= up_to)


def _capped_split(total: int, weights: Sequence[float], caps: Sequence[int]) -> Optional[list[int]]:
    """``total`` in proportion to ``weights``, at least one each and none above its cap (None: cannot)."""
    if sum(caps) < total or total < len(weights):
        return None
    fixed: dict[int, int] = {}
    while True:
        free = [i for i in range(len(weights)) if i not in fixed]
        rest = total - sum(fixed.values())
        if not free:
            return [fixed[i] for i in range(len(weights))] if rest == 0 else None
        if rest < len(free):
            return None
        split = dict(zip(free, _largest_remainder(rest, [weights[i] for i in free]), strict=True))
        over = [i for i in free if split[i] > caps[i]]
        if not over:
            return [fixed.get(i, split.get(i, 0)) for i in range(len(weights))]
        fixed.update({i: caps[i] for i in over})


def _largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """Integers summing to ``total``, at least one each, proportional to ``weights`` (Hamilton's method)."""
    exact = [total * w / sum(weights) for w in weights]
    shares = [max(1, math.floor(e)) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    for i in order[: max(0, total - sum(shares))]:
        shares[i] += 1
    while sum(shares) > total:  # the one-sample floor took from nobody: the largest share gives it back
        shares[shares.index(max(shares))] -= 1
    return shares
