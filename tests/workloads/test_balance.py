"""``balance = "auto"``: the share planner (tables), and the same mathematics as one process on the whole batch.

The gradient test runs two gloo ranks on CPU (DDP, and FSDP2 sharded as the recipe shards, over a tiny random
Llama) with unequal shares of one global batch and compares the averaged gradients (under FSDP the gathered full
tensors) with a single process's gradients of ``Σ per-sample loss / batch``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from agent.workloads.balance import MIN_GAIN, RankShare, drifted, env_for, fit_costs, plan_shares, speed_of, step_slices, step_time
from tests.listening import free_port


@pytest.mark.parametrize(("batch", "speeds", "caps", "expected"), [
    # (global batch, samples/s per rank, largest micro-batch per rank) -> (samples_per_step, micro_batch, accum) per rank
    (8, [1.0, 1.0], [4, 4], [(4, 4, 1), (4, 4, 1)]),
    (8, [1.0, 3.0], [8, 8], [(2, 2, 1), (6, 6, 1)]),
    (8, [1.0, 3.0], [8, 2], [(3, 1, 3), (5, 2, 3)]),  # the fast card fits 2: three micro-steps, so 3 samples at least each
    (12, [1.0, 2.0, 3.0], [12, 12, 12], [(2, 2, 1), (4, 4, 1), (6, 6, 1)]),
    (16, [1.0, 100.0], [1, 16], [(16 - 15, 1, 1), (15, 15, 1)]),  # at least one sample per rank
    (8, [1.0, 1.0, 1.0], [8, 8, 8], [(3, 3, 1), (3, 3, 1), (2, 2, 1)]),  # the remainder to the first
    (8, [0.0, 0.0], [4, 4], [(4, 4, 1), (4, 4, 1)]),  # nothing measured yet: uniform
])
def test_plan_shares(batch, speeds, caps, expected):
    shares = plan_shares(batch, speeds, caps, [f"n{i}" for i in range(len(speeds))])
    assert [(s.samples_per_step, s.micro_batch, s.accum) for s in shares] == expected
    assert sum(s.samples_per_step for s in shares) == batch  # the global batch stays what was configured
    assert all(s.micro_batch <= cap for s, cap in zip(shares, caps, strict=True))
    assert len({s.accum for s in shares}) == 1  # the same number of micro-steps on every rank


@pytest.mark.parametrize(("batch", "speeds", "caps", "expected"), [
    # DDP: each rank its own number of micro-steps, so the slow rank keeps full micro-batches
    (16, [3.0, 1.0], [4, 4], [(12, 4, 3), (4, 4, 1)]),
    (16, [1.0, 3.0], [4, 8], [(4, 4, 1), (12, 6, 2)]),
    (16, [15.0, 1.0], [4, 4], [(15, 4, 4), (1, 1, 1)]),
    (16, [1.0, 1.0], [4, 4], [(8, 4, 2), (8, 4, 2)]),  # what balance = "off" runs: micro 4 x accum 2 each
])
def test_plan_shares_ddp_lets_each_rank_accumulate_its_own(batch, speeds, caps, expected):
    shares = plan_shares(batch, speeds, caps, [f"n{i}" for i in range(len(speeds))], same_accum=False)
    assert [(s.samples_per_step, s.micro_batch, s.accum) for s in shares] == expected
    assert sum(s.samples_per_step for s in shares) == batch


@pytest.mark.parametrize(("speeds", "expected"), [
    # 16 samples on 2 ranks: uneven only when the measured speeds promise a step MIN_GAIN (10 %) faster
    ([1.0, 1.08], [8, 8]),  # proportional is 8/8 itself
    ([1.0, 1.15], [8, 8]),  # proportional 7/9: 9/1.15 = 7.8 s against 8.0 s uniform, 2 % faster: not worth it
    ([1.0, 1.3], [7, 9]),  # 7/9: 7.0 s against 8.0 s, 14 % faster
    ([1.0, 3.0], [4, 12]),
])
def test_an_uneven_split_must_promise_a_faster_step(speeds, expected):
    shares = plan_shares(16, speeds, [16, 16], ["a", "b"], same_accum=False)
    assert [s.samples_per_step for s in shares] == expected
    proportional = plan_shares(16, speeds, [16, 16], ["a", "b"], same_accum=False, min_gain=0.0)
    gain = step_time([8, 8], speeds) / step_time([s.samples_per_step for s in proportional], speeds) - 1
    assert (expected == [8, 8]) == (gain < MIN_GAIN)


def test_a_fixed_cost_per_micro_step_is_planned_for():
    """Equal cards, but each of rank 1's micro-steps costs 0.1 s more (say, a slow host feeding its GPU): by samples/s
    measured on 8 samples it reads 44 samples/s, and a split by that (11/5) ends its steps at 0.15 s; evening out
    ``micro-steps x fixed + samples / speed`` gives 13/3, both ranks done at 0.13 s."""
    speeds, fixed, caps = [100.0, 100.0], [0.0, 0.1], [16, 16]
    shares = plan_shares(16, speeds, caps, ["a", "b"], same_accum=False, fixed_s=fixed)
    assert [(s.samples_per_step, s.micro_batch, s.accum) for s in shares] == [(13, 13, 1), (3, 3, 1)]
    naive = plan_shares(16, [100.0, 8 / (0.1 + 8 / 100)], caps, ["a", "b"], same_accum=False)
    assert [s.samples_per_step for s in naive] == [11, 5]
    assert step_time([13, 3], speeds, fixed_s=fixed, accums=[1, 1]) == pytest.approx(0.13)
    assert step_time([11, 5], speeds, fixed_s=fixed, accums=[1, 1]) == pytest.approx(0.15)
    # each micro-step pays it: a rank that must split its share (cap 2) pays it per micro-step, and FSDP's common
    # micro-steps make every rank pay its own fixed cost that many times
    capped = plan_shares(16, speeds, [2, 16], ["a", "b"], same_accum=False, fixed_s=[0.01, 0.0])
    assert [(s.samples_per_step, s.accum) for s in capped] == [(6, 3), (10, 1)]
    assert [(s.samples_per_step, s.accum) for s in plan_shares(16, speeds, caps, ["a", "b"], fixed_s=fixed)] == [(13, 1), (3, 1)]
    # FSDP with caps of 4: uniform is 8/8 in 2 micro-steps; anything uneven needs 3, which costs rank 1 0.1 s more
    # than its fewer samples save (12/4: 0.34 s against 0.28 s)
    fsdp = plan_shares(16, speeds, [4, 4], ["a", "b"], fixed_s=fixed)
    assert [(s.samples_per_step, s.accum) for s in fsdp] == [(8, 2), (8, 2)]
    # a rank 3x faster but capped at 4 per micro-step: a third micro-step lets it take 12 (0.07 s against 8/8 in two:
    # 0.10 s); a fourth would cost rank 1 its 0.01 s once more for nothing
    faster = plan_shares(16, [300.0, 100.0], [4, 4], ["a", "b"], fixed_s=[0.0, 0.01])
    assert [(s.samples_per_step, s.accum) for s in faster] == [(12, 3), (4, 3)]
    # no fixed cost: the proportional split, as before; equal costs everywhere: uniform
    assert [s.samples_per_step for s in plan_shares(16, [1.0, 3.0], caps, ["a", "b"], same_accum=False, fixed_s=[0.0, 0.0])] == [4, 12]
    assert [s.samples_per_step for s in plan_shares(16, speeds, caps, ["a", "b"], same_accum=False, fixed_s=[0.1, 0.1])] == [8, 8]


def test_the_fixed_cost_is_fitted_from_two_sizes_and_left_out_of_a_small_shares_speed():
    # a pass of 8 samples in 0.18 s and of one in 0.11 s: 100 samples/s and 0.1 s per micro-step
    speed, fixed = fit_costs(8, 0.18, 0.11)
    assert speed == pytest.approx(100.0) and fixed == pytest.approx(0.1)
    # one sample as slow as eight: the samples cost less than the noise, the pass is a fixed cost (1 % of it per sample)
    speed, fixed = fit_costs(8, 0.18, 0.2)
    assert speed == pytest.approx(8 / (0.01 * 0.18)) and fixed == pytest.approx(0.18 - 0.01 * 0.18 / 8)
    # a micro-batch of one: one size, no fixed cost told apart
    assert fit_costs(1, 0.05, 0.0) == (pytest.approx(20.0), 0.0)
    # seen on a quiet 2-core host: a rank of a second's fixed cost whose one-sample pass ran 10 ms longer than its
    # eight-sample one, beside a rank of 4 000 samples/s; read as all per-sample it got 1 of 16 samples for a step no
    # shorter, now the split stays uniform
    fast, slow = fit_costs(8, 0.004, 0.00225), fit_costs(8, 1.01, 1.02)
    assert slow[1] == pytest.approx(1.0, abs=0.01)
    shares = plan_shares(16, [fast[0], slow[0]], [8, 8], ["n0", "n1"], same_accum=False, fixed_s=[fast[1], slow[1]])
    assert [s.samples_per_step for s in shares] == [8, 8]
    # the drift check: a rank left with one sample per step (10 steps of 0.11 s) is still 100 samples/s, not 9
    assert speed_of(10, 10, 1.1, 0.1) == pytest.approx(100.0)
    assert 10 / 1.1 == pytest.approx(9.09, abs=0.01)
    # a fixed cost that the step no longer pays (it was measured at the start) cannot make the samples free
    assert speed_of(10, 10, 0.5, 0.1) == pytest.approx(10 / (0.05 * 0.5))
    with pytest.raises(ValueError, match="fixed_s"):
        plan_shares(16, speeds_of_two(), [16, 16], ["a", "b"], fixed_s=[0.1])


def speeds_of_two() -> list[float]:
    return [1.0, 1.0]


def test_slices_cover_the_global_batch_once():
    shares = plan_shares(10, [1.0, 2.5, 1.5], [2, 3, 3], ["a", "b", "c"])
    slices = [piece for rank in range(3) for piece in step_slices(shares, rank)]
    covered = [i for start, stop in slices for i in range(start, stop)]
    assert covered == list(range(10))
    assert all(stop - start <= shares[r].micro_batch for r in range(3) for start, stop in step_slices(shares, r))


def test_bad_inputs_and_drift_and_env():
    with pytest.raises(ValueError, match="smaller than"):
        plan_shares(1, [1.0, 1.0], [1, 1], ["a", "b"])
    with pytest.raises(ValueError, match="at least one"):
        plan_shares(4, [1.0, 1.0], [0, 1], ["a", "b"])
    assert drifted([10.0, 10.0, 10.0], [11.0, 7.0, 12.5]) == [1, 2]
    assert env_for(RankShare(1, "b", 6, 2, 3), "auto", 8) == {
        "FTWIZ_BALANCE": "auto", "FTWIZ_GLOBAL_BATCH": "8", "FTWIZ_SAMPLES_PER_STEP": "6",
        "FTWIZ_MICRO_BATCH": "2", "FTWIZ_GRAD_ACCUM": "3"}


def _model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, max_position_embeddings=64)
    return LlamaForCausalLM(config).double()  # float64: the comparison is of mathematics, not of rounding


def _samples():
    import torch

    generator = torch.Generator().manual_seed(1)
    lengths = [5, 9, 12, 7, 16, 3, 10, 14]  # unequal: padding must not change any sample's weight
    return [torch.randint(0, 64, (n,), generator=generator).tolist() for n in lengths]


def _batch(samples):
    from agent.workloads.data import PaddingCollator

    return PaddingCollator(0)([{"input_ids": s} for s in samples])


def _rank_main(rank: int, world: int, port: int, out: str, sharding: str) -> None:
    import torch
    import torch.distributed as dist

    from agent.workloads.balance import weighted_loss

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    samples = _samples()
    fsdp = sharding == "fsdp"
    # DDP: rank 0 takes 3 samples, 1 per micro-step; rank 1 takes 5. FSDP: the same micro-steps on each (3), so
    # rank 0 runs 3 micro-batches of 1 and rank 1 micro-batches of 2, 2 and 1: unequal shares and unequal sizes
    shares = plan_shares(len(samples), [1.0, 2.0], [1, 3], ["a", "b"], same_accum=fsdp)
    assert [s.samples_per_step for s in shares] == [3, 5]
    if fsdp:
        from agent.workloads.dist import Ranks
        from agent.workloads.fsdp import shard

        model = _model()
        shard(model, Ranks(rank, rank, world, world), "gloo", compute_dtype=None, offload=False)  # as the recipe shards
    else:
        model = torch.nn.parallel.DistributedDataParallel(_model())
    slices = step_slices(shares, rank)
    for micro, (start, stop) in enumerate(slices):
        sync = micro == len(slices) - 1
        if fsdp:
            model.set_requires_gradient_sync(sync)  # as the Balancer does: reduce-scatter once, in the last backward
        with model.no_sync() if not sync and not fsdp else _nothing():
            loss, _ = weighted_loss(model, _batch(samples[start:stop]), world_size=world, global_batch=len(samples))
            loss.backward()
    # FSDP: each rank holds a shard of every gradient; gather the full tensors (a collective: every rank)
    grads = {name: p.grad.full_tensor() if fsdp else p.grad
             for name, p in (model if fsdp else model.module).named_parameters()}
    if rank == 0:
        torch.save(grads, out)
    dist.barrier()  # neither rank tears down while the other still talks to it
    dist.destroy_process_group()
    # Leave as the workloads do (agent/workloads/__main__.py exit_now): a rank was seen killed by SIGABRT in the
    # interpreter's teardown ("terminate called without an active exception", a gloo thread still joinable).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_unequal_shares_give_the_single_process_gradient(tmp_path: Path, sharding: str):
    import torch
    import torch.multiprocessing as mp

    from agent.workloads.balance import weighted_loss

    out = str(tmp_path / "grads.pt")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_rank_main, args=(2, free_port(), out, sharding), nprocs=2, join=True)
    balanced = torch.load(out)
    reference = _model()
    samples = _samples()
    loss, total = weighted_loss(reference, _batch(samples), world_size=1, global_batch=len(samples))
    loss.backward()  # Σ over the global batch / global batch, in one process
    assert loss.item() == pytest.approx(total / len(samples))
    for name, param in reference.named_parameters():
        torch.testing.assert_close(balanced[name], param.grad, rtol=1e-9, atol=1e-12, msg=name)


def test_the_balancer_takes_its_nodes_micro_batch_cap_from_job_json(tmp_path: Path, monkeypatch):
    """``max_micro_batch`` in job.json (the launch writes the checklist's per-GPU-node caps there) bounds this
    node's micro-batch; another node's cap, no cap, or a cap below micro_batch_size leave micro_batch_size; a cap
    that is not a whole number is refused naming the file and the key (it comes from a file: a claim)."""
    import json

    from agent.workloads.balancing import Balancer
    from agent.workloads.dist import Ranks
    from agent.workloads.errors import WorkloadError
    from agent.workloads.spec import load_spec

    def balancer(caps, node: str = "big") -> Balancer:
        path = tmp_path / "job.json"
        path.write_text(json.dumps({"workload": "sft", "micro_batch_size": 2, "grad_accum_steps": 4, "balance": "auto",
                                    **({"max_micro_batch": caps} if caps is not None else {})}))
        monkeypatch.setenv("FTWIZ_NODE", node)
        return Balancer(None, list(range(64)), None, load_spec(str(path)), Ranks(0, 0, 2, 1), fsdp=True)

    assert balancer({"big": 6, "small": 2}).max_micro == 6
    assert balancer({"big": 6, "small": 2}, node="small").max_micro == 2
    assert balancer({"other": 9}).max_micro == 2 and balancer(None).max_micro == 2 and balancer({"big": 1}).max_micro == 2
    with pytest.raises(WorkloadError, match=r"job\.json: max_micro_batch\['big'\] must be a whole number >= 1 \(got '6'\)"):
        balancer({"big": "6"})


SLOW_S = 0.05
"""Sleep of a slowed rank per sample in each decoder layer's MLP (inside the layer's compute, outside FSDP's hooks):
a slow card takes longer for more samples. (A sleep per forward whatever its size is a fixed cost per micro-step,
which the balancer measures apart: giving that rank fewer samples would not make its step shorter.)"""


FIXED_S = 0.5
"""Sleep of a rank with a fixed cost in each decoder layer's MLP, per forward whatever the samples. Long enough that
only a per-sample time misread by more than 5x on a busy host (more than 14 ms a sample, against about 1-3) would
promise the 10 % faster step that an uneven split needs."""


def _slowed(model, rank_is_slow, *, per_sample: bool = True) -> None:
    import time

    def sleep(module, args):
        if rank_is_slow():
            time.sleep(SLOW_S * args[0].shape[0] if per_sample else FIXED_S)

    for layer in model.model.layers:
        layer.mlp.register_forward_pre_hook(sleep)


def _balancer_main(rank: int, world: int, port: int, out: str, job: str, sharding: str, fixed: bool = False) -> None:
    import json

    import torch.distributed as dist

    from agent.workloads.balancing import FIRST_CHECK, Balancer, wrap_ddp
    from agent.workloads.data import PaddingCollator
    from agent.workloads.dist import Ranks
    from agent.workloads.fsdp import shard
    from agent.workloads.spec import load_spec

    os.environ["FTWIZ_NODE"] = f"n{rank}"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = _model()
    slow = {"rank": 1}
    _slowed(model, lambda: slow["rank"] == rank, per_sample=not fixed)
    fsdp = sharding == "fsdp"
    if fsdp:
        shard(model, Ranks(rank, rank, world, world), "gloo", compute_dtype=None, offload=False)
    else:
        model = wrap_ddp(model, Ranks(rank, rank, world, world), "gloo")
    dataset = [{"input_ids": s} for s in _samples() * 4]
    balancer = Balancer(model, dataset, PaddingCollator(0), load_spec(job), Ranks(rank, rank, world, world), fsdp=fsdp)
    balancer.calibrate(0)
    calibrated = [s.samples_per_step for s in balancer.shares]
    if not fixed:
        slow["rank"] = 0  # the other rank slows down: the drift check must move the shares back
    for step in range(1, FIRST_CHECK + 2):  # the first step gives no speed; the check follows FIRST_CHECK more
        balancer.step(step)
        model.zero_grad(set_to_none=True)
        balancer.finish_step(step)
    if rank == 0:
        Path(out).write_text(json.dumps({"calibrated": calibrated, "drifted": [s.samples_per_step for s in balancer.shares],
                                         "fixed_s": balancer.fixed}))
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_calibration_and_drift_see_each_ranks_own_compute(tmp_path: Path, sharding: str):
    """Rank 1 sleeps in each layer's MLP (a slow card): it must get fewer samples; then rank 0 does, and the drift
    check must hand the larger share to rank 1 (the fast rank's wait for the slow one is not its compute).

    Under FSDP every forward all-gathers, so a fast rank's wall time is the slow one's: the calibration timed the
    passes' wall time (every rank read at the slowest one's speed: 8/8 here) and there was no drift check."""
    import json

    import torch.multiprocessing as mp

    job = tmp_path / "job.json"
    job.write_text(json.dumps({"workload": "sft", "micro_batch_size": 2, "grad_accum_steps": 4, "balance": "auto",
                               "max_micro_batch": {"n0": 8, "n1": 8}}))
    out = tmp_path / "shares.json"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_balancer_main, args=(2, free_port(), str(out), str(job), sharding), nprocs=2, join=True)
    shares = json.loads(out.read_text())
    assert sum(shares["calibrated"]) == 16 and shares["calibrated"][0] > shares["calibrated"][1], shares
    assert sum(shares["drifted"]) == 16 and shares["drifted"][1] > shares["drifted"][0], shares


@pytest.mark.slow
def test_a_rank_whose_every_micro_step_costs_more_keeps_its_share(tmp_path: Path):
    """Rank 1 sleeps 0.5 s in each layer's MLP per forward, whatever its samples: a fixed cost per micro-step, which
    fewer samples would not shorten. The calibration's two sizes measure it apart (rank 1's fixed cost about 1 s, its
    speed per sample like rank 0's), so the split stays uniform through the calibration and the drift check; a speed
    of samples over time (the model before) read rank 1 many times slower and gave it 1 of the 16 samples for a step
    no shorter."""
    import json

    import torch.multiprocessing as mp

    job = tmp_path / "job.json"
    job.write_text(json.dumps({"workload": "sft", "micro_batch_size": 2, "grad_accum_steps": 4, "balance": "auto",
                               "max_micro_batch": {"n0": 8, "n1": 8}}))
    out = tmp_path / "shares.json"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_balancer_main, args=(2, free_port(), str(out), str(job), "ddp", True), nprocs=2, join=True)
    shares = json.loads(out.read_text())
    assert shares["calibrated"] == [8, 8] and shares["drifted"] == [8, 8], shares
    fixed = shares["fixed_s"]
    assert fixed[1] >= 0.8 * 2 * FIXED_S and fixed[0] < 0.5 * fixed[1], shares
