"""Run the whole checklist concurrently and collect :class:`CheckResult` rows.

1. Poll every agent (one request each, concurrently) and, at the same time, log in to every node over
   SSH in threads (:func:`tui.checks.ssh_checks.gather_ssh`).
2. Run every registered check concurrently on the resulting :class:`CheckContext`; probes shared by
   several checks (e.g. each node's connect to the master) run once.
3. Return the rows in a stable order: by check, then by the config's node order.

A check that raises is reported as a ``fail`` row naming the bug, never as a crashed checklist.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from shared.config import FtwizConfig
from tui.checks.base import CHECKS, CheckContext, CheckResult, CheckSpec, result

__all__ = ["ChecklistRun", "Progress", "run_checklist", "run_checklist_full", "run_checklist_sync", "ok"]

Progress = Callable[[str, int, int], None]
"""``progress(label, done, total)``: called as phases and checks finish (label says which)."""

ORDER = [
    "agent.reachable", "agent.version", "ssh.auth", "gpu.present", "gpu.processes", "gpu.ecc", "gpu.throttle",
    "env.packages", "env.parity", "job.code", "job.requires", "mem.fit", "disk.free", "clock.skew", "net.subnet", "net.ifname", "net.mtu",
    "net.ib", "net.latency", "net.bandwidth", "net.mesh", "net.sync", "net.master_address", "rendezvous.port_free", "rendezvous.reachable",
    "data.reachable", "plan.batch", "plan.hetero", "plan.balance", "plan.advice",
]


def ok(results: Sequence[CheckResult]) -> bool:
    """True when no row failed (warnings and skips allowed)."""
    return not any(r.status == "fail" for r in results)


async def _run_one(spec: CheckSpec, ctx: CheckContext, timeout: float) -> list[CheckResult]:
    try:
        value = spec.fn(ctx)
        if inspect.isawaitable(value):
            value = await asyncio.wait_for(value, timeout)
        return list(value)
    except asyncio.TimeoutError:
        return [result(spec.id, spec.title, "warn", None, f"check did not finish within {timeout:g} s",
                       "run `ftwiz --check` again; if it persists, a node's agent is too slow to answer probes")]
    except Exception as exc:  # one broken check must not hide the others' rows
        # A crashed check proved nothing: fail rather than let a launch go ahead on an unchecked item.
        return [result(spec.id, spec.title, "fail", None, f"check crashed: {type(exc).__name__}: {exc}",
                       "this is an ftwiz bug: please report it with the output of `ftwiz --check --json`; "
                       "`ftwiz --launch --force` launches anyway")]


@dataclass
class ChecklistRun:
    """A whole checklist run: the rows plus what the engine saw."""

    results: list[CheckResult]
    """Every row, ordered by check then node."""
    statuses: dict[str, Any] = field(default_factory=dict)
    """Per node: the agent poll (:class:`tui.client.NodeStatus`)."""
    ssh: dict[str, Any] = field(default_factory=dict)
    """Per node: the SSH outcome (:class:`tui.checks.base.SshOutcome`)."""
    seconds: float = 0.0
    """Wall time of the run."""
    rendezvous_listener_until: Optional[float] = None
    """Unix time (master's clock) until which the master's agent still holds the rendezvous port for the
    firewall test; a launch right after the check should wait until then (plus clock skew)."""
    mesh: Optional[Any] = None
    """The full mesh (:class:`shared.meshplan.MeshMatrix`) when ``net.mesh`` measured it."""
    mesh_run: Optional[Any] = None
    """What the mesh check measured this time (:class:`shared.meshplan.MeshRun`: quick pass or full mesh, age)."""
    sync: Optional[Any] = None
    """The gradient-sync forecast (:class:`shared.syncplan.SyncForecast`) when ``net.sync`` made one."""
    network_env: Optional[dict[str, dict[str, str]]] = None
    """Per node, the interface environment the ``net.*`` checks approved (:func:`shared.netplan.plan_env` of
    their interface plan, master address resolved as they resolved it); None when no check made the plan.
    The launch uses it as it is, so it never runs with an environment other than the one checked."""
    sharding: Optional[tuple[str, str]] = None
    """``(sharding, why)`` as ``mem.fit`` decided it (:func:`shared.fit.choose_sharding`); None when it did not."""
    compute: Optional[Any] = None
    """What ``plan.balance`` measured (:class:`shared.computeplan.ProbeFigures`), or why nothing; None when it did not run.
    ``balance = "auto"`` for your own code splits each step's samples by it (:func:`shared.balanceplan.plan_command`)."""
    micro_caps: Optional[dict[str, int]] = None
    """With ``balance = "auto"``: per node with GPUs, the largest micro-batch that fits its smallest GPU
    (:func:`tui.checks.resources.micro_caps`, from ``mem.fit``'s estimate); None when ``mem.fit`` made none."""

    @property
    def ok(self) -> bool:
        """Nothing failed."""
        return ok(self.results)


async def run_checklist(config: FtwizConfig, **kwargs: Any) -> list[CheckResult]:
    """Run the checklist for ``config``; return every row (see :func:`run_checklist_full` for the keywords)."""
    return (await run_checklist_full(config, **kwargs)).results


async def run_checklist_full(
    config: FtwizConfig,
    *,
    client: Any = None,
    progress: Optional[Progress] = None,
    ssh: bool = True,
    only: Optional[Sequence[str]] = None,
    options: Optional[dict[str, Any]] = None,
    check_timeout_s: float = 60.0,
) -> ChecklistRun:
    """Run the checklist for ``config``; return the rows, the agents' states and the SSH outcomes.

    ``client`` is an :class:`tui.client.AgentClient` to reuse (one is made and closed otherwise).
    ``ssh=False`` leaves out SSH logins (the SSH-dependent checks then skip). ``only`` keeps checks whose
    id starts with one of the given prefixes. ``options`` tunes probes: ``bandwidth_seconds`` (0.5, each mesh stream),
    ``connect_timeout_s`` (3.0), ``mesh`` (``"auto"``: the quick pass against the cached
    full mesh; ``"full"``: every pair now, as ``--mesh``), ``mesh_max_age_s`` (a day), ``listen_ttl_s`` (connect timeout + 3), ``compute_s`` (compute seconds per
    optimizer step for the sync forecast; estimated from the GPUs when absent).
    """
    from tui.checks.ssh_checks import gather_ssh
    from tui.client import AgentClient

    # CHECKS holds every check: importing this module ran tui/checks/__init__.py first, which imports them all.

    own_client = client is None
    client = client or AgentClient(config)
    report = progress or (lambda label, done, total: None)
    specs = [s for s in CHECKS if not only or any(s.id.startswith(p) or p.startswith(s.id) for p in only)]
    total = len(specs) + 1 + (1 if ssh else 0)
    done = 0
    started = time.monotonic()
    try:
        poll = asyncio.ensure_future(client.poll())
        logins = asyncio.ensure_future(gather_ssh(config)) if ssh else None
        statuses = await poll
        done += 1
        up = sum(1 for s in statuses.values() if s.up)
        report(f"agents: {up}/{len(statuses)} up ({time.monotonic() - started:.2f} s)", done, total)
        unprobed = [name for name, s in statuses.items() if s.report is not None and s.report.software is None]
        if unprobed:
            # A freshly started agent has not run the training interpreter yet: wait for that probe
            # (it imports torch, so seconds) rather than report the software checks as skipped.
            report(f"agents: waiting for {', '.join(unprobed)} to probe the training interpreter", done, total)
            await asyncio.gather(*(client.refresh(n) for n in unprobed))
            fresh = await asyncio.gather(*(client.report(n) for n in unprobed))
            statuses.update({s.node: s for s in fresh})
        outcomes = {}
        if logins is not None:
            outcomes = await logins
            done += 1
            remote = [o for o in outcomes.values() if not o.skipped]
            local = len(outcomes) - len(remote)
            report(f"ssh: {sum(1 for o in remote if o.ok)}/{len(remote)} logged in" + (f", {local} local" if local else ""), done, total)
        ctx = CheckContext(config, statuses, client, ssh=outcomes, options=options)

        from tui.checks.mesh import MESH_READERS, mesh_allowance_s

        mesh_extra = mesh_allowance_s(config, ctx.options)

        async def tracked(spec: CheckSpec) -> list[CheckResult]:
            nonlocal done
            rows = await _run_one(spec, ctx, check_timeout_s + (mesh_extra if spec.id in MESH_READERS else 0.0))
            done += 1
            report(spec.id, done, total)
            return rows

        batches = await asyncio.gather(*(tracked(s) for s in specs))
    finally:
        if own_client:
            await client.aclose()
    rows = [r for batch in batches for r in batch]
    node_index = {n.name: i for i, n in enumerate(config.nodes)}
    rank = {cid: i for i, cid in enumerate(ORDER)}
    rows.sort(key=lambda r: (rank.get(r.id, len(ORDER)), node_index.get(r.node, -1) if r.node else -1))
    return ChecklistRun(rows, statuses, outcomes, time.monotonic() - started,
                        rendezvous_listener_until=ctx.notes.get("rendezvous_listener_until"),
                        mesh=ctx.notes.get("mesh"), mesh_run=ctx.notes.get("mesh_run"), sync=ctx.notes.get("sync"),
                        network_env=_approved_env(config, ctx), sharding=ctx.notes.get("sharding"), compute=ctx.notes.get("compute"),
                        micro_caps=ctx.notes.get("micro_caps"))


def _approved_env(config: FtwizConfig, ctx: CheckContext) -> Optional[dict[str, dict[str, str]]]:
    """The environment of the interface plan the checks made (None when none made one)."""
    from shared import netplan

    plan = ctx.notes.get("interface_plan")
    if plan is None:
        return None
    ib = ctx.notes.get("ib_plan") or netplan.ib_plan(config, ctx.reports)
    return netplan.plan_env(config, plan, ib)


def run_checklist_sync(config: FtwizConfig, **kwargs: Any) -> list[CheckResult]:
    """:func:`run_checklist` from synchronous code (starts and closes its own event loop)."""
    return asyncio.run(run_checklist(config, **kwargs))
