"""The launch plan: every decision a launch makes, made once, before anything is sent to a node.

:func:`build_launch_plan` runs once per launch, on the driver's thread, when every node has said where its run
directory is. It takes the interface environment and the sharding decision the checklist approved (or makes
each once when no checklist ran), builds every node's torchrun argv and environment in one
:func:`tui.launch.plan.build_plan`, the workloads package once and the user's code bundle once. The result is
frozen: each node's runner receives its :class:`NodeSlice` (``payload``) and nothing downstream plans again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional

from shared.balanceplan import CommandBalance, plan_command
from shared.config import FtwizConfig
from shared.nodewire import LOG, SCRIPT, run_file
from shared.redact import masked_env
from tui.codeship import CodeBundle, bundle_for_run, resolve_code_dir
from tui.launch.plan import NodePlan, Payload, build_plan, start_script

__all__ = ["LaunchPlan", "NodeSlice", "Sharding", "build_launch_plan", "command_balance"]

Sharding = tuple[str, str]
"""``(sharding, why)``: what ``sharding = "auto"`` became, and the reason the workload prints."""


@dataclass(frozen=True)
class NodeSlice:
    """One node's part of the plan: what runs there, its own run-dir files, what ``run.json`` keeps of it."""

    plan: NodePlan
    files: Mapping[str, bytes]
    """This node's files under its run dir (``job.json``, ``<node>.sh``); the shared ones are on the plan."""
    record: Mapping[str, Any]
    """Fields for ``run.json``'s ``nodes[<node>]``."""


@dataclass(frozen=True)
class LaunchPlan:
    """Every decision of one launch (see the module docstring); built once by :func:`build_launch_plan`."""

    run_id: str
    master_address: str
    """``MASTER_ADDR`` every rank dials (the master's host as configured)."""
    network_env: Mapping[str, Mapping[str, str]]
    """Per node, the interface environment (``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``, ``NCCL_IB_DISABLE``);
    empty when there is no plan (each node then picks the interface that routes to the master)."""
    sharding: Optional[Sharding]
    """What ``sharding = "auto"`` became (None when the job did not say auto)."""
    package: Mapping[str, bytes]
    """The workloads package (``ftwiz_workloads/...``), the same for every node."""
    code: Optional[CodeBundle]
    """``workload = "command"``: the user's code, one tar on disk streamed to every node (None otherwise)."""
    nodes: Mapping[str, NodeSlice]
    """Each node's slice, in config order."""
    run_record: Mapping[str, Any] = field(default_factory=dict)
    """Top-level fields for ``run.json`` (what code was shipped, your own code's balance shares)."""
    balance: Optional[CommandBalance] = None
    """``workload = "command"``: each rank's ``FTWIZ_*`` batch numbers (:func:`command_balance`); None otherwise."""

    def payload(self, node: str) -> Payload:
        """What ``node``'s launch exec receives: the package and its own files, then the code tar streamed from disk."""
        tar = self.code.tar_path if self.code is not None else None
        return Payload({**self.package, **self.nodes[node].files}, (tar,) if tar is not None else ())


def build_launch_plan(
    config: FtwizConfig,
    *,
    run_id: str,
    rundirs: Mapping[str, str],
    reports: Mapping[str, Any],
    network_env: Optional[Mapping[str, Mapping[str, str]]],
    sharding: Optional[Sharding],
    package: Mapping[str, bytes],
    resume: bool,
    output_dir: str,
    config_dir: Optional[str] = None,
    compute: Optional[Any] = None,
    micro_caps: Optional[Mapping[str, int]] = None,
) -> LaunchPlan:
    """The plan for a run of ``config`` whose nodes hold their run dirs at ``rundirs`` (absolute, on each node).

    ``network_env`` and ``sharding`` are the checklist's when it ran (:class:`tui.checks.engine.ChecklistRun`);
    ``sharding`` None with ``sharding = "auto"`` asks the estimator here, once. ``compute`` is the checklist's
    probe (:class:`shared.computeplan.ProbeFigures`; None when it did not run): your own code's shares.
    ``micro_caps`` (``balance = "auto"``: each GPU node's largest micro-batch, from the checklist's memory fit)
    bounds a rank's micro-batch; a bigger share beyond it comes as accumulation. Raises
    :class:`tui.codeship.CodeDirError` when the user's code cannot ship (over the cap, missing): nothing starts then.
    """
    gpus = {name: [g.index for g in getattr(r, "gpus", [])] for name, r in reports.items() if r is not None}
    cores = {name: getattr(getattr(r, "host", None), "cpu_cores", None) for name, r in reports.items() if r is not None}
    machines = {name: getattr(getattr(r, "host", None), "boot_id", None) for name, r in reports.items() if r is not None}
    network = {name: MappingProxyType(dict(env)) for name, env in (network_env or {}).items()}
    plans = build_plan(config, run_id, rundirs=rundirs, gpu_indices=gpus, cpu_cores=cores, machines=machines,
                       network_env=network)
    spec = config.job.model_dump(mode="json")
    spec.update(resume="auto" if resume else None, output_dir=output_dir, run_id=run_id)
    if spec.get("sharding") == "auto":  # the workload runs what the estimator picked: fsdp exactly when ddp does not fit
        if sharding is None:
            from tui.checks.resources import launch_sharding  # the checklist's rule (imports every check: only here)

            sharding = launch_sharding(config, reports)
        spec["sharding"], spec["sharding_reason"] = sharding
    else:
        sharding = None
    caps = dict(micro_caps or {}) if config.job.balance == "auto" else {}
    if caps and config.job.workload == "sft":
        spec["max_micro_batch"] = caps  # the recipe's balancer caps each node's micro-batch with it
    balance = command_balance(config, {p.node: p.nproc for p in plans}, compute, caps)
    if balance is not None and balance.sets_env:  # each rank's usercode runner sets its FTWIZ_* from this (torchrun gives one env per node)
        spec["balance_env"] = {node: [balance.env(node, local) for local in range(len(ranks))] for node, ranks in balance.nodes.items()}
    slices = {}
    for mine in plans:
        rundir_abs = rundirs[mine.node]
        workdir_abs = rundir_abs[: -len(mine.rundir) - 1]
        job = {**spec, "workdir": workdir_abs, "base_dir": workdir_abs}
        files = {"job.json": json.dumps(job, indent=2).encode(), run_file(mine.node, SCRIPT): start_script(mine, rundir_abs).encode()}
        record = {
            "workdir": workdir_abs,
            "rundir": rundir_abs,
            "nproc": mine.nproc,
            "command": mine.argv,
            "command_line": mine.command_line,
            "env": masked_env(mine.env),
            "cuda_visible_devices": mine.cuda_visible_devices,
            "node_log": f"{rundir_abs}/{run_file(mine.node, LOG)}",
        }
        slices[mine.node] = NodeSlice(mine, MappingProxyType(files), MappingProxyType(record))
    code, run_record = _user_code(config, run_id=run_id, config_dir=config_dir)
    if balance is not None:
        run_record["balance"] = balance.record()
    return LaunchPlan(
        run_id=run_id,
        master_address=config.master.host,
        network_env=MappingProxyType(network),
        sharding=sharding,
        package=MappingProxyType(dict(package)),
        code=code,
        nodes=MappingProxyType(slices),
        run_record=MappingProxyType(run_record),
        balance=balance,
    )


def command_balance(config: FtwizConfig, ranks: Mapping[str, int], compute: Optional[Any],
                    micro_caps: Optional[Mapping[str, int]] = None) -> Optional[CommandBalance]:
    """Your own code's batch numbers per rank (``workload = "command"`` only): with ``balance = "auto"`` split by
    the checklist's compute probe (``compute.rates``), otherwise (or without figures) uniform, saying why."""
    job = config.job
    if job.workload != "command":
        return None
    rates = getattr(compute, "rates", None)
    no_rates = (getattr(compute, "note", "") or "the compute probe measured nothing") if compute is not None else \
        "no checklist ran before the launch, so no compute probe"
    declared = bool({"micro_batch_size", "grad_accum_steps"} & job.model_fields_set)
    return plan_command(job.balance, ranks, micro_batch=job.micro_batch_size, grad_accum=job.grad_accum_steps,
                        rates=rates, no_rates=no_rates, max_micro=micro_caps or None, declared=declared)


def _user_code(config: FtwizConfig, *, run_id: str, config_dir: Optional[str]) -> tuple[Optional[CodeBundle], dict[str, Any]]:
    """``workload = "command"``: ``[job].code_dir`` as one bundle, and what ``run.json`` → ``code`` says of it.

    ``code_dir`` resolves against ``config_dir`` (the directory of ftwiz.toml; the current directory when None).
    """
    job = config.job
    if job.workload != "command":
        return None, {}
    if job.code_dir == "":
        return None, {"code": {"root": None, "shipped_to": None, "note": 'code_dir = "": the code already on each node ran (not shipped, not hashed)'}}
    bundle = bundle_for_run(run_id, resolve_code_dir(job.code_dir, config_dir))
    return bundle, {"code": bundle.record()}
