"""Checks on constructed reports, for faults a namespace cluster cannot produce (all its nodes share one
clock, one driver, one disk): clock skew, driver and package mismatches, disk space.

The reports are built by hand; the check functions are the real ones.
"""

from __future__ import annotations

from shared.config import ClusterConfig, FtwizConfig, JobConfig, NodeConfig
from shared.models import DiskInfo, GpuInfo, NodeReport, SoftwareVersions
from tui.checks.agents import clock_skew
from tui.checks.base import CheckContext
from tui.checks.gpus import gpus_present
from tui.checks.resources import disk_free
from tui.checks.software import env_packages, env_parity
from tui.client import NodeState, NodeStatus
from tui.jobshape import world_size

GIB = 1024**3
PY = "/opt/venv/bin/python"


def software(**kw) -> SoftwareVersions:
    base = dict(python_executable=PY, python="3.11.7", torch="2.4.1+cu124", torch_cuda="12.4", nccl="2.20.5",
                transformers="4.45.0", peft="0.12.0", bitsandbytes="0.43.3", accelerate="0.34.0")
    base.update(kw)
    return SoftwareVersions(**base)


def node_report(name: str, *, now: float = 1000.0, sw: SoftwareVersions | None = None, driver: str = "550.54.15",
                disks: list[DiskInfo] | None = None) -> NodeReport:
    gpu = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB, memory_free_bytes=79 * GIB)
    return NodeReport(node_name=name, hostname=name, agent_version="0.1.0", time_unix=now, gpus=[gpu],
                      driver_version=driver, software=sw or software(), disks=disks or [])


def context(reports: dict[str, NodeReport], *, job: JobConfig | None = None, sent: float = 1000.0) -> CheckContext:
    nodes = [NodeConfig(name=n, host=f"10.0.0.{i + 1}", python=PY, workdir="/data/ftwiz") for i, n in enumerate(reports)]
    config = FtwizConfig(cluster=ClusterConfig(), nodes=nodes, job=job or JobConfig(workload="sft", method="qlora"))
    statuses = {n: NodeStatus(n, f"http://{n}", NodeState.UP, report=r, sent_at=sent, received_at=sent + 0.002, rtt_s=0.002)
                for n, r in reports.items()}
    return CheckContext(config, statuses, client=None)


def test_clock_skew_names_the_node_that_is_off():
    ctx = context({"n0": node_report("n0", now=1000.001), "n1": node_report("n1", now=1000.3), "n2": node_report("n2", now=1002.5)})
    rows = {r.node: r for r in clock_skew(ctx)}
    assert rows["n0"].status == "pass" and rows["n1"].status == "pass"
    assert rows["n2"].status == "fail" and "+2.499 s vs master n0" in rows["n2"].detail
    assert "timedatectl set-ntp true" in rows["n2"].hint


def test_driver_mismatch_warns_and_library_mismatch_warns():
    ctx = context({"n0": node_report("n0"), "n1": node_report("n1"),
                   "n2": node_report("n2", driver="535.104.05", sw=software(transformers="4.44.2"))})
    rows = env_parity(ctx)
    assert {(r.status, r.node) for r in rows} == {("warn", "n2")}
    details = " | ".join(r.detail for r in rows)
    assert "NVIDIA driver 535.104.05 on n2 vs 550.54.15 on n0, n1" in details
    assert "transformers 4.44.2 on n2 vs 4.45.0 on n0, n1" in details
    assert any("-m pip install transformers==4.45.0" in r.hint for r in rows)


def test_cuda_build_mismatch_fails():
    ctx = context({"n0": node_report("n0"), "n1": node_report("n1", sw=software(torch="2.4.1+cu118", torch_cuda="11.8"))})
    failed = {(r.node, r.detail.split(" on ")[0]) for r in env_parity(ctx) if r.status == "fail"}
    assert ("n1", "torch 2.4.1+cu118") in failed and ("n1", "torch CUDA build 11.8") in failed


def test_missing_package_fails_and_wrong_interpreter_warns():
    ctx = context({"n0": node_report("n0"), "n1": node_report("n1", sw=software(peft=None, bitsandbytes=None)),
                   "n2": node_report("n2", sw=software(python_executable="/usr/bin/python3"))})
    rows = {(r.node, r.status): r for r in env_packages(ctx)}
    fail = rows[("n1", "fail")]
    assert "peft, bitsandbytes missing" in fail.detail and "needs torch, transformers, peft, bitsandbytes" in fail.detail
    assert fail.hint == f"on n1: {PY} -m pip install peft bitsandbytes"
    assert "restart the agent on n2 with --python /opt/venv/bin/python" in rows[("n2", "warn")].hint
    lora = context({"n0": node_report("n0", sw=software(bitsandbytes=None))}, job=JobConfig(workload="sft", method="lora", optimizer="adamw"))
    assert [r.status for r in env_packages(lora)] == ["pass"]


def test_disk_space():
    small = DiskInfo(path="/data/ftwiz", exists=True, total_bytes=100 * GIB, free_bytes=2 * GIB)
    roomy = DiskInfo(path="/data/ftwiz", exists=True, total_bytes=1000 * GIB, free_bytes=500 * GIB)
    ctx = context({"n0": node_report("n0", disks=[roomy]), "n1": node_report("n1", disks=[small]), "n2": node_report("n2")},
                  job=JobConfig(workload="sft", model="meta-llama/Llama-2-7b-hf", method="full"))
    rows = {r.node: r for r in disk_free(ctx)}
    assert rows["n0"].status == "pass" and "checkpoints of ~" in rows["n0"].detail
    assert rows["n1"].status == "fail" and "2.0 GiB free at /data/ftwiz" in rows["n1"].detail
    assert rows["n2"].status == "skip" and "--disk-path /data/ftwiz" in rows["n2"].hint


def _gpu_less(name: str) -> NodeReport:
    return node_report(name).model_copy(update={"gpus": [], "nvml_error": "NVML Shared Library Not Found"})


def test_cpu_ranks_pass_on_a_gpu_less_node_and_count_in_the_world_size():
    ctx = context({"n0": _gpu_less("n0"), "n1": node_report("n1")})
    ctx.config.nodes[0].cpu_ranks = 2
    ctx.config.nodes[1].cpu_ranks = 3  # a GPU node running CPU ranks on purpose
    rows = {r.node: r for r in gpus_present(ctx)}
    assert rows["n0"].status == "pass" and rows["n0"].detail.startswith("2 CPU ranks, gloo")
    assert rows["n1"].status == "pass" and rows["n1"].detail.startswith("3 CPU ranks, gloo")
    assert world_size(ctx.config, ctx.reports) == 5


def test_a_gpu_count_on_a_gpu_less_node_fails_and_the_fix_names_cpu_ranks():
    ctx = context({"n0": _gpu_less("n0")})
    ctx.config.nodes[0].gpus = 2
    (row,) = gpus_present(ctx)
    assert row.status == "fail" and "gpus = 2 but n0 has 0" in row.detail
    assert "cpu_ranks = 2" in row.hint


def test_cpu_ranks_and_a_gpu_selection_on_one_node_is_a_config_error():
    import pytest

    from shared.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="keep one"):
        parse_config('[[nodes]]\nname = "a"\nhost = "h"\ngpus = 2\ncpu_ranks = 2\n')
    assert parse_config('[[nodes]]\nname = "a"\nhost = "h"\ncpu_ranks = 2\n').nodes[0].cpu_ranks == 2


def test_balance_auto_gives_each_gpu_node_its_largest_micro_batch_that_fits():
    """``mem.fit`` with ``balance = "auto"``: per node, the largest micro-batch whose estimated peak fits its
    smallest GPU (an 80 GB H100 takes more than a 24 GB card), never below ``micro_batch_size``; a node without
    a GPU gets no cap. The estimate is the real one (Llama-2-7B from the catalog, QLoRA)."""
    from shared import estimator
    from shared.fit import fit
    from tui.checks.resources import memory_fit, micro_caps, resolve_arch

    small = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", memory_total_bytes=24 * GIB, memory_free_bytes=23 * GIB)
    reports = {"big": node_report("big"), "small": node_report("small"), "cpu": node_report("cpu")}
    reports["small"].gpus = [small]
    reports["cpu"].gpus = []
    job = JobConfig(workload="sft", method="qlora", model="meta-llama/Llama-2-7b-hf", seq_len=2048, micro_batch_size=1,
                    grad_accum_steps=64, balance="auto", sharding="ddp")
    ctx = context(reports, job=job)
    memory_fit(ctx)
    caps = ctx.notes["micro_caps"]
    assert set(caps) == {"big", "small"} and caps["big"] > caps["small"] >= 1, caps
    arch = resolve_arch(ctx.config).arch
    for node, free in (("big", 79 * GIB), ("small", 23 * GIB)):
        def status(micro: int, free: int = free) -> str:
            shaped = job.model_copy(update={"micro_batch_size": micro})
            return fit(estimator.estimate(arch, shaped, dp_size=3, sharding="ddp"), free).status
        assert status(caps[node]) == "fits", node
        assert caps[node] < 192 and status(caps[node] + 1) != "fits", (node, caps[node])  # below the global batch (192): memory decides
    assert micro_caps(ctx.config, ctx.reports, arch, dp_size=3, sharding="ddp") == caps  # the same rule, called alone
    off = context(reports, job=job.model_copy(update={"balance": "off"}))
    memory_fit(off)
    assert "micro_caps" not in off.notes, "balance off: nothing to cap"
