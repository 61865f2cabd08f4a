"""Opt-in TLS on the agent (issue 18): a real certificate over loopback, a real agent, the controller's real client.

``ftwiz-agent --tls-cert/--tls-key`` serves HTTPS only; ``[cluster] agent_tls = true`` with ``agent_ca_file`` makes every
controller call HTTPS, verified against that bundle; a certificate that does not verify fails ``agent.reachable``
naming the certificate; the token never travels in clear to anything the controller believes is a TLS agent.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import httpx
import pytest

from shared.config import ClusterConfig, FtwizConfig, NodeConfig
from tests.agent.conftest import LOOPBACK, AgentProcess
from tests.tlscerts import make_certificate
from tui.checks.agents import agent_reachable
from tui.checks.base import CheckContext
from tui.client import AgentClient, NodeState


def _config(agents: list[AgentProcess], ca_file: Path, *, tls: bool = True) -> FtwizConfig:
    return FtwizConfig(
        cluster=ClusterConfig(agent_token_file=str(agents[0].token_file), agent_tls=tls, agent_ca_file=str(ca_file), agent_timeout_s=10),
        nodes=[NodeConfig(name=a.node_name, host=LOOPBACK, agent_port=a.port) for a in agents],
    )


@pytest.fixture(scope="module")
def tls_agents(tmp_path_factory):
    """Two agents serving HTTPS with their own self-signed certificates, one token; the CA bundle is both certificates."""
    base = tmp_path_factory.mktemp("tls")
    certs = [make_certificate(base / "certs", f"node{i}", [LOOPBACK, "localhost"]) for i in range(2)]
    bundle = base / "agents-ca.pem"
    bundle.write_bytes(b"".join(cert.read_bytes() for cert, _ in certs))
    first = AgentProcess(base, node_name="node0", tls=certs[0], extra_args=["--tls-ca", str(bundle)])
    agents = [first]
    try:
        agents.append(AgentProcess(base, node_name="node1", token_file=first.token_file, tls=certs[1], extra_args=["--tls-ca", str(bundle)]))
        yield agents, bundle, base
    finally:
        for agent in agents:
            agent.stop()


def test_the_agent_serves_https_only(tls_agents):
    agents, _, _ = tls_agents
    with agents[0].client() as client:
        assert client.get("/v1/report").json()["node_name"] == "node0"
        assert client.get("/metrics").status_code == 200  # what Prometheus scrapes, over TLS
    with pytest.raises(httpx.TransportError):  # plain HTTP is not served on that port
        httpx.get(agents[0].url.replace("https://", "http://") + "/healthz", timeout=5, trust_env=False)


def test_controller_reaches_every_tls_agent_and_the_bandwidth_probe_runs_over_tls(tls_agents):
    agents, bundle, _ = tls_agents
    config = _config(agents, bundle)

    async def go():
        async with AgentClient(config) as client:
            statuses = await client.poll()
            probe = await client.probe_bandwidth("node0", client.base_url("node1"), 0.5)
            return statuses, probe

    statuses, probe = asyncio.run(go())
    assert all(s.up and s.url.startswith("https://") for s in statuses.values()), statuses
    assert probe.ok and probe.value is not None and probe.value.error is None and probe.value.bytes_sent > 0, probe


def test_a_certificate_that_does_not_verify_fails_agent_reachable_naming_it(tls_agents):
    agents, _, base = tls_agents
    stranger, _ = make_certificate(base / "other", "someone-else", [LOOPBACK])
    config = _config(agents, stranger)

    async def go():
        async with AgentClient(config) as client:
            statuses = await client.poll()
            return statuses, agent_reachable(CheckContext(config, statuses, client))

    statuses, rows = asyncio.run(go())
    assert statuses["node0"].state is NodeState.DOWN
    row = next(r for r in rows if r.node == "node0")
    assert row.status == "fail"
    assert "did not verify" in row.detail and "'CN=node0'" in row.detail and "SHA-256" in row.detail, row.detail
    assert str(stranger) in row.detail and "agent_ca_file" in row.hint, row.hint


def test_the_token_never_travels_in_clear_to_what_the_controller_takes_for_a_tls_agent(tls_agents):
    """A plain-HTTP listener where a TLS agent should be (a stale config, an impostor) sees a TLS handshake, never the token;
    and a TLS agent refuses to send the token to a peer over plain HTTP."""
    agents, bundle, _ = tls_agents
    impostor = socket.create_server((LOOPBACK, 0))
    heard = bytearray()

    def listen() -> None:
        conn, _ = impostor.accept()
        with conn:
            conn.settimeout(5)
            try:
                while chunk := conn.recv(65536):
                    heard.extend(chunk)
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            except OSError:
                pass

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    config = FtwizConfig(
        cluster=ClusterConfig(agent_token_file=str(agents[0].token_file), agent_tls=True, agent_ca_file=str(bundle), agent_timeout_s=5),
        nodes=[NodeConfig(name="fake", host=LOOPBACK, agent_port=impostor.getsockname()[1])],
    )

    async def go():
        async with AgentClient(config) as client:
            return await client.poll()

    try:
        statuses = asyncio.run(go())
        listener.join(10)
    finally:
        impostor.close()
    assert statuses["fake"].state is NodeState.DOWN
    assert heard[:1] == b"\x16" and agents[0].token.encode() not in heard  # a TLS ClientHello, nothing else
    with agents[0].client() as client:
        answer = client.post("/v1/probe/bandwidth", json={"peer_url": agents[1].url.replace("https://", "http://"), "seconds": 0.5}).json()
    assert "never sent over plain HTTP" in answer["error"] and answer["bytes_sent"] == 0


def test_a_controller_without_agent_tls_never_sends_the_token_to_a_tls_agent(tls_agents):
    """``agent_tls = false`` against an agent serving HTTPS: the controller greets it with a token-less ``/healthz``, gets
    no HTTP answer and stops there. A relay between the two records every byte the controller sent."""
    agents, _, _ = tls_agents
    relay = socket.create_server((LOOPBACK, 0))
    sent = bytearray()

    def pump(src: socket.socket, dst: socket.socket, keep: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if keep:
                    sent.extend(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve() -> None:
        while True:
            try:
                conn, _ = relay.accept()
            except OSError:
                return
            upstream = socket.create_connection((LOOPBACK, agents[0].port))
            threading.Thread(target=pump, args=(conn, upstream, True), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, conn, False), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    config = FtwizConfig(
        cluster=ClusterConfig(agent_token_file=str(agents[0].token_file), agent_tls=False, agent_timeout_s=5),
        nodes=[NodeConfig(name="node0", host=LOOPBACK, agent_port=relay.getsockname()[1])],
    )

    async def go():
        async with AgentClient(config) as client:
            return await client.poll(), await client.refresh("node0")

    try:
        statuses, refreshed = asyncio.run(go())
    finally:
        relay.close()
    status = statuses["node0"]
    assert status.state is NodeState.DOWN and "the token was not sent" in status.message, status
    assert "agent_tls = true" in status.hint, status.hint
    assert not refreshed.ok and "the token was not sent" in (refreshed.error or ""), refreshed
    assert sent.startswith(b"GET /healthz") and agents[0].token.encode() not in sent and b"Authorization" not in sent


def test_tls_options_are_checked_before_serving(tmp_path):
    import subprocess
    import sys

    from tests.agent.conftest import REPO_ROOT, make_token

    token = make_token(tmp_path)
    cert, _ = make_certificate(tmp_path, "n", [LOOPBACK])
    done = subprocess.run([sys.executable, "-m", "agent", "serve", "--token-file", str(token), "--tls-cert", str(cert)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--tls-cert and --tls-key go together" in done.stderr
    done = subprocess.run([sys.executable, "-m", "agent", "serve", "--token-file", str(token), "--tls-cert", str(cert), "--tls-key", str(cert)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "not a certificate and its key" in done.stderr
