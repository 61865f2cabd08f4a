"""The decisions behind the mesh and the sync forecast, on constructed matrices (no network, no root).

Every matrix here is constructed for the test (node names and Gbit/s figures chosen by hand), not recorded.
"""

from __future__ import annotations

import itertools

import pytest

from shared import catalog, meshplan, syncplan
from shared.config import JobConfig
from shared.meshplan import Link, MeshMatrix
from tests.checks.conftest import tiny_llama_config


def _mesh(gbit: dict[tuple[str, str], float], names=("node0", "node1", "node2"), latency: dict | None = None) -> MeshMatrix:
    links = [Link(src=a, dst=b, gbit_per_s=gbit.get((a, b), 5.0), latency_ms=(latency or {}).get((a, b), 0.2))
             for a in names for b in names if a != b]
    return MeshMatrix(nodes=list(names), links=links, rounds=len(names) - 1)


@pytest.mark.parametrize("n", range(2, 18))
def test_round_robin_meets_every_pair_once_in_disjoint_rounds(n):
    names = [f"n{i}" for i in range(n)]
    rounds = meshplan.round_robin(names)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [frozenset(pair) for pairs in rounds for pair in pairs]
    assert sorted(map(sorted, seen)) == sorted(map(sorted, (frozenset(p) for p in itertools.combinations(names, 2))))
    for pairs in rounds:
        members = [m for pair in pairs for m in pair]
        assert len(members) == len(set(members)), pairs


def test_round_robin_of_one_node_is_empty():
    assert meshplan.round_robin(["solo"]) == []


def test_one_slow_node_of_three_is_named_although_most_links_are_slow():
    slow_node = {("node2", "node0"): 0.09, ("node0", "node2"): 0.09, ("node2", "node1"): 0.1, ("node1", "node2"): 0.09}
    mesh = _mesh({**slow_node, ("node0", "node1"): 1.7, ("node1", "node0"): 4.4})
    assert mesh.median_gbit() < 0.2  # the plain median is a slow link here: it cannot be the yardstick
    assert mesh.typical_gbit() == pytest.approx(4.4)
    assert {(lk.src, lk.dst) for lk in meshplan.slow_links(mesh)} == set(slow_node)


def test_noise_between_healthy_links_is_not_slow():
    mesh = _mesh({("node0", "node1"): 1.6, ("node1", "node2"): 4.5, ("node2", "node0"): 3.0})
    assert meshplan.slow_links(mesh) == []


def test_latency_above_ten_ms_is_named_slowest_first():
    mesh = _mesh({}, latency={("node0", "node1"): 20.5, ("node1", "node0"): 21.0})
    assert [(lk.src, lk.dst) for lk in meshplan.slow_latency(mesh)] == [("node1", "node0"), ("node0", "node1")]


def test_bottleneck_is_the_slowest_link_among_the_given_nodes():
    mesh = _mesh({("node2", "node0"): 0.1, ("node0", "node1"): 2.0})
    assert (mesh.link("node2", "node0") == meshplan.bottleneck(mesh))
    assert meshplan.bottleneck(mesh, ["node0", "node1"]).gbit_per_s == 2.0


def test_matrix_rows_are_senders():
    mesh = _mesh({("node0", "node2"): 0.5})
    rows = mesh.matrix()
    assert rows[0][2] == 0.5 and rows[0][0] is None and rows[2][0] == 5.0


def _rows(mesh: MeshMatrix):
    from shared.config import ClusterConfig, FtwizConfig, NodeConfig
    from tui.checks.base import CheckContext
    from tui.checks.mesh import mesh_rows

    config = FtwizConfig(cluster=ClusterConfig(), nodes=[NodeConfig(name=n, host=f"10.0.0.{i + 1}") for i, n in enumerate(mesh.nodes)])
    return mesh_rows(CheckContext(config, {}, client=None), mesh)


def test_rows_name_the_node_whose_own_link_is_slow_not_each_pair():
    names = ("node0", "node1", "node2", "node3")
    slow = {(a, b): 0.09 for a in names for b in names if a != b and "node3" in (a, b)}
    rows = _rows(_mesh(slow, names))
    assert rows[0].node is None and rows[0].status == "warn" and "slow: " in rows[0].detail
    assert [r.node for r in rows[1:]] == ["node3"]
    assert "every link both directions at node3" in rows[1].detail


def test_rows_name_a_single_slow_pair_and_its_asymmetry():
    names = ("node0", "node1", "node2", "node3")
    rows = _rows(_mesh({("node1", "node2"): 0.1}, names))
    assert [(r.node, r.status) for r in rows[1:]] == [("node1", "warn")]
    assert "node1→node2 0.10" in rows[1].detail and "asymmetric: node2→node1 5.00" in rows[1].detail


def test_rows_name_a_delayed_pair_once():
    rows = _rows(_mesh({}, latency={("node0", "node1"): 20.5, ("node1", "node0"): 21.0}))
    delayed = [r for r in rows[1:] if "connect" in r.detail]
    assert len(delayed) == 1 and "node1→node0 connect 21.0 ms (node0→node1 20.5 ms)" in delayed[0].detail


def test_healthy_mesh_is_one_passing_row():
    rows = _rows(_mesh({}))
    assert len(rows) == 1 and rows[0].status == "pass" and "typical 5.00 Gbit/s" in rows[0].detail


# ------------------------------------------------------------------ forecast arithmetic


def _arch():
    return catalog.arch_from_hf_config(tiny_llama_config())


def test_ring_allreduce_is_two_n_minus_one_over_n_bytes_over_the_link():
    # 6 MB over 3 ranks at 0.1 Gbit/s: 2·2/3·6e6·8 / 1e8 = 0.64 s, plus 4 one-way hops of 1 ms in one bucket
    assert syncplan.ring_allreduce_seconds(6_000_000, 3, 0.1, 0.0) == pytest.approx(0.64)
    assert syncplan.ring_allreduce_seconds(6_000_000, 3, 0.1, 2.0) == pytest.approx(0.644)
    assert syncplan.ring_allreduce_seconds(6_000_000, 1, 0.1, 2.0) == 0.0


def test_full_finetune_moves_every_parameter_lora_only_the_adapters():
    arch = _arch()
    full = syncplan.forecast(arch, JobConfig(method="full", sharding="ddp"), ranks=3, nodes=3, gbit_per_s=0.1)
    assert full.trainable_params == 115_008 and full.bytes_per_step == 115_008 * 4
    assert full.sync_s == pytest.approx(2 * 2 / 3 * 115_008 * 4 * 8 / 1e8)
    lora = syncplan.forecast(arch, JobConfig(method="lora", lora_r=4, target_modules=["q_proj", "v_proj"]),
                             ranks=3, nodes=3, gbit_per_s=0.1)
    assert lora.trainable_params == 2048 and lora.sync_s == pytest.approx(full.sync_s * 2048 / 115_008)


def test_share_speedup_and_levers_in_numbers():
    arch = _arch()
    job = JobConfig(method="full", sharding="ddp", grad_accum_steps=4)
    result = syncplan.forecast(arch, job, ranks=3, nodes=3, gbit_per_s=0.1, compute_s=0.1,
                               without_slowest=("node2", 2, 1.0, 0.2))
    sync = result.sync_s
    assert result.share == pytest.approx(sync / (sync + 0.1))
    assert result.speedup == pytest.approx(3 * 0.1 / (0.1 + sync))
    accum, lora, fewer = result.levers
    assert accum.change == "grad_accum_steps = 8" and accum.share == pytest.approx(sync / (sync + 0.2))
    assert lora.change == 'method = "lora"' and lora.sync_s < sync / 10
    assert fewer.change == "leave out node2" and fewer.sync_s == pytest.approx(syncplan.ring_allreduce_seconds(115_008 * 4, 2, 1.0, 0.2))


def test_fsdp_gathers_parameters_twice_and_scatters_gradients_each_micro_batch():
    arch = _arch()
    job = JobConfig(method="full", sharding="fsdp", precision="bf16", grad_accum_steps=2)
    result = syncplan.forecast(arch, job, ranks=4, nodes=4, gbit_per_s=1.0)
    per_micro = (2 * 115_008 * 2 + 115_008 * 4)
    assert result.bytes_per_step == 2 * per_micro
    assert result.sync_s == pytest.approx(2 * per_micro * 3 / 4 * 8 / 1e9)


def test_compute_estimate_uses_six_flop_per_param_per_token_for_full():
    arch = _arch()
    job = JobConfig(method="full", seq_len=100, micro_batch_size=2, grad_accum_steps=5)
    assert syncplan.compute_seconds(arch, job, 100.0, mfu=0.5) == pytest.approx(1000 * 6 * 115_008 / 50e12)


def test_forecast_refuses_a_link_without_bandwidth():
    with pytest.raises(ValueError, match="gbit_per_s must be positive"):
        syncplan.forecast(_arch(), JobConfig(), ranks=2, nodes=2, gbit_per_s=0.0)


# ------------------------------------------------------------------ output, progress, timer


def test_plain_matrix_marks_slow_links_and_json_carries_both_matrices():
    from tui.checks.meshtext import mesh_json, mesh_plain

    mesh = _mesh({("node2", "node0"): 0.09, ("node0", "node2"): 0.09, ("node2", "node1"): 0.1, ("node1", "node2"): 0.09})
    lines = mesh_plain(mesh)
    assert lines[3].split() == ["node2", "0.09!", "0.10!", "—"]
    doc = mesh_json(mesh)
    assert doc["gbit_per_s"][2][1] == 0.1 and doc["latency_ms"][0][1] == 0.2 and len(doc["slow"]) == 4


def test_progress_line_sync_field_is_shown_beside_the_forecast():
    from dataclasses import replace

    from shared.protocol import Progress
    from tui.launch.progress import ProgressModel, format_progress

    model = ProgressModel()
    model.update("node0", 0, Progress(step=3, total_steps=10, loss=2.0, sync_s=0.71))
    snap = replace(model.snapshot, sync_forecast_s=0.8)
    assert snap.sync_s == 0.71 and "sync 0.71 s/step (forecast 0.80)" in format_progress(snap)


def test_union_of_bucket_intervals_counts_overlap_once():
    from agent.workloads.synctime import union_seconds

    assert union_seconds([(0.0, 1.0), (0.5, 1.5), (3.0, 3.25)]) == pytest.approx(1.75)
    assert union_seconds([]) == 0.0
