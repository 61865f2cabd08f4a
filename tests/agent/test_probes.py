"""Network probes between real agents on loopback: connect, listen, bandwidth and the sink."""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import httpx
import pytest

from shared.models import BandwidthProbeResult, ConnectManyResult, ConnectProbeResult, ListenProbeResult, SinkResult

from .conftest import AgentProcess, free_port


@pytest.fixture(scope="module")
def peer(agent_dir, agent: AgentProcess) -> Iterator[AgentProcess]:
    """A second agent with the same token: the far end of bandwidth tests."""
    process = AgentProcess(agent_dir, node_name="peer", token_file=agent.token_file)
    yield process
    process.stop()


def connect(http: httpx.Client, port: int, host: str = "127.0.0.1", timeout_s: float = 2.0) -> ConnectProbeResult:
    response = http.post("/v1/probe/connect", json={"host": host, "port": port, "timeout_s": timeout_s})
    assert response.status_code == 200, response.text
    return ConnectProbeResult.model_validate_json(response.content)


def test_connect_reaches_a_listening_port(client: httpx.Client, agent: AgentProcess) -> None:
    result = connect(client, agent.port)
    assert result.reachable and result.error is None
    assert result.resolved == "127.0.0.1" and result.latency_ms is not None and result.latency_ms >= 0


def test_connect_refused_is_a_value(client: httpx.Client) -> None:
    result = connect(client, free_port())
    assert not result.reachable and result.latency_ms is None
    assert "refused" in result.error


def test_connect_resolves_names(client: httpx.Client, agent: AgentProcess) -> None:
    result = connect(client, agent.port, host="localhost")
    assert result.reachable and result.resolved in ("127.0.0.1", "::1")


def test_connect_many_answers_every_target_in_order(client: httpx.Client, agent: AgentProcess) -> None:
    closed = free_port()
    targets = [{"host": "127.0.0.1", "port": agent.port}, {"host": "127.0.0.1", "port": closed}] * 20
    response = client.post("/v1/probe/connect-many", json={"targets": targets, "tries": 2, "timeout_s": 2})
    assert response.status_code == 200, response.text
    results = ConnectManyResult.model_validate_json(response.content).results
    assert [r.port for r in results] == [t["port"] for t in targets]
    assert all(r.reachable and r.latency_ms is not None for r in results[::2])
    assert all(not r.reachable and "refused" in (r.error or "") for r in results[1::2])
    assert client.post("/v1/probe/connect-many", json={"targets": [], "tries": 1}).status_code == 422


def test_listen_then_connect_counts_the_peer(client: httpx.Client) -> None:
    port = free_port()
    response = client.post("/v1/probe/listen", json={"port": port, "ttl_s": 30})
    assert response.status_code == 200, response.text
    held = ListenProbeResult.model_validate_json(response.content)
    assert held.listening and held.port == port and held.expires_at > time.time()
    assert connect(client, port).reachable
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass

    def accepted_twice():
        again = ListenProbeResult.model_validate_json(client.post("/v1/probe/listen", json={"port": port, "ttl_s": 30}).content)
        return again.accepted >= 2 and again

    deadline = time.monotonic() + 10
    while not (again := accepted_twice()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert again and again.expires_at == held.expires_at, "a repeat call reports the listener already held"


def test_listen_on_a_taken_port_is_409(client: httpx.Client) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        response = client.post("/v1/probe/listen", json={"port": port, "ttl_s": 5})
    assert response.status_code == 409
    detail = response.json()["detail"]
    assert f"port {port} is already in use on node plain" in detail and "ss -ltnp" in detail


def test_listener_closed_on_request_frees_the_port(client: httpx.Client) -> None:
    port = free_port()
    assert client.post("/v1/probe/listen", json={"port": port, "ttl_s": 60}).status_code == 200
    assert connect(client, port).reachable
    response = client.delete(f"/v1/probe/listen/{port}")
    assert response.status_code == 200, response.text
    closed = ListenProbeResult.model_validate_json(response.content)
    assert not closed.listening and closed.port == port and closed.accepted >= 1
    assert not connect(client, port).reachable, "DELETE must free the port at once, not at the ttl"
    with socket.socket() as sock:  # what torchrun's store does next
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
    again = client.delete(f"/v1/probe/listen/{port}")
    assert again.status_code == 404 and f"no test listener on port {port}" in again.json()["detail"]
    assert client.delete("/v1/probe/listen/0").status_code == 422


def test_listener_closes_after_its_ttl(client: httpx.Client) -> None:
    port = free_port()
    assert client.post("/v1/probe/listen", json={"port": port, "ttl_s": 0.5}).status_code == 200
    deadline = time.monotonic() + 10
    while connect(client, port).reachable:
        assert time.monotonic() < deadline, "the listener outlived its ttl"
        time.sleep(0.2)


def test_bandwidth_between_two_agents(client: httpx.Client, peer: AgentProcess) -> None:
    response = client.post("/v1/probe/bandwidth", json={"peer_url": peer.url, "seconds": 1.0})
    assert response.status_code == 200, response.text
    result = BandwidthProbeResult.model_validate_json(response.content)
    assert result.error is None, result.error
    assert result.bytes_sent >= 1 << 20 and result.gbit_per_s > 0
    assert result.seconds >= 1.0
    assert result.gbit_per_s == pytest.approx(result.bytes_sent * 8 / result.seconds / 1e9, rel=1e-3)


def test_one_bandwidth_test_at_a_time(client: httpx.Client, agent: AgentProcess) -> None:
    # A peer that accepts and never answers keeps the first test inside the agent's lock, so
    # the second request meets a running test for certain, whatever the machine's speed.
    stalled = socket.socket()
    stalled.bind(("127.0.0.1", 0))
    stalled.listen()
    stalled.settimeout(30)
    first: list[httpx.Response] = []
    body = {"peer_url": f"http://127.0.0.1:{stalled.getsockname()[1]}", "seconds": 1}
    running = threading.Thread(
        target=lambda: first.append(httpx.post(agent.url + "/v1/probe/bandwidth", headers=agent.auth, json=body, timeout=60, trust_env=False))
    )
    running.start()
    try:
        connection, _ = stalled.accept()  # the first test is now streaming
        second = client.post("/v1/probe/bandwidth", json=body)
        assert second.status_code == 429, second.text
        assert "already running" in second.json()["detail"] and second.headers["retry-after"] == "10"
        connection.close()
    finally:
        stalled.close()
        running.join(60)
    result = BandwidthProbeResult.model_validate_json(first[0].content)
    assert result.gbit_per_s == 0 and result.error


def test_bandwidth_peer_with_another_token(client: httpx.Client, gpu_agent: AgentProcess) -> None:
    result = BandwidthProbeResult.model_validate_json(
        client.post("/v1/probe/bandwidth", json={"peer_url": gpu_agent.url, "seconds": 0.2}).content
    )
    assert result.gbit_per_s == 0 and "same token" in result.error


def test_bandwidth_peer_down(client: httpx.Client) -> None:
    result = BandwidthProbeResult.model_validate_json(
        client.post("/v1/probe/bandwidth", json={"peer_url": f"http://127.0.0.1:{free_port()}", "seconds": 0.2}).content
    )
    assert result.gbit_per_s == 0 and "Connection refused" in result.error


def test_sink_counts_a_streamed_body(peer: AgentProcess) -> None:
    def chunks():
        for _ in range(5):
            yield b"z" * 100_000

    response = httpx.post(peer.url + "/v1/sink", headers=peer.auth, content=chunks(), trust_env=False, timeout=30)
    assert response.status_code == 200
    assert SinkResult.model_validate_json(response.content).bytes_received == 500_000


def test_sink_refuses_a_declared_huge_body(peer: AgentProcess) -> None:
    with socket.create_connection(("127.0.0.1", peer.port), timeout=10) as sock:
        sock.sendall(
            f"POST /v1/sink HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {peer.token}\r\n"
            f"Content-Length: {1 << 40}\r\n\r\n".encode()
        )
        reply = sock.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413")


def test_probe_allow_limits_targets(agent_dir) -> None:
    limited = AgentProcess(agent_dir, node_name="limited", extra_args=["--probe-allow", "127.0.0.0/8"])
    try:
        with limited.client() as http:
            assert connect(http, limited.port).reachable
            outside = connect(http, 80, host="192.0.2.1")  # TEST-NET-1: refused before any packet
            assert not outside.reachable and "outside --probe-allow" in outside.error
            named = connect(http, limited.port, host="localhost")
            assert not named.reachable and "not an IP address" in named.error
            result = BandwidthProbeResult.model_validate_json(
                http.post("/v1/probe/bandwidth", json={"peer_url": "http://192.0.2.1:8462", "seconds": 1}).content
            )
            assert "outside --probe-allow" in result.error
    finally:
        limited.stop()
