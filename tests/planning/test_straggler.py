"""The straggler decision (``shared/straggler.py``) from tables of per-rank timings."""

from __future__ import annotations

import pytest

from shared.straggler import RankBusy, RankTiming, Straggler, name_busy_straggler, name_straggler


def _ranks(*rows):
    return [RankTiming(rank, node, compute, sync) for rank, node, compute, sync in rows]


CASES = [
    # (what, ranks, slow_link_node, expected (node, rank, slowdown, why) or None)
    ("even ranks: nobody", _ranks((0, "a", 1.0, 0.1), (1, "b", 1.05, 0.12), (2, "c", 0.98, 0.1)), None, None),
    ("one rank computes 3x slower: compute, though its peers wait in sync",
     _ranks((0, "a", 1.0, 2.0), (1, "b", 3.0, 0.1), (2, "c", 1.0, 2.0)), None, ("b", 1, 3.0, "compute")),
    ("two ranks: the median of the other one", _ranks((0, "a", 1.0, 1.0), (1, "b", 2.0, 0.0)), None, ("b", 1, 2.0, "compute")),
    ("3x the compute hidden under a slow network names nobody",
     _ranks((0, "a", 0.08, 0.6), (1, "b", 0.2, 0.59), (2, "c", 0.08, 0.6)), None, None),
    ("1.25x is under the threshold", _ranks((0, "a", 1.0, 0.3), (1, "b", 1.25, 0.05), (2, "c", 1.0, 0.3)), None, None),
    ("1.3x is named", _ranks((0, "a", 1.0, 0.3), (1, "b", 1.3, 0.0), (2, "c", 1.0, 0.3)), None, ("b", 1, 1.3, "compute")),
    ("median speed but its node's sync is 4x: network",
     _ranks((0, "a", 1.0, 0.5), (1, "b", 1.0, 2.0), (2, "c", 1.0, 0.5)), None, ("b", 1, 2.0, "network")),
    ("several ranks on the slow node: the node's median, its slowest rank",
     _ranks((0, "a", 1.0, 0.5), (1, "a", 1.0, 0.5), (2, "b", 1.0, 2.0), (3, "b", 1.0, 2.2)), None, ("b", 3, 3.1 / 1.5, "network")),
    ("sync equal everywhere, sync dominates, the mesh names a slow node: network from the mesh",
     _ranks((0, "a", 1.0, 3.0), (1, "b", 1.0, 3.0), (2, "c", 1.0, 3.0)), "c", ("c", 2, 4.0, "network")),
    ("slowest 'compute' on the mesh's slow node while the sync sets the pace: network",
     _ranks((0, "a", 0.1, 0.6), (1, "b", 0.1, 0.6), (2, "c", 0.35, 0.55)), "c", ("c", 2, 0.7 / 0.45, "network")),
    ("slowest compute elsewhere than the mesh's slow node: compute",
     _ranks((0, "a", 0.1, 0.6), (1, "b", 0.1, 0.6), (2, "c", 0.35, 0.55)), "a", ("c", 2, 0.7 / 0.45, "compute")),
    ("the mesh names a slow node; the sync adds 0.7 of a busy host's longer compute to each step: network",
     _ranks((0, "a", 0.85, 0.6), (1, "b", 0.9, 0.58), (2, "c", 0.8, 0.6)), "c", ("c", 2, 1.45 / 0.85, "network")),
    ("the mesh names a slow node but compute dominates: nobody",
     _ranks((0, "a", 1.0, 0.2), (1, "b", 1.0, 0.2)), "b", None),
    ("one rank alone: nobody", _ranks((0, "a", 5.0, 0.0)), None, None),
    ("own code without timings: nobody", _ranks((0, "a", None, None), (1, "b", None, None)), None, None),
    ("compute only (no sync measured): compute",
     _ranks((0, "a", 1.0, None), (1, "b", 1.0, None), (2, "c", 2.5, None)), None, ("c", 2, 2.5, "compute")),
]


@pytest.mark.parametrize(("what", "ranks", "slow_link", "expected"), CASES, ids=[c[0] for c in CASES])
def test_name_straggler(what, ranks, slow_link, expected):
    found = name_straggler(ranks, slow_link_node=slow_link)
    if expected is None:
        assert found is None, what
    else:
        node, rank, slowdown, why = expected
        assert found is not None, what
        assert (found.node, found.rank, found.why) == (node, rank, why), what
        assert found.slowdown == pytest.approx(slowdown, abs=0.005), what


def test_record_shape_and_phrase():
    found = Straggler("node1", 2, 2.4, "compute")
    assert found.as_dict() == {"node": "node1", "rank": 2, "slowdown": 2.4, "why": "compute"}
    assert found.describe() == "straggler node1/r2 2.4x (compute)"


BUSY_CASES = [
    # (what, [(rank, node, busy share)], slow_link_node, expected (node, rank, slowdown, why) or None)
    ("even ranks, all computing: nobody", [(0, "a", 0.95), (1, "b", 0.97), (2, "c", 0.96)], None, None),
    ("a rank held by a quota wants the CPU all the time, its peers sleep in the collective: compute",
     [(0, "a", 0.3), (1, "b", 1.0), (2, "c", 0.32)], None, ("b", 1, round(1.0 / 0.31, 2), "compute")),  # over the median
    ("two ranks: the other one's share", [(0, "a", 0.25), (1, "b", 1.0)], None, ("b", 1, 4.0, "compute")),
    ("1.25x is under the threshold", [(0, "a", 0.8), (1, "b", 1.0)], None, None),
    ("every rank waits (the network sets the pace), no mesh verdict: nobody", [(0, "a", 0.1), (1, "b", 0.12)], None, None),
    ("every rank waits and the mesh found b's link slow: network", [(0, "a", 0.1), (1, "b", 0.12), (2, "b", 0.1)], "b",
     ("b", 1, None, "network")),
    ("a rank idle beside idle peers is not busy: the floor", [(0, "a", 0.05), (1, "b", 0.4)], None, None),
    ("GPU ranks spinning in CUDA waits read busy everywhere: nobody", [(0, "a", 1.0), (1, "b", 1.0)], None, None),
    ("one rank: nobody", [(0, "a", 1.0)], None, None),
]


@pytest.mark.parametrize(("what", "rows", "slow_link", "expected"), BUSY_CASES, ids=[c[0] for c in BUSY_CASES])
def test_busy_shares_name_the_straggler_of_your_own_code(what, rows, slow_link, expected):
    found = name_busy_straggler([RankBusy(*row) for row in rows], slow_link_node=slow_link)
    assert (None if found is None else (found.node, found.rank, found.slowdown, found.why)) == expected, what
