"""The pace decision behind the checklist's ``plan.balance`` row, as a table."""

from __future__ import annotations

import pytest

from shared.computeplan import NodeCompute, plan_pace

A, B, C = "node0", "node1", "node2"

# (nodes as (name, per-rank rates), workload, balance) -> (bounding node, balanced gain, recommend auto)
CASES = [
    pytest.param([(A, (10.0,)), (B, (10.0,))], "sft", "off", (A, 1.00, False), id="even: no gain, the first node named"),
    pytest.param([(A, (10.0, 10.0)), (B, (5.0,))], "sft", "off", (B, 25 / 15, True), id="a slow node: 1.67x, recommend"),
    pytest.param([(A, (12.0,)), (B, (8.0,)), (C, (8.0,))], "sft", "off", (B, 28 / 24, False), id="12+8+8: 1.17x, under the bar"),
    pytest.param([(A, (12.0,)), (B, (8.0,))], "sft", "off", (B, 1.25, True), id="exactly 1.25x recommends"),
    pytest.param([(A, (10.0,)), (B, (5.0,))], "sft", "auto", (B, 1.5, False), id="already auto: nothing to recommend"),
    pytest.param([(A, (10.0,)), (B, (5.0,))], "command", "off", (B, 1.5, True), id="your own code: it can read its share"),
    pytest.param([(A, (10.0,)), (B, (5.0,))], "allreduce", "off", (B, 1.5, False), id="allreduce: nothing to balance"),
    pytest.param([(A, (10.0, 2.0)), (B, (5.0,))], "sft", "off", (A, 17 / 6, True), id="the slowest GPU inside a node bounds it"),
    pytest.param([(A, ()), (B, (4.0, 4.0))], "sft", "off", (B, 1.0, False), id="a node without ranks is passed over"),
]


@pytest.mark.parametrize(("nodes", "workload", "balance", "expected"), CASES)
def test_pace(nodes, workload, balance, expected) -> None:
    plan = plan_pace([NodeCompute(n, r) for n, r in nodes], workload=workload, balance=balance)
    bound, gain, recommend = expected
    assert (plan.bound, plan.recommend) == (bound, recommend)
    assert plan.balanced == pytest.approx(gain)
    assert plan.ranks == sum(len(r) for _, r in nodes)


def test_the_row_text_names_the_pace_and_each_node() -> None:
    plan = plan_pace([NodeCompute(A, (10.0, 10.0), "2× RTX 3090 bfloat16"), NodeCompute(B, (5.0,))])
    assert plan.summary == "node1 bounds the run; uniform: 3 rank(s) at node1's pace = 1.00; balanced: 1.67x"
    assert plan.per_node == "node0 10 10 TFLOP/s per rank (2× RTX 3090 bfloat16); node1 5 TFLOP/s per rank"


@pytest.mark.parametrize("nodes", [[], [NodeCompute(A, ())], [NodeCompute(A, (1.0,)), NodeCompute(B, (0.0,))]])
def test_nothing_measured_or_a_zero_rate_is_refused(nodes) -> None:
    with pytest.raises(ValueError):
        plan_pace(nodes)
