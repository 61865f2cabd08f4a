"""The job's shape (GPUs per node, world size, interconnect) is computed once for the wizard and the checks."""

from __future__ import annotations

from shared.config import FtwizConfig, NodeConfig
from shared.models import GpuInfo, NicInfo
from tests.checks.test_netplan import active, cluster, nic, report
from tui import jobshape
from tui.checks import plan

GIB = 1024**3


def _with_gpus(r, count: int, speed_mbps: int = 10_000):
    gpus = [GpuInfo(index=i, name="NVIDIA RTX 4090", memory_total_bytes=24 * GIB, memory_free_bytes=23 * GIB) for i in range(count)]
    nics = [NicInfo(**{**n.model_dump(), "speed_mbps": speed_mbps}) if n.name != "lo" else n for n in r.nics]
    return r.model_copy(update={"gpus": gpus, "nics": nics})


def test_infiniband_cluster_has_no_ethernet_speed_and_both_callers_use_the_same_function():
    config = cluster("10.0.0.1", "10.0.0.2")
    reports = {
        "n0": _with_gpus(report("n0", nic("eth0", "10.0.0.1"), ib=[active()]), 2),
        "n1": _with_gpus(report("n1", nic("eth0", "10.0.0.2"), ib=[active()]), 2),
    }
    link = jobshape.interconnect(config, reports)
    assert link.infiniband and link.ethernet_gbps is None
    # The plan.* check rows reason from this one function, as the Job screen (tui.app.engines) does.
    assert plan.interconnect is jobshape.interconnect


def test_ethernet_speed_is_the_slowest_link():
    config = cluster("10.0.0.1", "10.0.0.2")
    reports = {"n0": _with_gpus(report("n0", nic("eth0", "10.0.0.1")), 1, 10_000),
               "n1": _with_gpus(report("n1", nic("eth0", "10.0.0.2")), 1, 1_000)}
    link = jobshape.interconnect(config, reports)
    assert not link.infiniband and link.ethernet_gbps == 1.0


def test_world_size_counts_every_node_as_the_launch_will():
    config = FtwizConfig(nodes=[NodeConfig(name="a", host="10.0.0.1", gpus="all"), NodeConfig(name="b", host="10.0.0.2", gpus=[0, 2]),
                                NodeConfig(name="c", host="10.0.0.3", gpus=3), NodeConfig(name="d", host="10.0.0.4")])
    reports = {"a": _with_gpus(report("a", nic("eth0", "10.0.0.1")), 4), "b": _with_gpus(report("b", nic("eth0", "10.0.0.2")), 4)}
    # a: 4 reported; b: indices 0 and 2 of its 4; c: no report, 3 configured; d: no report, "all" → 1 (unknown)
    assert jobshape.world_size(config, reports) == 4 + 2 + 3 + 1
    assert {n: len(g) for n, g in jobshape.gpu_inventory(config, reports).items()} == {"a": 4, "b": 2}


def test_your_own_code_is_planned_only_as_declared():
    from shared.config import JobConfig

    undeclared = JobConfig(workload="command", command=["train.py"])
    declared = JobConfig.model_validate({"workload": "command", "command": ["train.py"], "model": "meta-llama/Llama-2-7b-hf", "method": "lora"})
    assert not jobshape.planned(undeclared) and jobshape.planned(declared)
    assert jobshape.planned(JobConfig(workload="sft")) and not jobshape.planned(JobConfig(workload="allreduce"))
    assert jobshape.planned_note(declared) == " (as declared for your code)" and jobshape.planned_note(JobConfig()) == ""


def test_memory_fit_says_as_declared_or_asks_for_the_model():
    from shared.config import JobConfig
    from tests.checks.test_checks_unit import context, node_report
    from tui.checks.resources import memory_fit

    declared = JobConfig.model_validate({"workload": "command", "command": ["train.py"], "model": "meta-llama/Llama-2-7b-hf",
                                         "method": "qlora"})
    rows = memory_fit(context({"n0": node_report("n0")}, job=declared))
    assert rows and all("as declared for your code" in r.detail for r in rows if r.status != "skip"), rows
    rows = memory_fit(context({"n0": node_report("n0")}, job=JobConfig(workload="command", command=["train.py"])))
    assert [r.status for r in rows] == ["skip"] and "not declared" in rows[0].detail and "model =" in (rows[0].hint or "")
