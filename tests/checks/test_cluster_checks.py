"""The checklist against three namespace nodes with real agents and real sshd: all passing, then each
fault caught by the right check naming the right node."""

from __future__ import annotations

import subprocess
import time

from tests.checks.conftest import (
    agent_with_args,
    describe,
    failures,
    place_job_files,
    rows,
    run,
    wait_fresh,
)

EVERY_CHECK = {
    "agent.reachable", "agent.version", "ssh.auth", "gpu.present", "gpu.processes", "gpu.ecc", "gpu.throttle",
    "env.packages", "env.parity", "mem.fit", "disk.free", "clock.skew", "net.subnet", "net.ifname", "net.mtu",
    "net.ib", "net.latency", "net.bandwidth", "net.mesh", "net.sync", "net.master_address", "rendezvous.port_free",
    "rendezvous.reachable",
    "data.reachable", "plan.batch", "plan.hetero", "plan.balance", "plan.advice",
}


def test_three_nodes_all_pass(fresh3):
    results = run(fresh3.config(workload="allreduce"))
    assert not failures(results), describe(results)
    assert {r.id for r in results} == EVERY_CHECK
    for node in ("node0", "node1", "node2"):
        assert [r.status for r in rows(results, "agent.reachable", node)] == ["pass"]
        assert [r.status for r in rows(results, "ssh.auth", node)] == ["pass"]
        # CPU nodes: gpus = "all" with none present is a warning, never a failure
        (gpu,) = rows(results, "gpu.present", node)
        assert gpu.status == "warn" and "CPU with gloo" in gpu.detail
        assert rows(results, "net.subnet", node)[0].status == "pass"
        assert "eth0" in rows(results, "net.ifname", node)[0].detail
    for node in ("node1", "node2"):
        assert rows(results, "rendezvous.reachable", node)[0].status == "pass"
        assert rows(results, "net.latency", node)[0].status == "pass"
    (port_free,) = rows(results, "rendezvous.port_free", "node0")
    assert port_free.status == "pass" and "closed after the test" in port_free.detail
    # The test listener is gone when the checklist returns: torchrun's store can bind the port at once.
    bind = ("import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('0.0.0.0', 29500))\n")
    assert fresh3.node("node0").popen(["python3", "-c", bind]).wait(timeout=30) == 0
    assert rows(results, "env.parity")[0].status == "pass"
    assert rows(results, "net.mtu")[0].status == "pass" and "1500" in rows(results, "net.mtu")[0].detail
    for r in results:
        assert r.status in ("pass", "warn", "skip")
        if r.status == "warn":
            assert r.hint, f"warning without a fix: {r}"


def test_sft_job_files_reachable_then_missing_on_one_node(fresh3):
    for node in fresh3.nodes:
        place_job_files(node.workdir)
    config = fresh3.config(workload="sft", model="models/tiny", dataset="data/train.jsonl", method="lora", optimizer="adamw")
    results = run(config)
    assert not failures(results), describe(results)
    assert [r.status for r in rows(results, "data.reachable")] == ["pass"] * 3, describe(results)
    (fresh3.node("node2").workdir / "data" / "train.jsonl").unlink()
    results = run(config, only=["data", "ssh"])
    assert failures(results) == {("data.reachable", "node2")}, describe(results)
    (row,) = [r for r in rows(results, "data.reachable", "node2") if r.status == "fail"]
    assert "data/train.jsonl" in row.detail and row.hint.startswith("copy it there: rsync -a data/train.jsonl")


def test_other_torch_version_on_one_node(fresh3, fake_torch_python):
    node2 = fresh3.node("node2")
    with agent_with_args(node2, ["--python", str(fake_torch_python)]):
        config = fresh3.config(workload="allreduce")
        config.node("node2").python = str(fake_torch_python)
        results = run(config)
    assert failures(results) == {("env.parity", "node2")}, describe(results)
    (row,) = rows(results, "env.parity", "node2")
    assert "torch 2.0.0 on node2 vs 2.13.0" in row.detail and "node0, node1" in row.detail
    assert "pip install torch==2.13.0" in row.hint and str(fake_torch_python) in row.hint


def test_rendezvous_port_blocked_on_the_master(fresh3):
    config = fresh3.config(workload="allreduce")
    fresh3.node("node0").nft_block_port(config.cluster.rendezvous_port)
    results = run(config)
    assert failures(results) == {("rendezvous.reachable", "node1"), ("rendezvous.reachable", "node2")}, describe(results)
    assert rows(results, "rendezvous.port_free", "node0")[0].status == "pass"
    for node in ("node1", "node2"):
        (row,) = rows(results, "rendezvous.reachable", node)
        assert f"{node} cannot connect to {fresh3.node('node0').address}:29500" in row.detail
        assert "on node0" in row.hint and "ufw allow 29500/tcp" in row.hint


def test_rendezvous_port_in_use_on_the_master(fresh3):
    config = fresh3.config(workload="allreduce")
    node0 = fresh3.node("node0")
    # SO_REUSEADDR like torchrun's store (earlier checks leave TIME_WAIT sockets on the port); bind retries
    # until an earlier check's test listener (a few seconds' TTL) has expired.
    script = ("import socket,sys,time\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "for _ in range(150):\n    try:\n        s.bind(('0.0.0.0', 29500)); break\n    except OSError:\n        time.sleep(0.1)\n"
              "else:\n    sys.exit('could not bind 29500')\n"
              "s.listen(); print('bound', flush=True); time.sleep(60)\n")
    holder = node0.popen(["python3", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "bound"
        results = run(config, only=["rendezvous"])
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert failures(results) == {("rendezvous.port_free", "node0")}, describe(results)
    (row,) = rows(results, "rendezvous.port_free")
    assert "in use" in row.detail and "ss -ltnp" in row.hint and "rendezvous_port" in row.hint


def test_agent_stopped(fresh3):
    fresh3.node("node1").stop_agent()
    results = run(fresh3.config(workload="allreduce"))
    assert failures(results) == {("agent.reachable", "node1")}, describe(results)
    (row,) = rows(results, "agent.reachable", "node1")
    assert row.detail.startswith("down:") and "refused" in row.detail
    assert "ftwiz-agent" in row.hint and "--node-name node1" in row.hint
    # the node's other rows say why they could not check; the SSH login still works
    assert rows(results, "env.packages", "node1")[0].status == "skip"
    assert rows(results, "ssh.auth", "node1")[0].status == "pass"


def test_mtu_differs_on_one_node(fresh3):
    node2 = fresh3.node("node2")
    since = time.time()
    node2.set_mtu(1400)
    wait_fresh(fresh3, since)
    results = run(fresh3.config(workload="allreduce"))
    assert failures(results) == {("net.mtu", "node2")}, describe(results)
    (row,) = rows(results, "net.mtu", "node2")
    assert "MTU 1400 on node2 (eth0) vs 1500 on node0, node1" in row.detail
    assert "ip link set dev eth0 mtu 1500" in row.hint


def test_unknown_host_key_is_refused_with_the_keyscan_hint(fresh3, tmp_path):
    node1 = fresh3.node("node1")
    original = fresh3.known_hosts_path.read_text()
    partial = tmp_path / "known_hosts"
    partial.write_text("".join(line + "\n" for line in original.splitlines() if not line.startswith(node1.address + " ")))
    config = fresh3.config(workload="allreduce", cluster={"known_hosts": str(partial)})
    results = run(config)
    assert failures(results) == {("ssh.auth", "node1")}, describe(results)
    (row,) = rows(results, "ssh.auth", "node1")
    assert "unknown SSH host key" in row.detail and "refusing" in row.detail and "SHA256:" in row.detail
    assert row.hint.startswith(f"ssh-keyscan -p 22 -t ed25519 {node1.address} >> {partial}")
    assert "verify the fingerprint" in row.hint
    assert node1.address not in partial.read_text()  # never auto-added


def test_wrong_token_on_the_controller(fresh3, tmp_path):
    wrong = tmp_path / "wrong.token"
    wrong.write_text("this-is-not-the-cluster-token-0123456789\n")
    wrong.chmod(0o600)
    results = run(fresh3.config(workload="allreduce", cluster={"agent_token_file": str(wrong)}))
    assert failures(results) == {("agent.reachable", n) for n in ("node0", "node1", "node2")}, describe(results)
    for row in rows(results, "agent.reachable"):
        assert row.detail.startswith("unauthorized:") and str(wrong) in row.detail
        assert "same token everywhere" in row.hint


def test_one_agent_with_another_token(fresh3, tmp_path):
    other = tmp_path / "other.token"
    other.write_text("another-token-for-node2-only-0123456789\n")
    other.chmod(0o600)
    with agent_with_args(fresh3.node("node2"), ["--token-file", str(other)]):
        results = run(fresh3.config(workload="allreduce"))
    assert failures(results) == {("agent.reachable", "node2")}, describe(results)
    assert "HTTP 401" in rows(results, "agent.reachable", "node2")[0].detail
