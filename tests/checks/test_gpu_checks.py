"""GPU checks, memory fit and routing advice against agents serving constructed NVML fixtures.

We have no GPU: the agents read ``agent/fixtures/*.json`` (constructed from NVIDIA documentation, not
recorded; the degraded one has faults injected by hand on GPUs 2, 5, 6 and 7) through the same probe code
that reads live NVML. Everything else (agents, HTTP, the checklist) is real.
"""

from __future__ import annotations

import pytest

from tests.checks.conftest import describe, failures, rows, run
from tests.cluster.harness import REPO_ROOT

FIXTURES = REPO_ROOT / "agent" / "fixtures"


@pytest.fixture(scope="module")
def gpu_cluster(request):
    """node0: 8× H100, node1: the same with injected faults, node2: 1× RTX 4090 (no sshd: SSH is not under test)."""
    from tests.cluster.fixtures import require_cluster_support
    from tests.cluster.harness import Cluster

    require_cluster_support(need_sshd=False)
    cluster = Cluster.create(3, sshd=False, gpu_fixture=[
        str(FIXTURES / "h100-sxm-8x.json"), str(FIXTURES / "h100-sxm-8x-degraded.json"), str(FIXTURES / "rtx4090-1x.json")])
    request.addfinalizer(cluster.close)
    return cluster


def test_gpu_faults_are_named_by_node_and_gpu(gpu_cluster):
    config = gpu_cluster.config(workload="sft", model="meta-llama/Llama-2-7b-hf", method="qlora", seq_len=2048)
    results = run(config, ssh=False)
    assert ("gpu.ecc", "node1") in failures(results), describe(results)
    assert not {f for f in failures(results) if f[1] != "node1" and f[0].startswith("gpu.")}, describe(results)
    ecc = [r for r in rows(results, "gpu.ecc", "node1") if r.status == "fail"]
    assert ecc and all("constructed from NVIDIA documentation" in r.detail for r in ecc)
    assert any("nvidia-smi -r -i" in r.hint or "serviced" in r.hint for r in ecc)
    assert [r.status for r in rows(results, "gpu.ecc", "node0")] == ["pass"]
    assert rows(results, "gpu.present", "node0")[0].detail.startswith("8× NVIDIA H100 80GB HBM3")
    throttled = rows(results, "gpu.throttle", "node1")
    assert any(r.status == "warn" for r in throttled), describe(throttled)
    assert any(r.status == "warn" and "pid" in r.detail for r in rows(results, "gpu.processes", "node0"))
    # software parity sees the same driver everywhere
    assert not [r for r in rows(results, "env.parity") if "driver" in r.detail and r.status != "pass"]


def test_memory_fit_and_heterogeneous_advice(gpu_cluster):
    config = gpu_cluster.config(workload="sft", model="meta-llama/Llama-2-7b-hf", method="qlora", seq_len=2048)
    results = run(config, ssh=False, only=["mem", "plan", "agent"])
    assert not failures(results), describe(results)
    for node in ("node0", "node2"):
        (fit,) = rows(results, "mem.fit", node)
        assert fit.status == "pass" and "fits" in fit.detail and "catalog: meta-llama/Llama-2-7b-hf" in fit.detail
    (hetero,) = rows(results, "plan.hetero")
    assert hetero.status == "warn" and "slowest" in hetero.detail and hetero.hint
    (batch,) = rows(results, "plan.batch")
    assert batch.status == "pass" and "17 data-parallel ranks" in batch.detail


def test_full_fine_tune_that_cannot_fit_names_the_lever(gpu_cluster):
    config = gpu_cluster.config(workload="sft", model="meta-llama/Llama-2-13b-hf", method="full", seq_len=4096,
                                micro_batch_size=4, gradient_checkpointing=False, optimizer="adamw")
    results = run(config, ssh=False, only=["mem", "agent"])
    (fit,) = rows(results, "mem.fit", "node2")
    assert fit.status == "fail" and "won't fit" in fit.detail
    assert fit.hint.startswith("set ") and "saves" in fit.hint


def test_explicit_gpu_count_without_gpus_fails_and_all_warns(gpu_cluster):
    config = gpu_cluster.config(workload="allreduce")
    config.node("node2").gpus = 2  # the 4090 node has one GPU
    config.node("node1").gpus = [0, 9]
    results = run(config, ssh=False, only=["gpu", "agent"])
    assert failures(results) == {("gpu.present", "node1"), ("gpu.present", "node2")}, describe(results)
    assert "gpus = 2 but node2 has 1" in rows(results, "gpu.present", "node2")[0].detail
    assert "GPU index 9 not on node1" in rows(results, "gpu.present", "node1")[0].detail
