"""The checklist's ``plan.balance`` row: which node sets the pace, from the agents' compute probe.

The decision is :mod:`shared.computeplan` (table-tested in tests/planning); here the row's shape against a
fake client (what each node asks for and how the answers read), then the real thing: two real agents on
loopback, each timing a CPU matmul in its training interpreter.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Optional

from shared.config import ClusterConfig, FtwizConfig, JobConfig, NodeConfig
from shared.models import ComputeDevice, ComputeProbeResult, GpuInfo, HostInfo, NodeReport
from tests.agent.conftest import AgentProcess
from tui.checks.base import CheckContext
from tui.checks.plan import balance
from tui.client import AgentClient, AgentReply, NodeState, NodeStatus

GIB = 1024**3
PY = "/opt/venv/bin/python"


class FakeClient:
    """Answers ``probe_compute`` from a table of rates; records what each node was asked."""

    def __init__(self, rates: dict[str, Optional[float]], machines: Optional[dict[str, str]] = None) -> None:
        self.rates = rates
        self.machines = machines or {}
        self.asked: dict[str, dict[str, Any]] = {}
        self.busy: list[str] = []
        self.most_at_once = 0
        self.same_host_at_once = False

    async def probe_compute(self, node: NodeConfig, *, gpus: Optional[list[int]] = None, threads: Optional[int] = None,
                            timeout_s: float = 60.0) -> AgentReply[ComputeProbeResult]:
        self.asked[node.name] = {"gpus": gpus, "threads": threads}
        machine = self.machines.get(node.name, node.host)
        self.same_host_at_once |= machine in self.busy
        self.busy.append(machine)
        self.most_at_once = max(self.most_at_once, len(self.busy))
        await asyncio.sleep(0.01)  # the other probes' turn, when they were started beside this one
        self.busy.remove(machine)
        rate = self.rates[node.name]
        if rate is None:
            value = ComputeProbeResult(python=PY, device="cpu", error="No module named 'torch'")
        elif gpus is not None:
            value = ComputeProbeResult(python=PY, device="cuda", dtype="bfloat16",
                                       devices=[ComputeDevice(index=i, name="RTX 3060", tflops=rate) for i in gpus])
        else:
            value = ComputeProbeResult(python=PY, device="cpu", dtype="float32", threads=threads, devices=[ComputeDevice(name="cpu", tflops=rate)])
        return AgentReply(node.name, NodeState.UP, value=value, status_code=200)


def report(name: str, gpus: int, *, card: Optional[str] = None, boot_id: Optional[str] = None) -> NodeReport:
    """A node with ``gpus`` cards, each of its own model unless ``card`` is given (the nodes then differ, and the
    probe decides), and a CPU whose model is unknown (so CPU nodes are always probed)."""
    return NodeReport(node_name=name, hostname=name, agent_version="0.1.0", time_unix=0.0,
                      host=HostInfo(cpu_cores=16, boot_id=boot_id),
                      gpus=[GpuInfo(index=i, name=card or f"card of {name}", memory_total_bytes=12 * GIB) for i in range(gpus)])


def context(nodes: list[NodeConfig], gpus: dict[str, int], client: Any, job: Optional[JobConfig] = None,
            card: Optional[str] = None, machines: Optional[dict[str, str]] = None) -> CheckContext:
    config = FtwizConfig(cluster=ClusterConfig(), nodes=nodes, job=job or JobConfig(workload="sft", method="lora"))
    statuses = {n.name: NodeStatus(n.name, f"http://{n.name}", NodeState.UP,
                                   report=report(n.name, gpus[n.name], card=card, boot_id=(machines or {}).get(n.name)))
                for n in nodes}
    return CheckContext(config, statuses, client=client)


def test_nodes_of_one_card_model_are_not_probed() -> None:
    """Every rank on the same kind of card: no node sets the pace, and no agent pays for a probe."""
    client = FakeClient({"a": 10.0, "b": 10.0})
    (row,) = asyncio.run(balance(context([node("a"), node("b", gpus=2)], {"a": 1, "b": 2}, client, card="RTX 3060")))
    assert row.status == "pass" and not row.hint and not client.asked, (row, client.asked)
    assert "every rank runs on RTX 3060" in row.detail and "no compute probe" in row.detail
    assert ctx_figures(client, card="RTX 3060").rates is None  # the launch then splits your code's batch uniformly, saying why


def ctx_figures(client: Any, card: str) -> Any:
    ctx = context([node("a"), node("b", gpus=2)], {"a": 1, "b": 2}, client, card=card)
    asyncio.run(balance(ctx))
    return ctx.notes["compute"]


def node(name: str, host: str = "10.0.0.1", **kw: Any) -> NodeConfig:
    return NodeConfig(name=name, host=host, python=PY, **kw)


def test_a_slow_cpu_node_bounds_the_run_and_auto_is_recommended() -> None:
    client = FakeClient({"gpu": 12.0, "cpu": 0.5})
    ctx = context([node("gpu", gpus=[1]), node("cpu", cpu_ranks=4)], {"gpu": 2, "cpu": 0}, client)
    (row,) = asyncio.run(balance(ctx))
    assert row.status == "pass"
    assert row.detail.startswith("cpu bounds the run; uniform: 5 rank(s) at cpu's pace = 1.00; balanced: 5.60x")  # (12 + 4 × 0.5) / (5 × 0.5)
    assert "gpu 12 TFLOP/s per rank (1× RTX 3060 bfloat16)" in row.detail
    assert "cpu 0.5 0.5 0.5 0.5 TFLOP/s per rank (cpu, 4 thread(s) per rank, float32)" in row.detail
    assert 'balance = "auto"' in row.hint
    # the GPU node is asked for the GPUs the run uses; each CPU rank gets the node's cores over its ranks
    assert client.asked == {"gpu": {"gpus": [1], "threads": None}, "cpu": {"gpus": None, "threads": 4}}


def test_even_nodes_pass_without_advice_and_a_node_without_torch_is_named() -> None:
    client = FakeClient({"a": 10.0, "b": 10.0, "c": None})
    ctx = context([node("a"), node("b"), node("c")], {"a": 1, "b": 1, "c": 1}, client)
    (row,) = asyncio.run(balance(ctx))
    assert row.status == "pass" and not row.hint
    assert "balanced: 1.00x" in row.detail and "not measured: c: No module named 'torch'" in row.detail
    assert ctx.notes["compute"].rates == {"a": (10.0,), "b": (10.0,)} and "c: No module named 'torch'" in ctx.notes["compute"].note


def test_skips_one_rank_and_nothing_measured() -> None:
    one = context([node("a")], {"a": 1}, FakeClient({"a": 1.0}))
    assert asyncio.run(balance(one))[0].status == "skip"
    none = context([node("a"), node("b")], {"a": 1, "b": 1}, FakeClient({"a": None, "b": None}))
    (row,) = asyncio.run(balance(none))
    assert row.status == "skip" and "torch" in row.hint


def test_your_own_code_is_told_to_read_its_share() -> None:
    ctx = context([node("a"), node("b")], {"a": 1, "b": 1}, FakeClient({"a": 10.0, "b": 2.0}),
                  job=JobConfig(workload="command", command=["train.py"]))
    (row,) = asyncio.run(balance(ctx))
    assert row.status == "pass" and "balanced: 3.00x" in row.detail
    assert 'balance = "auto"' in row.hint and "FTWIZ_MICRO_BATCH" in row.hint
    # what the launch gets (ChecklistRun.compute): each node's per-rank figures, for balance = "auto" of your own code
    assert ctx.notes["compute"].rates == {"a": (10.0,), "b": (2.0,)}


def test_nodes_on_one_host_take_turns_and_other_hosts_measure_at_once() -> None:
    client = FakeClient({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    nodes = [node("a", "10.0.0.1"), node("b", "10.0.0.1"), node("c", "10.0.0.2"), node("d", "10.0.0.3")]
    (row,) = asyncio.run(balance(context(nodes, {n.name: 1 for n in nodes}, client)))
    assert row.status == "pass" and not client.same_host_at_once and client.most_at_once == 3


def test_nodes_of_one_kernel_take_turns_whatever_their_addresses() -> None:
    """Containers or namespaces on one host have addresses of their own and report its kernel boot id."""
    machines = {"a": "boot-1", "b": "boot-1", "c": "boot-2"}
    client = FakeClient({"a": 1.0, "b": 1.0, "c": 1.0}, machines)
    nodes = [node("a", "10.0.0.1"), node("b", "10.0.0.2"), node("c", "10.0.0.3")]
    (row,) = asyncio.run(balance(context(nodes, {"a": 1, "b": 2, "c": 1}, client, machines=machines)))
    assert row.status == "pass" and not client.same_host_at_once and client.most_at_once == 2


def test_two_real_agents_time_their_cpu(tmp_path) -> None:
    """Two real agents on this machine report one kernel boot id: their ranks share its cores (the same threads
    each, so the row needs no probe), and each agent times a real CPU matmul when asked, then answers from its cache."""
    os.chmod(tmp_path, 0o700)
    first = AgentProcess(tmp_path, node_name="n0")
    second = AgentProcess(tmp_path, node_name="n1", token_file=first.token_file)
    try:
        # one CPU rank on n0, two on n1, all three on this machine's cores
        nodes = [NodeConfig(name=a.node_name, host="127.0.0.1", agent_port=a.port, python=sys.executable, cpu_ranks=ranks)
                 for a, ranks in ((first, 1), (second, 2))]
        config = FtwizConfig(cluster=ClusterConfig(agent_token_file=str(first.token_file)), nodes=nodes,
                             job=JobConfig(workload="sft", method="lora"))
        threads = max(1, (os.cpu_count() or 1) // 3)

        async def check() -> Any:
            async with AgentClient(config) as client:
                statuses = await client.poll()
                rows = await balance(CheckContext(config, statuses, client))
                timed = [await client.probe_compute(n, threads=t) for n, t in ((nodes[0], threads), (nodes[1], threads + 1))]
                again = await client.probe_compute(nodes[0], threads=threads)
                return statuses, rows, timed, again

        statuses, (row,), timed, again = asyncio.run(check())
        boot_ids = {s.report.host.boot_id for s in statuses.values() if s.report is not None}
        assert len(boot_ids) == 1 and None not in boot_ids, boot_ids
        assert row.status == "pass" and "no compute probe needed" in row.detail, row.detail
        assert f"({threads} thread(s) per rank)" in row.detail, row.detail
        for reply, asked in zip(timed, (threads, threads + 1), strict=True):
            assert reply.value is not None and not reply.value.error and reply.value.threads == asked, reply
            assert reply.value.device == "cpu" and reply.value.devices[0].tflops > 0, reply.value
        assert again.value is not None and again.value.cached and again.value.devices[0].tflops == timed[0].value.devices[0].tflops
    finally:
        first.stop()
        second.stop()
