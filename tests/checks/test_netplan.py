"""shared.netplan: interface choice, NCCL_SOCKET_IFNAME matching, IB plan and per-node env (pure)."""

from __future__ import annotations

from shared import netplan
from shared.config import FtwizConfig, NcclConfig, NodeConfig
from shared.models import IbPort, NicAddress, NicInfo, NodeReport


def nic(name: str, address: str | None = None, prefix: int = 24, *, mtu: int = 1500, loopback: bool = False) -> NicInfo:
    addrs = [NicAddress(family="ipv4", address=address, prefixlen=prefix)] if address else []
    return NicInfo(name=name, addresses=addrs, mtu=mtu, is_up=True, is_loopback=loopback)


LO = nic("lo", "127.0.0.1", 8, mtu=65536, loopback=True)


def report(name: str, *nics: NicInfo, ib: list[IbPort] | None = None) -> NodeReport:
    return NodeReport(node_name=name, hostname=name, agent_version="0", time_unix=0.0, nics=[LO, *nics], ib_ports=ib or [])


def cluster(*hosts: str, ifname: str = "auto", ib: str = "auto", env: dict | None = None) -> FtwizConfig:
    nodes = [NodeConfig(name=f"n{i}", host=h) for i, h in enumerate(hosts)]
    return FtwizConfig(nodes=nodes, nccl=NcclConfig(socket_ifname=ifname, ib=ib, env=env or {}))


def test_auto_picks_the_interface_in_the_masters_subnet():
    config = cluster("10.0.0.1", "10.0.0.2")
    reports = {
        "n0": report("n0", nic("eth0", "192.168.5.10"), nic("enp1s0", "10.0.0.1")),
        "n1": report("n1", nic("docker0", "172.17.0.1", 16), nic("eth1", "10.0.0.2")),
    }
    plan = netplan.resolve_interfaces(config, reports)
    assert plan.ok and not plan.issues
    assert (plan.nodes["n0"].ifname, plan.nodes["n1"].ifname) == ("enp1s0", "eth1")
    env = netplan.node_env(config, reports)
    assert env["n0"] == {"NCCL_SOCKET_IFNAME": "=enp1s0", "GLOO_SOCKET_IFNAME": "enp1s0", "NCCL_IB_DISABLE": "1"}
    assert env["n1"]["NCCL_SOCKET_IFNAME"] == "=eth1"


def test_node_outside_the_subnet_fails_with_its_interfaces():
    config = cluster("10.0.0.1", "10.0.0.2")
    reports = {"n0": report("n0", nic("eth0", "10.0.0.1")), "n1": report("n1", nic("eth0", "10.9.0.2"))}
    plan = netplan.resolve_interfaces(config, reports)
    (issue,) = plan.issues
    assert issue.severity == "fail" and issue.node == "n1" and issue.topic == "subnet"
    assert "10.0.0.1" in issue.message and "eth0 10.9.0.2/24" in issue.message


def test_two_interfaces_in_the_subnet_warn_and_suggest_an_exact_name():
    config = cluster("10.0.0.1", "10.0.0.2")
    reports = {"n0": report("n0", nic("eth0", "10.0.0.1")), "n1": report("n1", nic("eth0", "10.0.0.2"), nic("eth1", "10.0.0.3"))}
    (issue,) = netplan.resolve_interfaces(config, reports).issues
    assert issue.severity == "warn" and issue.node == "n1" and 'socket_ifname = "=eth0"' in issue.hint


def test_explicit_prefix_that_matches_two_interfaces_is_ambiguous():
    config = cluster("10.0.0.1", "10.0.0.2", ifname="eth")
    reports = {"n0": report("n0", nic("eth0", "10.0.0.1")), "n1": report("n1", nic("eth0", "10.0.0.2"), nic("eth1"))}
    plan = netplan.resolve_interfaces(config, reports)
    (issue,) = plan.issues
    assert issue.severity == "warn" and issue.node == "n1" and "eth0, eth1" in issue.message
    assert 'socket_ifname = "=eth0"' in issue.hint
    assert netplan.node_env(config, reports)["n1"]["NCCL_SOCKET_IFNAME"] == "eth"
    assert netplan.node_env(config, reports)["n1"]["GLOO_SOCKET_IFNAME"] == "eth0"


def test_exact_name_missing_on_a_node_fails():
    config = cluster("10.0.0.1", "10.0.0.2", ifname="=eth0")
    reports = {"n0": report("n0", nic("eth0", "10.0.0.1")), "n1": report("n1", nic("eth00", "10.0.0.2"))}
    issues = netplan.resolve_interfaces(config, reports).issues
    assert any(i.severity == "fail" and i.node == "n1" and "matches no interface" in i.message and "eth00" in i.message for i in issues)


def test_exclusion_syntax_and_loopback():
    assert netplan.match_ifname("^docker", ["docker0", "eth0", "lo"]) == ["eth0", "lo"]
    assert netplan.match_ifname("^=docker0,lo", ["docker0", "docker1", "eth0", "lo"]) == ["docker1", "eth0"]
    assert netplan.match_ifname("eth,ib", ["eth0", "ib0", "enp1"]) == ["eth0", "ib0"]
    config = cluster("10.0.0.1", "10.0.0.2", ifname="^docker")
    reports = {"n0": report("n0", nic("eth0", "10.0.0.1")), "n1": report("n1", nic("eth0", "10.0.0.2"))}
    issues = [i for i in netplan.resolve_interfaces(config, reports).issues if i.topic == "loopback"]
    assert issues and all(i.severity == "warn" for i in issues) and 'socket_ifname = "^docker,lo"' in issues[0].hint
    config = cluster("10.0.0.1", "10.0.0.2", ifname="lo")
    issues = netplan.resolve_interfaces(config, reports).issues
    assert any(i.severity == "fail" and i.topic == "loopback" and "never works across nodes" in i.message for i in issues)


def test_loopback_master_only_for_a_single_node():
    single = cluster("127.0.0.1")
    plan = netplan.resolve_interfaces(single, {"n0": report("n0", nic("eth0", "10.0.0.1"))})
    assert plan.ok and plan.nodes["n0"].ifname == "lo"
    multi = cluster("127.0.0.1", "10.0.0.2")
    plan = netplan.resolve_interfaces(multi, {"n0": report("n0", nic("eth0", "10.0.0.1")), "n1": report("n1", nic("eth0", "10.0.0.2"))})
    assert not plan.ok and any(i.topic == "loopback" and i.node == "n0" for i in plan.issues)


def test_master_given_by_name_uses_the_resolved_address():
    config = cluster("master.lan", "10.0.0.2")
    reports = {"n0": report("n0", nic("eth0", "10.0.0.1")), "n1": report("n1", nic("eth0", "10.0.0.2"))}
    plan = netplan.resolve_interfaces(config, reports, master_address="10.0.0.1")
    assert plan.ok and plan.master_address == "10.0.0.1" and plan.nodes["n1"].ifname == "eth0"


def active(device: str = "mlx5_0") -> IbPort:
    return IbPort(device=device, port=1, state="ACTIVE", phys_state="LinkUp", link_layer="InfiniBand")


def test_ib_plan():
    both = {"n0": report("n0", ib=[active()]), "n1": report("n1", ib=[active()])}
    one = {"n0": report("n0", ib=[active()]), "n1": report("n1", ib=[IbPort(device="mlx5_0", port=1, state="DOWN")])}
    auto = cluster("10.0.0.1", "10.0.0.2")
    assert netplan.ib_plan(auto, both).disable is False
    plan = netplan.ib_plan(auto, one)
    assert plan.disable is True and "n1" in plan.reason and plan.issues[0].severity == "warn"
    plan = netplan.ib_plan(cluster("10.0.0.1", "10.0.0.2", ib="on"), one)
    assert plan.disable is False and [(i.severity, i.node) for i in plan.issues] == [("fail", "n1")]
    assert netplan.ib_plan(cluster("10.0.0.1", "10.0.0.2", ib="off"), both).disable is True


def test_user_env_wins():
    config = cluster("10.0.0.1", env={"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "0"})
    env = netplan.node_env(config, {"n0": report("n0", nic("eth0", "10.0.0.1"))})
    assert env["n0"]["NCCL_DEBUG"] == "INFO" and env["n0"]["NCCL_IB_DISABLE"] == "0"
