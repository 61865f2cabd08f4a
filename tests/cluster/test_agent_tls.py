"""The checklist over TLS agents on namespace nodes (issue 18): every node's agent serves HTTPS with its own
self-signed certificate, the controller verifies each against one concatenated bundle, and the agents stream the
bandwidth probe to each other over TLS."""

from __future__ import annotations

import asyncio

import pytest

from tests.cluster.fixtures import require_cluster_support
from tests.tlscerts import make_certificate
from tui.checks import run_checklist_full

pytestmark = pytest.mark.cluster


def test_a_check_run_with_agent_tls_on(make_cluster, tmp_path):
    require_cluster_support(need_sshd=False)
    cluster = make_cluster(2, sshd=False, agent=False)
    certs = {node.name: make_certificate(tmp_path / "certs", node.name, [node.address]) for node in cluster.nodes}
    bundle = tmp_path / "agents-ca.pem"
    bundle.write_bytes(b"".join(cert.read_bytes() for cert, _ in certs.values()))
    for node in cluster.nodes:
        node.start_agent(tls=(*certs[node.name], bundle))
    config = cluster.config(workload="allreduce", cluster={"agent_tls": True, "agent_ca_file": str(bundle)})
    run = asyncio.run(run_checklist_full(config, ssh=False, only=["agent.reachable", "net.bandwidth"],
                                         options={"bandwidth_seconds": 0.5}))
    rows = {(r.id, r.node): r for r in run.results}
    for node in cluster.nodes:
        reachable = rows[("agent.reachable", node.name)]
        assert reachable.status == "pass" and f"https://{node.address}" in reachable.detail, reachable
    bandwidth = [r for r in run.results if r.id == "net.bandwidth"]
    assert bandwidth and all(r.status in ("pass", "warn") for r in bandwidth), bandwidth
