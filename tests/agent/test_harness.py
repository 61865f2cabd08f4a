"""The agent harness proves which process it started: an answer on the port is not enough."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import httpx
import pytest

from tests import listening
from tests.agent import conftest
from tests.agent.conftest import AgentProcess


class _Healthy(http.server.BaseHTTPRequestHandler):
    """Another test's server: 200 to anything (as another agent's /healthz would be)."""

    def do_GET(self) -> None:
        body = b'{"status": "ok", "node_name": "stranger"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_port_taken_before_the_agent_bound_it_gives_it_another(agent_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stranger = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    taken = stranger.server_address[1]
    offered = iter([taken])  # the kernel's first offer is the port the stranger took meanwhile
    monkeypatch.setattr(conftest, "free_port", lambda: next(offered, None) or listening.free_port())
    agent = AgentProcess(agent_dir, node_name="late")
    try:
        assert agent.port != taken
        assert listening.listens(agent.process, agent.port)
        assert httpx.get(f"{agent.url}/healthz", trust_env=False).json()["node_name"] == "late"
        assert "address already in use" not in agent.log_tail()  # the log of the attempt that lost is not kept
    finally:
        agent.stop()
        stranger.shutdown()
        stranger.server_close()
