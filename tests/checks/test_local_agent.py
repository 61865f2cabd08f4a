"""LocalAgent: starts an agent only when none answers, and stops only the one it started."""

from __future__ import annotations

import socket
import stat
import sys

import httpx

from shared.config import ClusterConfig, FtwizConfig, JobConfig, NodeConfig
from tests.listening import free_port
from tui.local_agent import LocalAgent


def _config(tmp_path, port: int) -> FtwizConfig:
    token = tmp_path / "cfg" / "agent.token"
    node = NodeConfig(name="here", host="127.0.0.1", local=True, python=sys.executable, workdir=str(tmp_path / "work"), agent_port=port)
    return FtwizConfig(cluster=ClusterConfig(agent_token_file=str(token)), nodes=[node], job=JobConfig(workload="allreduce"))


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def test_starts_with_a_fresh_token_and_stops_what_it_started(tmp_path):
    port = free_port()
    config = _config(tmp_path, port)
    with LocalAgent(config, log_path=tmp_path / "agent.log") as local:
        assert local.started and _answers(port)
        token = tmp_path / "cfg" / "agent.token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) >= 32
        # a second LocalAgent finds the first one answering and leaves it alone
        with LocalAgent(config, log_path=tmp_path / "agent2.log") as other:
            assert not other.started
        assert _answers(port)
    assert not _answers(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # the port is free again


def test_no_local_node_is_a_no_op(tmp_path):
    config = FtwizConfig(nodes=[NodeConfig(name="remote", host="10.0.0.1")])
    with LocalAgent(config) as local:
        assert local.node is None and not local.started
