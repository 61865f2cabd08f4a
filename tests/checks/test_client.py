"""AgentClient against a real agent on loopback (and a real non-agent HTTP server for the odd cases)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shared.config import ClusterConfig, FtwizConfig, NodeConfig
from tests.cluster.harness import REPO_ROOT
from tests.listening import free_port, wait_serving
from tui.client import AgentClient, NodeState


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """A real agent process on 127.0.0.1 with its own token; yields (port, token_path)."""
    tmp = tmp_path_factory.mktemp("agent")
    token = tmp / "agent.token"
    subprocess.run([sys.executable, "-m", "agent", "token", str(token)], cwd=REPO_ROOT, check=True, capture_output=True)
    for _ in range(3):  # a port another test took between the kernel's choice and the bind: another one
        port = free_port()
        log = open(tmp / "agent.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "agent", "--host", "127.0.0.1", "--port", str(port), "--token-file", str(token),
                                 "--node-name", "solo", "--disk-path", str(tmp)], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            if wait_serving(proc, port, f"http://127.0.0.1:{port}/healthz", deadline=time.monotonic() + 60, log=tmp / "agent.log"):
                break
        except RuntimeError as exc:
            proc.kill()
            proc.wait(timeout=10)
            log.close()
            pytest.fail(f"agent did not start: {exc}")
        log.close()  # another test took the port first: this agent exited, try another
    else:
        pytest.fail(f"agent did not start: three free ports were taken first: {(tmp / 'agent.log').read_text()[-2000:]}")
    yield port, token
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


def config_for(nodes: list[tuple[str, str, int]], token: Path) -> FtwizConfig:
    return FtwizConfig(cluster=ClusterConfig(agent_token_file=str(token), agent_timeout_s=2.0),
                       nodes=[NodeConfig(name=n, host=h, agent_port=p) for n, h, p in nodes])


class _Fake(http.server.BaseHTTPRequestHandler):
    """A real HTTP server that is not an ftwiz agent of this schema."""

    body = b"{}"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def other_server():
    servers = []

    def start(body: bytes) -> int:
        handler = type("Handler", (_Fake,), {"body": body})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


async def test_states_of_every_kind_in_one_concurrent_poll(agent, other_server, tmp_path):
    port, token = agent
    future = json.dumps({"schema_version": "2.0", "agent_version": "9.0.0"}).encode()
    config = config_for([("up", "127.0.0.1", port), ("down", "127.0.0.1", free_port()),
                         ("future", "127.0.0.1", other_server(future)), ("html", "127.0.0.1", other_server(b"<html>"))], token)
    async with AgentClient(config) as client:
        statuses = await client.poll()
    assert list(statuses) == ["up", "down", "future", "html"]
    assert statuses["up"].state is NodeState.UP and statuses["up"].report.node_name == "solo"
    assert abs(statuses["up"].clock_offset_s) < 5
    assert statuses["down"].state is NodeState.DOWN and "refused" in statuses["down"].message
    assert "ftwiz-agent --host 0.0.0.0" in statuses["down"].hint
    assert statuses["future"].state is NodeState.INCOMPATIBLE and "schema 2.0" in statuses["future"].message
    assert "pip install ftwiz==" in statuses["future"].hint
    assert statuses["html"].state is NodeState.INCOMPATIBLE and "not an ftwiz agent" in statuses["html"].message


async def test_wrong_and_missing_token(agent, tmp_path):
    port, _ = agent
    wrong = tmp_path / "wrong"
    wrong.write_text("x" * 40)
    async with AgentClient(config_for([("a", "127.0.0.1", port)], wrong)) as client:
        status = await client.report("a")
    assert status.state is NodeState.UNAUTHORIZED and "HTTP 401" in status.message and "same token everywhere" in status.hint
    async with AgentClient(config_for([("a", "127.0.0.1", port)], tmp_path / "missing")) as client:
        status = await client.report("a")
        health = await client.health("a")  # /healthz needs no token
    assert status.state is NodeState.UNAUTHORIZED and "not found" in status.message
    assert health.ok and health.value.node_name == "solo"


async def test_probes(agent):
    port, token = agent
    async with AgentClient(config_for([("a", "127.0.0.1", port)], token)) as client:
        connect = await client.probe_connect("a", "127.0.0.1", port, 2.0)
        assert connect.ok and connect.value.reachable and connect.value.latency_ms is not None
        with socket.socket() as held:
            held.bind(("0.0.0.0", 0))
            held.listen()
            taken = await client.probe_listen("a", held.getsockname()[1], 2.0)
        assert taken.status_code == 409 and taken.state is NodeState.UP and not taken.ok and "in use" in taken.error
        bandwidth = await client.probe_bandwidth("a", f"http://127.0.0.1:{port}", 0.3)
        assert bandwidth.ok and bandwidth.value.gbit_per_s > 0
        stopped = await client.stop_run("a", "no-such-run")
        assert stopped.ok and stopped.value.killed == []
        down = await client.probe_connect(NodeConfig(name="x", host="127.0.0.1", agent_port=free_port()), "127.0.0.1", 1)
        assert down.state is NodeState.DOWN and not down.ok


async def test_plain_http_loads_no_ca_bundle_and_could_not_reach_a_tls_server(agent):
    """Over plain HTTP the TLS context is never used: it is made without the CA bundle (loading it costs every ftwiz
    start ~20 ms), and it verifies like any other, so it would refuse a server rather than trust one."""
    import ssl

    port, token = agent
    async with AgentClient(config_for([("a", "127.0.0.1", port)], token)) as client:
        assert (await client.report("a")).state is NodeState.UP
        context = client._ssl
        assert context is not None and context.cert_store_stats()["x509_ca"] == 0
        assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
