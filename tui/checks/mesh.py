"""The mesh: latency and bandwidth between the nodes, both directions (check ``net.mesh``).

The agents' own probes are the instrument: ``POST /v1/probe/connect-many`` (each node's TCP connect
time to every other node's agent, the best of :data:`CONNECT_TRIES`; one request per node) and
``POST /v1/probe/bandwidth`` (an HTTP stream to the peer's sink). Connects run first (no stream may
inflate them), then the streams in rounds, each round starting as soon as the previous one ends.

Every check measures all pairs' connect times and the quick pass's streams (:func:`shared.meshplan.ring_rounds`:
two rounds around the ring, each node sending and receiving against two peers); the full matrix
(:func:`shared.meshplan.round_robin`: every ordered pair) is kept between checks (:mod:`tui.checks.meshcache`)
and measured again when there is none for these nodes and interfaces, when it is older than
:data:`tui.checks.meshcache.MAX_AGE_S`, when the quick pass disagrees with it, or on ``--mesh``
(option ``mesh="full"``).

The result is memoised on the :class:`CheckContext` (``mesh`` and ``mesh_run`` in ``ctx.notes``) so
``net.latency``, ``net.bandwidth`` and the sync forecast read the same figures, and ``ftwiz --check --json``
carries them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from shared import meshplan
from shared.config import FtwizConfig, NodeConfig
from shared.meshplan import Link, MeshMatrix, MeshRun
from tui.checks import meshcache
from tui.checks.base import CheckContext, CheckResult, Status, check, result

__all__ = ["CONNECT_TRIES", "MESH_READERS", "STREAM_SECONDS", "measure_mesh", "mesh_allowance_s", "mesh_of", "mesh_rows", "mesh_run_of"]

CONNECT_TRIES = 3
"""Connects per direction; the best one counts (a busy controller or agent only ever adds time)."""
STREAM_SECONDS = 0.5
"""Default seconds per bandwidth stream (option ``bandwidth_seconds``)."""


MESH_READERS = ("net.mesh", "net.latency", "net.bandwidth", "net.sync")
"""Checks that wait for the mesh: the engine gives them :func:`mesh_allowance_s` on top of its per-check limit."""


def mesh_allowance_s(config: FtwizConfig, options: dict[str, Any]) -> float:
    """Seconds a full mesh of ``config``'s nodes may take: each stream round at the stream length plus 1 s, plus
    30 s for the connects (64 nodes: 63 rounds × 2 directions → about 220 s)."""
    n = len(config.nodes)
    rounds = n - 1 if n % 2 == 0 else n
    return 2 * max(0, rounds) * (float(options.get("bandwidth_seconds", STREAM_SECONDS)) + 1.0) + 30.0


async def measure_mesh(config: FtwizConfig, client: Any, up: set[str], *, stream_seconds: float = STREAM_SECONDS,
                       connect_timeout_s: float = 3.0, plan: str = "full") -> MeshMatrix:
    """Connect times of every ordered pair among the nodes in ``up``, then the streams of ``plan``:
    ``"full"`` every ordered pair (round robin, each pair's two directions one after the other), ``"quick"`` the ring
    both ways. Links touching a node not up carry an error; links not streamed have no Gbit/s."""
    started = time.monotonic()
    names = [n.name for n in config.nodes]
    live = [name for name in names if name in up]
    links: dict[tuple[str, str], Link] = {
        (a, b): Link(src=a, dst=b, error=f"agent on {a if a not in up else b} is not up")
        for a in names for b in names if a != b and (a not in up or b not in up)
    }

    async def latencies(a: str) -> None:
        peers = [b for b in live if b != a]
        targets = [(config.node(b).host, config.agent_port(config.node(b))) for b in peers]
        replies = [await client.probe_connect_many(a, targets[i:i + 100], tries=CONNECT_TRIES, timeout_s=connect_timeout_s)
                   for i in range(0, len(targets), 100)]  # an agent takes 100 targets per request
        for index, b in enumerate(peers):
            reply, i = replies[index // 100], index % 100
            if not reply.ok:
                links[(a, b)] = Link(src=a, dst=b, error=f"connect probe on {a} failed: {reply.error}")
                continue
            value = reply.value.results[i] if i < len(reply.value.results) else None
            if value is None or not value.reachable:
                links[(a, b)] = Link(src=a, dst=b, error=(value.error if value else None) or "unreachable")
            else:
                links[(a, b)] = Link(src=a, dst=b, latency_ms=value.latency_ms)

    async def bandwidth(a: str, b: str) -> None:
        link = links[(a, b)]
        if link.error:
            return  # unreachable: a stream would only time out
        reply = await client.probe_bandwidth(a, client.base_url(b), stream_seconds)
        if not reply.ok or reply.value.error:
            why = reply.error if not reply.ok else reply.value.error
            links[(a, b)] = link.model_copy(update={"error": f"bandwidth probe {a} → {b} failed: {why}"})
        else:
            links[(a, b)] = link.model_copy(update={"gbit_per_s": reply.value.gbit_per_s})

    await asyncio.gather(*(latencies(a) for a in live))
    if plan == "quick":
        rounds = meshplan.ring_rounds(live)
    else:
        # Each pair's a → b streams, then its b → a: a node sends or receives one stream at a time, so a
        # slow return path (delayed ACKs) cannot drag the figure of the other direction down with it.
        rounds = [[(b, a) if flip else (a, b) for a, b in pairs] for pairs in meshplan.round_robin(live) for flip in (False, True)]
    for directed in rounds:
        await asyncio.gather(*(bandwidth(a, b) for a, b in directed))
    ordered = [links[(a, b)] for a in names for b in names if a != b and (a, b) in links]
    return MeshMatrix(nodes=names, links=ordered, rounds=len(rounds) if plan == "quick" else len(rounds) // 2, seconds=round(time.monotonic() - started, 3),
                      stream_seconds=stream_seconds, measured_at=time.time())


def _view(cached: MeshMatrix, quick: MeshMatrix) -> MeshMatrix:
    """The cached full matrix with this time's connect times (measured for every pair)."""
    now = {(lk.src, lk.dst): lk for lk in quick.links}
    links = []
    for link in cached.links:
        fresh = now.get((link.src, link.dst))
        links.append(link if fresh is None else
                     link.model_copy(update={"latency_ms": fresh.latency_ms, "error": fresh.error or link.error}))
    return cached.model_copy(update={"links": links})


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


async def _decide(ctx: CheckContext) -> tuple[MeshMatrix, MeshRun]:
    """Quick pass against the cached matrix, or the full mesh (saved for the next checks); see the module doc."""
    started = time.monotonic()
    up = {n.name for n in ctx.config.nodes if ctx.report(n) is not None}
    options = {"stream_seconds": float(ctx.option("bandwidth_seconds", STREAM_SECONDS)),
               "connect_timeout_s": float(ctx.option("connect_timeout_s", 3.0))}
    mode = str(ctx.option("mesh", "auto"))
    key = meshcache.mesh_key(ctx.config, ctx.reports)
    cached = meshcache.load(ctx.config, key) if mode != "full" else None
    max_age = float(ctx.option("mesh_max_age_s", meshcache.MAX_AGE_S))
    quick: Optional[MeshMatrix] = None
    if mode == "full":
        reason = "asked for (--mesh)"
    elif cached is None:
        reason = "no full mesh cached for these nodes and interfaces"
    elif time.time() - cached.measured_at > max_age:
        reason = f"the cached full mesh is {_age(time.time() - cached.measured_at)} old (limit {_age(max_age)})"
    else:
        quick = await measure_mesh(ctx.config, ctx.client, up, plan="quick", **options)
        differ = meshplan.disagreements(quick, cached)
        if not differ or mode == "quick":
            run = MeshRun(mode="quick", age_s=round(time.time() - cached.measured_at, 1),
                          reason=f"the quick pass agrees with the full mesh of {_age(time.time() - cached.measured_at)} ago"
                          if not differ else "quick pass only (asked for)",
                          pairs=[lk for lk in quick.links if lk.latency_ms is not None or lk.gbit_per_s is not None],
                          quick=quick, seconds=round(time.monotonic() - started, 3))
            return _view(cached, quick), run
        first, then = differ[0]
        was = f"{then.gbit_per_s:.2f} Gbit/s" if then is not None and then.gbit_per_s is not None else "not measured"
        now = f"{first.gbit_per_s:.2f} Gbit/s" if first.gbit_per_s is not None else (first.error or "no figure")
        reason = (f"the quick pass disagrees with the cached full mesh on {len(differ)} link(s), "
                  f"e.g. {first.src}→{first.dst} now {now}, then {was}")
    full = await measure_mesh(ctx.config, ctx.client, up, plan="full", **options)
    problem = meshcache.save(ctx.config, key, full)
    if problem:
        reason += f"; not cached: {problem}"
    run = MeshRun(mode="full", age_s=0.0, reason=reason,
                  pairs=[lk for lk in full.links if lk.latency_ms is not None or lk.gbit_per_s is not None],
                  quick=quick, seconds=round(time.monotonic() - started, 3))
    return full, run


async def mesh_of(ctx: CheckContext) -> MeshMatrix:
    """The cluster's full matrix (cached or measured now), once per checklist run, left in ``ctx.notes["mesh"]``."""

    async def build() -> tuple[MeshMatrix, MeshRun]:
        mesh, run = await _decide(ctx)
        ctx.notes["mesh"] = mesh
        ctx.notes["mesh_run"] = run
        return mesh, run

    mesh, _ = await ctx.memo("mesh", build)
    return mesh


async def mesh_run_of(ctx: CheckContext) -> MeshRun:
    """What was measured this time (after :func:`mesh_of`)."""
    await mesh_of(ctx)
    return ctx.notes["mesh_run"]


def _iface(ctx: CheckContext, node: str) -> str:
    """``eth0 (1000 Mbit/s)`` as the node's agent reports its NCCL interface, or what is known."""
    from shared import netplan

    plan = netplan.resolve_interfaces(ctx.config, ctx.reports)
    chosen = plan.nodes.get(node)
    report = ctx.reports.get(node)
    if chosen is None or not chosen.ifname or report is None:
        return "its NCCL interface (unknown)"
    nic = next((n for n in report.nics if n.name == chosen.ifname), None)
    speed = f"{nic.speed_mbps} Mbit/s" if nic is not None and nic.speed_mbps else "no speed reported"
    return f"{chosen.ifname} ({speed})"


def _culprits(mesh: MeshMatrix, slow: list[Link]) -> dict[str, str]:
    """Nodes whose every link in one direction (or both) is slow: the node's own link, not a pair.

    Taken greedily, most slow links first; a culprit's links are then set aside, and a node needs at
    least two remaining links in a direction to be judged (one link cannot tell a node from a pair).
    """
    slow_set = {(link.src, link.dst) for link in slow}
    found: dict[str, str] = {}
    while True:
        best: tuple[int, str, str] | None = None
        for node in mesh.nodes:
            if node in found:
                continue
            alive = [lk for lk in mesh.links if lk.gbit_per_s is not None and lk.src not in found and lk.dst not in found]
            out = [lk for lk in alive if lk.src == node]
            into = [lk for lk in alive if lk.dst == node]
            out_slow = len(out) >= 2 and all((lk.src, lk.dst) in slow_set for lk in out)
            in_slow = len(into) >= 2 and all((lk.src, lk.dst) in slow_set for lk in into)
            if out_slow or in_slow:
                count = sum(1 for lk in out + into if (lk.src, lk.dst) in slow_set)
                direction = "both directions" if out_slow and in_slow else "sending" if out_slow else "receiving"
                if best is None or count > best[0]:
                    best = (count, node, direction)
        if best is None:
            return found
        found[best[1]] = best[2]


def _fmt(link: Link) -> str:
    return f"{link.src}→{link.dst} {link.gbit_per_s:.2f}" if link.gbit_per_s is not None else f"{link.src}→{link.dst} ?"


def mesh_rows(ctx: CheckContext, mesh: MeshMatrix) -> list[CheckResult]:
    """The ``net.mesh`` rows: a summary naming the slowest pairs, then one row per slow node, pair or delay."""
    check_id, title = "net.mesh", "full mesh: every pair's latency and bandwidth"
    median = mesh.typical_gbit()
    slow = meshplan.slow_links(mesh)
    delayed = meshplan.slow_latency(mesh)
    failed = [link for link in mesh.links if link.error]
    measured = sorted((lk for lk in mesh.links if lk.gbit_per_s is not None), key=lambda lk: lk.gbit_per_s or 0.0)
    rows: list[CheckResult] = []
    culprits = _culprits(mesh, slow)
    for node, direction in culprits.items():
        theirs = meshplan.pairs_of(node, slow)
        others = sorted({lk.dst if lk.src == node else lk.src for lk in theirs})
        rows.append(result(check_id, title, "warn", node,
                           f"every link {direction} at {node} is slow: {', '.join(_fmt(lk) for lk in theirs)} Gbit/s "
                           f"vs typical {median:.2f} Gbit/s",
                           f"{node}'s own link: it reports {_iface(ctx, node)}, its peers {', '.join(f'{o} {_iface(ctx, o)}' for o in others)}; "
                           f"on {node}: `ethtool <iface>` (speed/duplex), `tc qdisc show`, then the cable and switch port"))
    for link in slow:
        if link.src in culprits or link.dst in culprits:
            continue
        rows.append(result(check_id, title, "warn", link.src,
                           f"{_fmt(link)} Gbit/s, below {meshplan.SLOW_FRACTION:.0%} of the typical {median:.2f} Gbit/s"
                           + _reverse(mesh, link),
                           f"the path {link.src} → {link.dst}: {link.src} reports {_iface(ctx, link.src)}, {link.dst} "
                           f"{_iface(ctx, link.dst)}; compare the switch ports on that path (ethtool, counters)"))
    seen: set[frozenset[str]] = set()
    for link in delayed:
        pair = frozenset((link.src, link.dst))
        if pair in seen:
            continue
        seen.add(pair)
        back = mesh.link(link.dst, link.src)
        both = f" ({link.dst}→{link.src} {back.latency_ms:.1f} ms)" if back and back.latency_ms is not None else ""
        rows.append(result(check_id, title, "warn", link.src,
                           f"{link.src}→{link.dst} connect {link.latency_ms:.1f} ms{both}, above {meshplan.MAX_LATENCY_MS:g} ms",
                           f"every collective step waits this long: put {link.src} and {link.dst} on one LAN segment "
                           f"(`tc qdisc show dev <iface>` on both for a leftover netem; traceroute between them)"))
    for link in failed:
        if "is not up" in (link.error or ""):
            continue
        rows.append(result(check_id, title, "warn", link.src, f"{link.src}→{link.dst}: {link.error}",
                           f"check the route and firewall from {link.src} to {link.dst}'s agent port"))
    lat = [lk.latency_ms for lk in mesh.links if lk.latency_ms is not None]
    summary = (f"{len(mesh.nodes)} nodes, {len(measured)} links in {mesh.rounds} rounds ({mesh.seconds:.1f} s): "
               + (f"typical {median:.2f} Gbit/s, slowest {', '.join(_fmt(lk) for lk in measured[:3])} Gbit/s"
                  if median is not None else "no bandwidth measured")
               + (f"; connect {min(lat):.2f}–{max(lat):.2f} ms" if lat else ""))
    if slow:
        summary += f"; slow: {', '.join(_fmt(lk) for lk in slow)}"
    status: Status = "warn" if rows else "pass"
    hint = "see the rows below for each slow node or pair" if rows else ""
    return [result(check_id, title, status, None, summary, hint), *rows]


def _reverse(mesh: MeshMatrix, link: Link) -> str:
    back = mesh.link(link.dst, link.src)
    if back is None or back.gbit_per_s is None or link.gbit_per_s is None:
        return ""
    if back.gbit_per_s > 2 * link.gbit_per_s:
        return f" (asymmetric: {link.dst}→{link.src} {back.gbit_per_s:.2f} Gbit/s)"
    return ""


@check("net.mesh", "full mesh: every pair's latency and bandwidth")
async def mesh_check(ctx: CheckContext) -> list[CheckResult]:
    """Every ordered pair, in rounds of disjoint pairs; names slow nodes, slow pairs and delayed pairs."""
    title = "full mesh: every pair's latency and bandwidth"
    if ctx.single_node:
        return [result("net.mesh", title, "pass", None, "one node: no network hop")]
    up = [n for n in ctx.config.nodes if ctx.report(n) is not None]
    if len(up) < 2:
        return [result("net.mesh", title, "skip", None, "fewer than two agents up: no pair to measure",
                       "fix the agent.reachable rows first")]
    mesh = await mesh_of(ctx)
    run = await mesh_run_of(ctx)
    if run.mode == "full" or run.quick is None:
        rows = mesh_rows(ctx, mesh)
        rows[0] = rows[0].model_copy(update={"detail": f"full mesh ({run.reason}): {rows[0].detail}"})
        return rows
    rows = mesh_rows(ctx, run.quick)
    rows[0] = rows[0].model_copy(update={
        "detail": f"quick pass, {rows[0].detail}; {run.reason} (`ftwiz --check --mesh` measures every pair now)"})
    named = {r.node for r in rows[1:]}
    for row in mesh_rows(ctx, mesh)[1:]:  # what only the full matrix shows (a slow pair off the ring)
        if row.node not in named:
            rows.append(row.model_copy(update={"detail": f"full mesh of {_age(run.age_s)} ago: {row.detail}"}))
    if any(r.status != "pass" for r in rows[1:]) and rows[0].status == "pass":
        rows[0] = rows[0].model_copy(update={"status": "warn", "hint": "see the rows below for each slow node or pair"})
    return rows


def link_to(mesh: MeshMatrix, node: NodeConfig, master: NodeConfig) -> Link | None:
    """``node → master`` from the mesh (what ``net.latency`` and ``net.bandwidth`` report)."""
    return mesh.link(node.name, master.name)
