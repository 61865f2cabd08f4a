"""Agents in namespace nodes, over real HTTP: connect/listen/firewall, bandwidth, link cuts, reports."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from shared.models import BandwidthProbeResult, ConnectProbeResult, ListenProbeResult, NodeReport

pytestmark = pytest.mark.cluster


def wait_until(predicate, timeout: float, step: float = 0.1) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def connect(node, host: str, port: int, timeout_s: float = 3.0) -> ConnectProbeResult:
    """Ask ``node``'s agent to TCP-connect to ``host:port``."""
    body = node.agent_post("/v1/probe/connect", {"host": host, "port": port, "timeout_s": timeout_s})
    return ConnectProbeResult.model_validate(body)


def free_port() -> int:
    """A port nothing in a fresh node listens on (tests share one cluster; listeners live for their ttl)."""
    return random.randrange(30000, 60000)


def test_each_agent_reports_its_own_node(cluster3):
    for node in cluster3.nodes:
        report = NodeReport.model_validate(node.agent_get("/v1/report"))
        assert report.node_name == node.name
        nics = {nic.name: nic for nic in report.nics}
        assert "eth0" in nics, f"{node.name} reports {sorted(nics)}"
        assert node.address in [a.address for a in nics["eth0"].addresses]
        assert not any(a.address == cluster3.nodes[(node.index + 1) % 3].address
                       for nic in report.nics for a in nic.addresses), "a node sees only its own addresses"


def test_token_required_across_nodes(cluster3):
    node0 = cluster3.nodes[0]
    assert node0.agent_request("GET", "/healthz", token=None).status_code == 200
    assert node0.agent_request("GET", "/v1/report", token=None).status_code == 401
    assert node0.agent_request("GET", "/v1/report", token="wrong-token").status_code == 401


def test_connect_probe_reachable_and_refused(cluster3):
    node0, node1, _ = cluster3.nodes
    ok = connect(node1, node0.address, node0.agent_port)
    assert ok.reachable and ok.error is None
    assert ok.latency_ms is not None and ok.latency_ms > 0
    refused = connect(node1, node0.address, free_port())
    assert not refused.reachable
    assert "refused" in (refused.error or "").lower()


def test_listen_then_connect_from_peers_then_firewall(cluster3):
    node0, node1, node2 = cluster3.nodes
    port = free_port()
    held = ListenProbeResult.model_validate(node0.agent_post("/v1/probe/listen", {"port": port, "ttl_s": 30}))
    assert held.listening and held.port == port
    assert connect(node1, node0.address, port).reachable
    assert connect(node2, node0.address, port).reachable
    again = ListenProbeResult.model_validate(node0.agent_post("/v1/probe/listen", {"port": port, "ttl_s": 30}))
    assert again.listening and again.accepted >= 2, "a repeat call renews the agent's own listener"
    # The firewall test: the rendezvous port dropped in node0's namespace: connects time out, ping-like
    # reachability of the node (its agent port) stays.
    node0.nft_block_port(port)
    blocked = connect(node1, node0.address, port, timeout_s=1.0)
    assert not blocked.reachable
    error = (blocked.error or "").lower()
    assert error and "refused" not in error, f"a dropped SYN is a timeout, not a refusal: {blocked.error}"
    assert any(word in error for word in ("no answer", "timed out", "timeout", "within")), blocked.error
    assert connect(node1, node0.address, node0.agent_port).reachable


def test_listen_on_a_port_taken_in_the_node_is_409(cluster3):
    node0 = cluster3.nodes[0]
    port = free_port()
    code = (f"import socket, time; s = socket.socket(); s.bind(('0.0.0.0', {port})); s.listen(); "
            "print('ready', flush=True); time.sleep(60)")
    holder = node0.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        taken = node0.agent_request("POST", "/v1/probe/listen", json_body={"port": port, "ttl_s": 5})
        assert taken.status_code == 409, taken.text
        assert str(port) in taken.text
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_bandwidth_between_two_nodes(cluster3):
    node0, node1, _ = cluster3.nodes
    result = BandwidthProbeResult.model_validate(
        node1.agent_post("/v1/probe/bandwidth", {"peer_url": node0.agent_url, "seconds": 1.0}, timeout=60))
    assert result.error is None, result.error
    assert result.bytes_sent > 0 and result.seconds > 0
    assert result.gbit_per_s > 0


def test_link_down_makes_node_unreachable_and_link_up_restores(cluster3):
    node0, node1, _ = cluster3.nodes
    node0.link_down()
    assert not node0.agent_healthy(timeout=1.0)
    assert not connect(node1, node0.address, node0.agent_port, timeout_s=1.0).reachable
    assert node0.ssh(["true"], timeout=20).returncode != 0
    node0.link_up()
    assert wait_until(node0.agent_healthy, timeout=15)
    assert connect(node1, node0.address, node0.agent_port).reachable


def test_stop_and_start_agent(cluster3):
    node2 = cluster3.nodes[2]
    node2.stop_agent()
    assert not node2.agent_healthy()
    refused = connect(cluster3.nodes[0], node2.address, node2.agent_port)
    assert not refused.reachable
    node2.start_agent()
    assert node2.agent_healthy()


def test_ssh_and_paramiko_into_agent_nodes(cluster3):
    for node in cluster3.nodes:
        assert node.ssh(["true"]).returncode == 0
        client = node.paramiko_client()
        try:
            _, out, _ = client.exec_command("cat /proc/net/dev")
            assert "eth0" in out.read().decode()
        finally:
            client.close()


def test_probes_are_confined_to_the_cluster(cluster3):
    # Nodes have no default route, so nothing could leave anyway; the agent must not even try.
    outside = connect(cluster3.nodes[1], "198.51.100.7", 22, timeout_s=1.0)
    assert not outside.reachable
    assert "probe-allow" in (outside.error or ""), outside.error
