"""Which network interface and transport every node's ranks should use (pure; no sockets).

The checklist uses it to check the network, and the launcher to build each node's environment:

- :func:`resolve_interfaces` — per node, the interface whose subnet holds the master's address
  (``nccl.socket_ifname = "auto"``), or a check that an explicit ``socket_ifname`` matches on every
  node the way NCCL matches it: a comma-separated list of *prefixes* (``eth`` matches ``eth0`` and
  ``eth1``), ``=`` for exact names, ``^`` to exclude (``^docker,lo``). ``lo`` never works across nodes.
- :func:`ib_plan` — whether ``NCCL_IB_DISABLE`` is 0 or 1, and why.
- :func:`node_env` — the resulting environment per node: ``NCCL_SOCKET_IFNAME``,
  ``GLOO_SOCKET_IFNAME`` (gloo takes one exact name), ``NCCL_IB_DISABLE``, then ``[nccl] env``.

Sources: NCCL environment variables documentation (NCCL_SOCKET_IFNAME prefix/``=``/``^`` syntax,
NCCL_IB_DISABLE); torch.distributed docs (GLOO_SOCKET_IFNAME, one interface name per entry).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Literal, Mapping, Optional

from shared.config import FtwizConfig
from shared.models import NicInfo, NodeReport

__all__ = [
    "IbPlan",
    "InterfacePlan",
    "NetIssue",
    "NodeInterface",
    "ib_plan",
    "is_loopback_host",
    "match_ifname",
    "node_env",
    "parse_ifname",
    "plan_env",
    "resolve_interfaces",
]

Severity = Literal["warn", "fail"]


@dataclass
class NetIssue:
    """A problem found while planning, with the fix."""

    severity: Severity
    """``warn`` (may work) or ``fail`` (will not work)."""
    node: Optional[str]
    """The node concerned (``None`` for the whole cluster)."""
    message: str
    """What is wrong."""
    hint: str
    """The exact setting or command that fixes it."""
    topic: Literal["subnet", "ifname", "loopback", "ib"] = "ifname"
    """Which part of the plan: ``subnet``, ``ifname``, ``loopback`` or ``ib``."""


@dataclass
class NodeInterface:
    """The interface one node's ranks will use."""

    node: str
    """Node name."""
    ifname: Optional[str] = None
    """The interface in the master's subnet (gloo's choice), or None when there is none."""
    address: Optional[str] = None
    """Its address in that subnet."""
    network: Optional[str] = None
    """That subnet, e.g. ``10.0.0.0/24``."""
    mtu: Optional[int] = None
    """Its MTU."""
    nccl_matches: list[str] = field(default_factory=list)
    """Interfaces NCCL_SOCKET_IFNAME selects on this node (explicit mode) or ``[ifname]`` (auto)."""


@dataclass
class InterfacePlan:
    """The interface plan for the cluster."""

    mode: Literal["auto", "explicit"]
    """``auto`` (picked per node) or ``explicit`` (``nccl.socket_ifname`` as given)."""
    master: str
    """Master node name."""
    master_address: Optional[str]
    """The master address that ranks will dial (an IP), when known."""
    nodes: dict[str, NodeInterface] = field(default_factory=dict)
    """Per node: the chosen interface."""
    issues: list[NetIssue] = field(default_factory=list)
    """Problems, each with its fix."""

    @property
    def ok(self) -> bool:
        """No ``fail`` issue."""
        return not any(i.severity == "fail" for i in self.issues)


@dataclass
class IbPlan:
    """Whether NCCL should use InfiniBand/RoCE."""

    disable: bool
    """Value for ``NCCL_IB_DISABLE`` (True → ``1``)."""
    reason: str
    """Why."""
    active_ports: dict[str, list[str]] = field(default_factory=dict)
    """Per node, the Active ports as ``device:port``."""
    issues: list[NetIssue] = field(default_factory=list)
    """Problems (``ib = "on"`` with a node lacking an Active port)."""


# --------------------------------------------------------------------------- helpers


def is_loopback_host(host: str) -> bool:
    """``localhost``, ``127.0.0.0/8`` or ``::1``."""
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _ip(text: Optional[str]) -> Optional[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    if not text:
        return None
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def parse_ifname(spec: str) -> tuple[bool, bool, list[str]]:
    """Split an ``NCCL_SOCKET_IFNAME`` value into ``(exclude, exact, names)``.

    ``"^=docker0,lo"`` → ``(True, True, ["docker0", "lo"])``; ``"eth"`` → ``(False, False, ["eth"])``.
    """
    spec = spec.strip()
    exclude = spec.startswith("^")
    if exclude:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    return exclude, exact, [s.strip() for s in spec.split(",") if s.strip()]


def match_ifname(spec: str, names: list[str]) -> list[str]:
    """The interfaces among ``names`` that NCCL selects with ``NCCL_SOCKET_IFNAME=spec``."""
    exclude, exact, wanted = parse_ifname(spec)

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    return [n for n in names if hit(n) != exclude]


def _master_address(config: FtwizConfig, reports: Mapping[str, NodeReport], given: Optional[str]) -> Optional[str]:
    """The master's address as an IP: given (e.g. resolved by an agent), the host itself, or the master's own NIC."""
    for candidate in (given, config.master.host):
        if _ip(candidate) is not None:
            return str(_ip(candidate))
    report = reports.get(config.master.name)
    if report is not None:
        addresses = [a.address for nic in report.nics if not nic.is_loopback for a in nic.addresses if a.family == "ipv4"]
        if len(addresses) == 1:
            return addresses[0]
    return None


def _nic_in_subnet(nic: NicInfo, target: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Optional[tuple[str, str]]:
    for addr in nic.addresses:
        ip = _ip(addr.address)
        if ip is None or ip.version != target.version or addr.prefixlen is None:
            continue
        network = ipaddress.ip_network(f"{ip}/{addr.prefixlen}", strict=False)
        if target in network:
            return str(ip), str(network)
    return None


# --------------------------------------------------------------------------- interfaces


def resolve_interfaces(
    config: FtwizConfig,
    reports: Mapping[str, NodeReport],
    *,
    master_address: Optional[str] = None,
) -> InterfacePlan:
    """Plan each node's interface from the agents' NIC lists.

    ``master_address`` is the master's IP when ``master.host`` is a name (e.g. what an agent resolved);
    otherwise the host literal, or the master's only non-loopback IPv4 address. Nodes without a report
    are left out (the checklist reports them as down).
    """
    master = config.master
    single = len(config.nodes) == 1
    spec = config.nccl.socket_ifname.strip()
    mode: Literal["auto", "explicit"] = "auto" if spec.lower() in ("", "auto") else "explicit"
    address = _master_address(config, reports, master_address)
    plan = InterfacePlan(mode=mode, master=master.name, master_address=address)
    if is_loopback_host(master.host) and not single:
        plan.issues.append(NetIssue(
            "fail", master.name,
            f"master host {master.host!r} is a loopback address: other nodes cannot reach it",
            f"set host for {master.name} in ftwiz.toml to its LAN address (ip -4 addr show on {master.name})",
            topic="loopback",
        ))
    target = _ip(address)
    for node in config.nodes:
        report = reports.get(node.name)
        if report is None:
            continue
        chosen = NodeInterface(node=node.name)
        plan.nodes[node.name] = chosen
        in_subnet = []
        for nic in report.nics:
            if target is None:
                break
            if nic.is_loopback and not single:
                continue
            hit = _nic_in_subnet(nic, target)
            if hit is not None:
                in_subnet.append((nic, hit))
        if target is not None and target.is_loopback and single:
            lo = next((n for n in report.nics if n.is_loopback), None)
            if lo is not None and not in_subnet:
                in_subnet.append((lo, (str(target), "127.0.0.0/8")))
        up_first = sorted(in_subnet, key=lambda item: item[0].is_up is False)
        if up_first:
            nic, (ip, network) = up_first[0]
            chosen.ifname, chosen.address, chosen.network, chosen.mtu = nic.name, ip, network, nic.mtu
            if len(in_subnet) > 1:
                names = ", ".join(n.name for n, _ in in_subnet)
                plan.issues.append(NetIssue(
                    "warn", node.name,
                    f"several interfaces on {node.name} are in the master's subnet ({names}); route order decides which one NCCL uses",
                    f'pin one: [nccl] socket_ifname = "={chosen.ifname}" (or remove the duplicate address)',
                    topic="subnet",
                ))
        elif target is not None:
            nets = _describe_nics(report)
            plan.issues.append(NetIssue(
                "fail", node.name,
                f"no interface on {node.name} is in a subnet with the master's address {address} (has: {nets})",
                f"put {node.name} on the master's network, or set host for {master.name} to an address {node.name} shares",
                topic="subnet",
            ))
        if mode == "auto":
            chosen.nccl_matches = [chosen.ifname] if chosen.ifname else []
        else:
            _check_explicit(plan, node.name, spec, report, chosen, single)
    if target is None and plan.nodes:
        plan.issues.append(NetIssue(
            "warn", master.name,
            f"could not determine the master's IP address from host {master.host!r}",
            f"set host for {master.name} to an IP address, or make sure its agent is up",
            topic="subnet",
        ))
    return plan


def _describe_nics(report: NodeReport) -> str:
    parts = []
    for nic in report.nics:
        if nic.is_loopback:
            continue
        addrs = ",".join(f"{a.address}/{a.prefixlen}" for a in nic.addresses if a.family == "ipv4") or "no IPv4"
        parts.append(f"{nic.name} {addrs}")
    return "; ".join(parts) or "no non-loopback interface"


def _check_explicit(plan: InterfacePlan, node: str, spec: str, report: NodeReport, chosen: NodeInterface, single: bool) -> None:
    names = [n.name for n in report.nics]
    matches = match_ifname(spec, names)
    chosen.nccl_matches = matches
    available = ", ".join(n for n in names) or "none"
    if not matches:
        plan.issues.append(NetIssue(
            "fail", node, f"socket_ifname {spec!r} matches no interface on {node} (it has: {available})",
            'set [nccl] socket_ifname to an interface every node has, or "auto"', topic="ifname",
        ))
        return
    by_name = {n.name: n for n in report.nics}
    loopbacks = [m for m in matches if by_name[m].is_loopback]
    if loopbacks and not single:
        exclude, _, _ = parse_ifname(spec)
        plan.issues.append(NetIssue(
            "fail" if set(loopbacks) == set(matches) else "warn", node,
            f"socket_ifname {spec!r} selects loopback {', '.join(loopbacks)} on {node}: lo never works across nodes",
            (f'add lo to the exclusion: socket_ifname = "{spec},lo"' if exclude else 'name the LAN interface, e.g. socket_ifname = "auto"'),
            topic="loopback",
        ))
    if len(matches) > 1:
        exact = chosen.ifname if chosen.ifname in matches else matches[0]
        plan.issues.append(NetIssue(
            "warn", node,
            f"socket_ifname {spec!r} matches several interfaces on {node} ({', '.join(matches)}): NCCL prefix-matches and may use any",
            f'name one exactly: socket_ifname = "={exact}"',
            topic="ifname",
        ))
    if chosen.ifname is not None and chosen.ifname not in matches:
        plan.issues.append(NetIssue(
            "fail", node,
            f"socket_ifname {spec!r} selects {', '.join(matches)} on {node}, but the master's subnet is on {chosen.ifname}",
            f'use socket_ifname = "auto" or include {chosen.ifname}',
            topic="ifname",
        ))
    elif chosen.ifname is None and matches:
        # No subnet match: gloo still needs one name; take NCCL's first choice.
        first = by_name[matches[0]]
        chosen.ifname, chosen.mtu = first.name, first.mtu


# --------------------------------------------------------------------------- InfiniBand


def ib_plan(config: FtwizConfig, reports: Mapping[str, NodeReport]) -> IbPlan:
    """Decide ``NCCL_IB_DISABLE`` from ``nccl.ib`` and the nodes' Active IB/RoCE ports."""
    active: dict[str, list[str]] = {}
    for node in config.nodes:
        report = reports.get(node.name)
        if report is None:
            continue
        active[node.name] = [f"{p.device}:{p.port}" for p in report.ib_ports if (p.state or "").upper().endswith("ACTIVE")]
    missing = [n for n, ports in active.items() if not ports]
    mode = config.nccl.ib
    if mode == "off":
        return IbPlan(True, 'nccl.ib = "off": NCCL uses TCP sockets', active)
    if mode == "on":
        plan = IbPlan(False, 'nccl.ib = "on": NCCL uses InfiniBand/RoCE', active)
        for name in missing:
            plan.issues.append(NetIssue(
                "fail", name, f'nccl.ib = "on" but {name} has no Active InfiniBand/RoCE port',
                f"bring the port up on {name} (ibstat; check cable and subnet manager: sudo systemctl start opensm), "
                'or set [nccl] ib = "auto"',
                topic="ib",
            ))
        return plan
    if not active:
        return IbPlan(True, "no node reported (IB unknown): NCCL uses TCP sockets", active)
    if missing:
        with_ib = [n for n, ports in active.items() if ports]
        reason = "no node has an Active InfiniBand/RoCE port" if not with_ib else (
            f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no Active InfiniBand/RoCE port: NCCL uses TCP sockets everywhere"
        )
        plan = IbPlan(True, reason, active)
        if with_ib:
            plan.issues.append(NetIssue(
                "warn", missing[0], reason,
                f"bring up IB on {', '.join(missing)} (ibstat), or accept TCP speed",
                topic="ib",
            ))
        return plan
    return IbPlan(False, "every node has an Active InfiniBand/RoCE port", active)


# --------------------------------------------------------------------------- environment


def node_env(
    config: FtwizConfig,
    reports: Mapping[str, NodeReport],
    *,
    master_address: Optional[str] = None,
) -> dict[str, dict[str, str]]:
    """Per node, the environment the ranks get: interface and IB choices, then ``[nccl] env`` (which wins).

    In auto mode ``NCCL_SOCKET_IFNAME`` is the exact name (``=eth0``) found on that node; in explicit
    mode it is ``socket_ifname`` verbatim. ``GLOO_SOCKET_IFNAME`` is always one exact name. A node with no
    usable interface gets no interface variables (the checklist reports why).
    """
    return plan_env(config, resolve_interfaces(config, reports, master_address=master_address), ib_plan(config, reports))


def plan_env(config: FtwizConfig, plan: InterfacePlan, ib: IbPlan) -> dict[str, dict[str, str]]:
    """:func:`node_env` from plans already made (the checklist's own, so the launch gets what it approved)."""
    env: dict[str, dict[str, str]] = {}
    for node in config.nodes:
        values: dict[str, str] = {}
        chosen = plan.nodes.get(node.name)
        if chosen is not None and chosen.ifname:
            values["NCCL_SOCKET_IFNAME"] = f"={chosen.ifname}" if plan.mode == "auto" else config.nccl.socket_ifname
            values["GLOO_SOCKET_IFNAME"] = chosen.ifname
        elif plan.mode == "explicit":
            values["NCCL_SOCKET_IFNAME"] = config.nccl.socket_ifname
        values["NCCL_IB_DISABLE"] = "1" if ib.disable else "0"
        values.update(config.nccl.env)
        env[node.name] = values
    return env
