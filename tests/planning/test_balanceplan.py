"""Your own code's shares before launch (``shared.balanceplan.plan_command``): tables of probe figures → env.

The built-in recipe's planner (``plan_shares``) has its tables in ``tests/workloads/test_balance.py``.
"""

from __future__ import annotations

import pytest

from shared.balanceplan import ENV_KEYS, MIN_GAIN, plan_command, plan_even_steps, step_time


@pytest.mark.parametrize(("speeds", "caps", "uniform", "expected"), [
    # (speeds, max micro per rank, (micro, accum) of off) -> (accum, micro per rank); Σ micro × accum = the global batch
    ([1.0, 1.0], [8, 8], (8, 1), (1, [8, 8])),  # even: what off runs
    ([4.0, 1.0], [8, 8], (8, 1), (2, [6, 2])),  # accum 1 would need 13 > 8 on the fast rank: two micro-steps each
    ([4.0, 1.0], [16, 16], (8, 1), (1, [13, 3])),  # room for 13: one micro-step
    ([1.0, 3.0], [4, 4], (4, 2), (4, [1, 3])),  # 4 x (1 + 3) = 16: the caps leave only accum 4 for 4:12
    ([1.0, 1.15], [8, 8], (4, 2), (2, [4, 4])),  # < 10 % faster: uniform
    ([2.0, 1.0, 1.0], [4, 4, 4], (2, 2), (3, [2, 1, 1])),  # 6/3/3 exactly: three micro-steps each
    ([0.0, 1.0], [8, 8], (4, 2), (2, [4, 4])),  # a rank not measured: uniform
])
def test_plan_even_steps(speeds, caps, uniform, expected):
    micro, accum = uniform
    batch = micro * accum * len(speeds)
    got = plan_even_steps(batch, speeds, caps, uniform=uniform)
    steps, micros = got
    assert sum(m * steps for m in micros) == batch  # every micro-batch full: micro × accum is each rank's share exactly
    assert all(m <= cap for m, cap in zip(micros, caps, strict=True))
    if got != (accum, [micro] * len(speeds)):
        assert step_time([micro * accum] * len(speeds), speeds) >= (1 + MIN_GAIN) * step_time([m * steps for m in micros], speeds)
    assert got == expected


def test_plan_command_auto_from_the_probe_gives_each_rank_its_env():
    plan = plan_command("auto", {"node1": 1, "node2": 2}, micro_batch=4, grad_accum=2,
                        rates={"node1": [3.0], "node2": [1.0, 1.0]})
    assert plan.global_batch == 24
    # 14.4/4.8/4.8 is the ideal; micro <= 4 leaves 16/4/4 (4 micro-steps) as the shortest step
    assert [(s.rank, s.samples_per_step, s.micro_batch, s.accum) for s in plan.nodes["node1"]] == [(0, 16, 4, 4)]
    assert [(s.rank, s.samples_per_step, s.micro_batch, s.accum) for s in plan.nodes["node2"]] == [(0, 4, 1, 4), (1, 4, 1, 4)]
    assert "compute probe" in plan.why
    assert plan.env("node2", 1) == {"FTWIZ_BALANCE": "auto", "FTWIZ_GLOBAL_BATCH": "24", "FTWIZ_SAMPLES_PER_STEP": "4",
                                    "FTWIZ_MICRO_BATCH": "1", "FTWIZ_GRAD_ACCUM": "4"}
    assert set(plan.env("node1", 0)) == set(ENV_KEYS)
    assert plan.env("node2", 2) == {} and plan.env("nodeX", 0) == {}
    record = plan.record()
    assert record["mode"] == "auto" and record["global_batch"] == 24
    assert [(r["rank"], r["node"], r["local_rank"], r["samples_per_step"]) for r in record["ranks"]] == [
        (None, "node1", 0, 16), (None, "node2", 0, 4), (None, "node2", 1, 4)]
    assert plan.summary().startswith("balance auto: samples per step node1 r0 16 (4x4), node2 r0 4 (1x4), node2 r1 4 (1x4) of 24")


@pytest.mark.parametrize(("mode", "rates", "why"), [
    ("off", {"a": [3.0], "b": [1.0]}, 'balance = "off"'),
    ("auto", None, "uniform split: no compute probe ran"),
    ("auto", {"a": [3.0]}, "uniform split: no compute figure for b"),
    ("auto", {"a": [3.0], "b": [0.0]}, "uniform split: no compute figure for b"),
    ("auto", {"a": [1.0], "b": [1.05]}, "promise less than 10% faster steps"),
])
def test_plan_command_says_why_the_split_is_uniform(mode, rates, why):
    plan = plan_command(mode, {"a": 1, "b": 1}, micro_batch=2, grad_accum=4, rates=rates)
    assert why in plan.why
    assert [(s.samples_per_step, s.micro_batch, s.accum) for n in ("a", "b") for s in plan.nodes[n]] == [(8, 2, 4), (8, 2, 4)]
    assert plan.env("b", 0)["FTWIZ_BALANCE"] == mode  # the env still says what was set: off, or auto kept uniform


def test_plan_command_names_why_no_figures():
    plan = plan_command("auto", {"a": 1, "b": 1}, micro_batch=1, grad_accum=2, rates=None,
                        no_rates="every rank runs on the same kind of device")
    assert plan.why == "uniform split: every rank runs on the same kind of device"


def test_plan_command_off_without_a_declared_batch_sets_nothing_and_says_so():
    plan = plan_command("off", {"a": 2}, micro_batch=1, grad_accum=8, rates=None, declared=False)
    assert not plan.sets_env and plan.env("a", 0) == {} and plan.record()["ranks"] == []
    assert plan.summary() == "balance off: no FTWIZ_* batch variables set; declare [job] micro_batch_size and grad_accum_steps to have them"
