"""The job's shape on this cluster, computed once for the wizard's Job step and the checklist alike.

Which GPUs each node contributes, the data-parallel world size the launch will get, and the
interconnect the routing rules reason about: the Job screen's advice and the ``plan.*``/``mem.fit``
check rows must never disagree because they counted differently.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from shared.config import FtwizConfig, NodeConfig
from shared.routing import Interconnect

__all__ = ["DECLARE_HINT", "gpu_inventory", "interconnect", "node_processes", "node_ranks", "planned", "planned_note", "rank_threads",
           "selected_gpus", "threads_per_rank", "world_size"]


#: The keys that describe the model a user's own code trains (the memory-fit and routing checks read them).
DECLARED_KEYS = ("model", "method", "seq_len", "micro_batch_size")
DECLARE_HINT = ('declare what your code trains in [job] (model = "<HF id or local dir>", method, seq_len, micro_batch_size) '
                "to have its memory fit and routing checked")


def planned(job: Any) -> bool:
    """Whether the memory-fit and routing checks apply: the built-in recipe, or your own code whose
    ``[job] model`` was written in ftwiz.toml (the defaults are never taken for your code's model)."""
    if job.workload == "sft":
        return True
    return job.workload == "command" and "model" in job.model_fields_set


def planned_note(job: Any) -> str:
    """What a check adds to its detail: `` (as declared for your code)`` for the command workload."""
    return " (as declared for your code)" if job.workload == "command" else ""


def selected_gpus(node: NodeConfig, report: Any) -> list[Any]:
    """The GPUs the job will use on ``node``: all, the first N, or the listed indices that exist (none with ``cpu_ranks``)."""
    if node.cpu_ranks is not None:
        return []
    if node.gpus == "all":
        return list(report.gpus)
    if isinstance(node.gpus, int):
        return list(report.gpus[: node.gpus])
    wanted = set(node.gpus)
    return [g for g in report.gpus if g.index in wanted]


def gpu_inventory(config: FtwizConfig, reports: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The GPUs each node with a report will use (``gpus = "all" | N | [indices]``)."""
    return {n.name: selected_gpus(n, reports[n.name]) for n in config.nodes if reports.get(n.name) is not None}


def node_ranks(node: NodeConfig, report: Any) -> int:
    """Processes the launch starts on ``node``: ``cpu_ranks``, else one per selected GPU, one on a CPU node; from the
    config without a report."""
    if node.cpu_ranks is not None:
        return node.cpu_ranks
    if report is not None:
        return max(1, len(selected_gpus(node, report)))
    if isinstance(node.gpus, int):
        return max(1, node.gpus)
    if isinstance(node.gpus, list):
        return max(1, len(node.gpus))
    return 1


def node_processes(node: NodeConfig, gpu_indices: Optional[Sequence[int]]) -> tuple[int, Optional[str]]:
    """How many processes ``node`` runs and its ``CUDA_VISIBLE_DEVICES``.

    ``gpu_indices`` are the GPUs the node's agent reported (None when unknown, ``[]`` for none).
    A list selects exactly those GPUs; a count takes the first N reported GPUs, or runs N CPU
    processes on a GPU-less node; ``"all"`` takes every GPU, or one CPU process. ``gpus = 0`` runs
    one CPU process with the GPUs hidden; ``cpu_ranks = N`` runs N CPU processes with the GPUs hidden
    (the workloads then pick gloo).
    """
    if node.cpu_ranks is not None:
        return node.cpu_ranks, ""
    have = list(gpu_indices or [])
    if isinstance(node.gpus, list):
        if not node.gpus:
            return 1, ""
        return len(node.gpus), ",".join(str(i) for i in node.gpus)
    if node.gpus == "all":
        if have:
            return len(have), ",".join(str(i) for i in have)
        return 1, None
    count = int(node.gpus)
    if count == 0:
        return 1, ""
    if have:
        chosen = have[:count]
        return len(chosen), ",".join(str(i) for i in chosen)
    return count, None


def threads_per_rank(ranks: Mapping[str, int], cores: Mapping[str, Optional[int]],
                     machines: Optional[Mapping[str, Optional[str]]] = None) -> dict[str, int]:
    """OpenMP threads for each rank of every node in ``ranks`` (node → the processes it runs): the machine's logical
    CPUs (``cores``) over every rank the job runs on that machine, at least 1; 1 where the cores are unknown.

    Nodes whose agents report one kernel boot id (``machines``) are one machine: containers or network namespaces
    on one host each see all its cores, and giving every node all of them oversubscribes the CPU. Three one-rank
    nodes on this project's 2-core machine, 10 tiny LoRA steps: 75 s of CPU with 2 threads a rank, 46 s with 1.
    """
    machines = machines or {}
    on_machine: dict[str, int] = {}
    for name, count in ranks.items():
        machine = machines.get(name)
        if machine:
            on_machine[machine] = on_machine.get(machine, 0) + count
    threads = {}
    for name, count in ranks.items():
        machine, available = machines.get(name), cores.get(name)
        sharing = on_machine[machine] if machine else count
        threads[name] = max(1, available // max(1, sharing)) if available else 1
    return threads


def rank_threads(config: FtwizConfig, reports: Mapping[str, Any]) -> dict[str, int]:
    """:func:`threads_per_rank` for every configured node from the agents' reports (a node without one: 1 thread)."""
    ranks, cores, machines = {}, {}, {}
    for node in config.nodes:
        report = reports.get(node.name)
        host = getattr(report, "host", None)
        ranks[node.name] = node_processes(node, [g.index for g in report.gpus] if report is not None else None)[0]
        cores[node.name] = getattr(host, "cpu_cores", None)
        machines[node.name] = getattr(host, "boot_id", None)
    return threads_per_rank(ranks, cores, machines)


def world_size(config: FtwizConfig, reports: Mapping[str, Any]) -> int:
    """The data-parallel world size of the launch (every node counted, reported or not)."""
    return max(1, sum(node_ranks(n, reports.get(n.name)) for n in config.nodes))


def interconnect(config: FtwizConfig, reports: Mapping[str, Any]) -> Interconnect:
    """What the routing rules know of the links: InfiniBand when the IB plan enables it, else the slowest
    link speed among the interfaces the interface plan picks (unknown without reports)."""
    from shared import netplan

    if not reports:
        return Interconnect()
    infiniband = not netplan.ib_plan(config, reports).disable
    speeds = []
    plan = netplan.resolve_interfaces(config, reports)
    for name, chosen in plan.nodes.items():
        report = reports.get(name)
        nic = next((n for n in report.nics if n.name == chosen.ifname), None) if report is not None and chosen.ifname else None
        if nic is not None and nic.speed_mbps:
            speeds.append(nic.speed_mbps / 1000)
    return Interconnect(infiniband=infiniband, ethernet_gbps=min(speeds) if speeds and not infiniband else None)
