"""Network: subnet with the master, NCCL interface, MTU, InfiniBand, latency, bandwidth, master address.

Interface facts come from :mod:`shared.netplan` (the same plan the launcher turns into each node's
environment); latency and bandwidth to the master are the master's column of the full mesh (:mod:`tui.checks.mesh`,
measured once, in rounds of disjoint pairs, by the agents' probes), name resolution from each node's
connect to the master, because that is the path NCCL and the rendezvous take.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Optional

from shared import netplan
from shared.config import NodeConfig
from tui.checks.base import CheckContext, CheckResult, Status, check, result
from tui.checks.mesh import mesh_of

MAX_LATENCY_MS = 10.0
"""TCP connect time to the master above which collectives and the rendezvous will crawl."""
MIN_BANDWIDTH_GBIT = 1.0
"""Below this, gradient all-reduces dominate the step time for any model worth fine-tuning."""


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
        return True
    except ValueError:
        return False


async def interface_plan(ctx: CheckContext) -> netplan.InterfacePlan:
    """The netplan for the cluster, memoised; a master given by name is resolved by another node's agent."""

    async def build() -> netplan.InterfacePlan:
        address: Optional[str] = None
        if not _is_ip(ctx.master.host):
            for node in ctx.config.nodes:
                if node.name != ctx.master.name and ctx.report(node) is not None:
                    reply = await ctx.connect_to_master(node)
                    if reply.value is not None and reply.value.resolved:
                        address = reply.value.resolved
                        break
        plan = netplan.resolve_interfaces(ctx.config, ctx.reports, master_address=address)
        ctx.notes["interface_plan"] = plan  # the launch gets the environment this plan makes (ChecklistRun.network_env)
        return plan

    return await ctx.memo("interface-plan", build)


def _issue_rows(check_id: str, title: str, issues: list[netplan.NetIssue]) -> list[CheckResult]:
    return [result(check_id, title, i.severity, i.node, i.message, i.hint) for i in issues]


@check("net.subnet", "interface in a subnet with the master")
async def subnet(ctx: CheckContext) -> list[CheckResult]:
    """Per node: an interface whose subnet holds the master's address."""
    title = "interface in a subnet with the master"
    plan = await interface_plan(ctx)
    rows = []
    for node in ctx.config.nodes:
        if ctx.report(node) is None:
            rows.append(ctx.down_skip("net.subnet", title, node))
            continue
        issues = [i for i in plan.issues if i.node == node.name and i.topic in ("subnet", "loopback")]
        if issues:
            rows.extend(_issue_rows("net.subnet", title, issues))
            continue
        chosen = plan.nodes.get(node.name)
        if chosen and chosen.ifname:
            rows.append(result("net.subnet", title, "pass", node.name, f"{chosen.ifname} {chosen.address} in {chosen.network}"))
        else:
            rows.append(result("net.subnet", title, "skip", node.name, "master address unknown"))
    return rows


@check("net.ifname", "NCCL socket interface resolves")
async def ifname(ctx: CheckContext) -> list[CheckResult]:
    """Per node: what ``NCCL_SOCKET_IFNAME`` selects (auto: the subnet's interface; explicit: NCCL's prefix match)."""
    title = "NCCL socket interface resolves"
    plan = await interface_plan(ctx)
    rows = []
    spec = ctx.config.nccl.socket_ifname
    for node in ctx.config.nodes:
        if ctx.report(node) is None:
            rows.append(ctx.down_skip("net.ifname", title, node))
            continue
        chosen = plan.nodes.get(node.name)
        if plan.mode == "explicit":
            issues = [i for i in plan.issues if i.node == node.name and i.topic in ("ifname", "loopback")]
            if issues:
                rows.extend(_issue_rows("net.ifname", title, issues))
            else:
                rows.append(result("net.ifname", title, "pass", node.name, f"{spec!r} selects {', '.join(chosen.nccl_matches if chosen else [])}"))
        elif chosen and chosen.ifname:
            rows.append(result("net.ifname", title, "pass", node.name, f"auto: NCCL_SOCKET_IFNAME=={chosen.ifname} (exact), GLOO_SOCKET_IFNAME={chosen.ifname}"))
        else:
            rows.append(result("net.ifname", title, "fail", node.name, "auto found no interface for NCCL (see net.subnet)",
                               f'fix net.subnet for {node.name}, or set [nccl] socket_ifname to the interface to use'))
    return rows


@check("net.mtu", "MTU equal on the NCCL interface")
async def mtu(ctx: CheckContext) -> list[CheckResult]:
    """The chosen interface's MTU is the same on every node; name the odd node and both MTUs."""
    title = "MTU equal on the NCCL interface"
    plan = await interface_plan(ctx)
    mtus = {name: (n.ifname, n.mtu) for name, n in plan.nodes.items() if n.ifname and n.mtu}
    if len(mtus) < 2:
        return [result("net.mtu", title, "pass" if ctx.single_node else "skip", None,
                       "one node: nothing to compare" if ctx.single_node else "fewer than two nodes with a known interface")]
    counts = Counter(m for _, m in mtus.values())
    if len(counts) == 1:
        value = next(iter(counts))
        return [result("net.mtu", title, "pass", None, f"MTU {value} on {len(mtus)} nodes")]
    master_mtu = mtus.get(ctx.master.name, (None, None))[1]
    top = max(counts.values())
    leaders = [m for m, c in counts.items() if c == top]
    reference = master_mtu if master_mtu in leaders else leaders[0]
    holders = ", ".join(n for n, (_, m) in mtus.items() if m == reference)
    rows = []
    for name, (iface, value) in mtus.items():
        if value != reference:
            rows.append(result("net.mtu", title, "fail", name,
                               f"MTU {value} on {name} ({iface}) vs {reference} on {holders}: large packets are dropped, NCCL hangs",
                               f"on {name}: sudo ip link set dev {iface} mtu {reference} (and make it persistent in netplan/NetworkManager)"))
    return rows


@check("net.ib", "InfiniBand ports Active")
def ib(ctx: CheckContext) -> list[CheckResult]:
    """IB/RoCE ports Active when ``nccl.ib`` is on or auto-detected; reports NCCL_IB_DISABLE."""
    title = "InfiniBand ports Active"
    plan = netplan.ib_plan(ctx.config, ctx.reports)
    ctx.notes["ib_plan"] = plan
    rows = _issue_rows("net.ib", title, plan.issues)
    if rows:
        return rows
    value = 1 if plan.disable else 0
    ports = "; ".join(f"{n}: {', '.join(p)}" for n, p in plan.active_ports.items() if p)
    return [result("net.ib", title, "pass", None, f"{plan.reason} (NCCL_IB_DISABLE={value}){' — ' + ports if ports else ''}")]


def _others(ctx: CheckContext) -> list[NodeConfig]:
    return [n for n in ctx.config.nodes if n.name != ctx.master.name]


@check("net.latency", "latency to the master ≤ 10 ms")
async def latency(ctx: CheckContext) -> list[CheckResult]:
    """Per non-master node: its agent's best TCP connect time to the master's agent (from the mesh)."""
    title = "latency to the master ≤ 10 ms"
    if ctx.single_node:
        return [result("net.latency", title, "pass", None, "one node: no network hop")]
    rows = []
    port = ctx.config.agent_port(ctx.master)
    mesh = await mesh_of(ctx) if ctx.report(ctx.master) is not None else None
    for node in _others(ctx):
        link = mesh.link(node.name, ctx.master.name) if mesh is not None else None
        if ctx.report(node) is None or link is None:
            rows.append(ctx.down_skip("net.latency", title, node if ctx.report(node) is None else ctx.master))
        elif link.latency_ms is None:
            rows.append(result("net.latency", title, "fail", node.name,
                               f"{node.name} cannot connect to the master {ctx.master.host}:{port}: {link.error}",
                               f"check the route and firewall between {node.name} and {ctx.master.name} (from {node.name}: nc -vz {ctx.master.host} {port})"))
        else:
            ms = link.latency_ms
            status: Status = "pass" if ms <= MAX_LATENCY_MS else "warn"
            rows.append(result("net.latency", title, status, node.name, f"TCP connect to {ctx.master.name} in {ms:.2f} ms",
                               "" if status == "pass" else "put the nodes on one LAN segment; collectives over a slow path stall every step"))
    return rows


@check("net.master_address", "master address usable and resolves the same everywhere")
async def master_address(ctx: CheckContext) -> list[CheckResult]:
    """The master's host is not loopback (with several nodes) and every node resolves it to the same address."""
    title = "master address usable and resolves the same everywhere"
    host = ctx.master.host
    if netplan.is_loopback_host(host) and not ctx.single_node:
        return [result("net.master_address", title, "fail", ctx.master.name,
                       f"master host {host!r} is loopback: other nodes cannot reach it",
                       f"set host for {ctx.master.name} in ftwiz.toml to its LAN address (ip -4 addr on {ctx.master.name})")]
    if ctx.single_node:
        return [result("net.master_address", title, "pass", None, f"one node: master {host}")]
    resolved: dict[str, str] = {}
    rows = []
    for node in ctx.config.nodes:
        if ctx.report(node) is None:
            continue
        reply = await ctx.connect_to_master(node)
        if reply.value is not None and reply.value.resolved:
            resolved[node.name] = reply.value.resolved
    for name, address in resolved.items():
        if netplan.is_loopback_host(address):
            rows.append(result("net.master_address", title, "fail", name,
                               f"{host} resolves to loopback {address} on {name} (a 127.0.1.1 hostname line?)",
                               f"fix /etc/hosts on {name} so {host} maps to the master's LAN address, or use the IP as host"))
    counts = Counter(resolved.values())
    if len(counts) > 1:
        reference = resolved.get(ctx.master.name) if ctx.master.name in resolved else counts.most_common(1)[0][0]
        holders = ", ".join(n for n, a in resolved.items() if a == reference)
        for name, address in resolved.items():
            if address != reference and not netplan.is_loopback_host(address):
                rows.append(result("net.master_address", title, "fail", name,
                                   f"{host} resolves to {address} on {name} vs {reference} on {holders}",
                                   f"make {host} resolve the same everywhere (DNS or /etc/hosts on {name}), or use the IP as host"))
    if rows:
        return rows
    if not resolved:
        return [result("net.master_address", title, "skip", None, "no agent could resolve the master")]
    return [result("net.master_address", title, "pass", None, f"{host} → {next(iter(counts))} on {len(resolved)} node(s)")]


@check("net.bandwidth", "bandwidth to the master ≥ 1 Gbit/s")
async def bandwidth(ctx: CheckContext) -> list[CheckResult]:
    """Per non-master node: its stream to the master's agent, taken from the mesh (one stream per node at a time)."""
    title = "bandwidth to the master ≥ 1 Gbit/s"
    if ctx.single_node:
        return [result("net.bandwidth", title, "pass", None, "one node: no network hop")]
    master_up = ctx.report(ctx.master) is not None
    mesh = await mesh_of(ctx) if master_up else None
    rows = []
    peer = ctx.client.base_url(ctx.master)
    for node in _others(ctx):
        link = mesh.link(node.name, ctx.master.name) if mesh is not None else None
        if ctx.report(node) is None or link is None:
            rows.append(ctx.down_skip("net.bandwidth", title, node if ctx.report(node) is None else ctx.master))
            continue
        if link.gbit_per_s is None:
            rows.append(result("net.bandwidth", title, "warn", node.name, f"bandwidth probe to {ctx.master.name} failed: {link.error}",
                               f"check the path from {node.name} to {peer}"))
            continue
        gbit = link.gbit_per_s
        status: Status = "pass" if gbit >= MIN_BANDWIDTH_GBIT else "warn"
        seconds = mesh.stream_seconds if mesh is not None else 0.0
        rows.append(result("net.bandwidth", title, status, node.name,
                           f"{gbit:.2f} Gbit/s to {ctx.master.name} over {seconds:.1f} s (HTTP stream)",
                           "" if status == "pass" else
                           f"a slow link: check `ethtool <iface>` speed/duplex on {node.name} and {ctx.master.name}; expect long all-reduces"))
    return rows
