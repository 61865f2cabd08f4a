"""The harness itself: layout, SSH, link and firewall helpers, config, and leak-proof teardown."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import paramiko
import pytest

from shared.config import parse_config
from tests.cluster import reaper
from tests.cluster.fixtures import require_cluster_support
from tests.cluster.harness import Cluster, ClusterError, cluster_support_problem
from tests.cluster.netns import used_networks
from tests.cluster.node import REPO_ROOT

AGENT_HERE = cluster_support_problem(need_agent=True) is None


def wait_until(predicate, timeout: float, step: float = 0.1) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def leftovers(state: reaper.RunState, pids: list[int]) -> list[str]:
    """Everything of a run that still exists: namespaces, links, temp dir, state file, processes."""
    found = [f"netns {ns}" for ns in state.namespaces if Path(f"/run/netns/{ns}").exists()]
    found += [f"link {link}" for link in [state.bridge, *state.host_veths] if Path(f"/sys/class/net/{link}").exists()]
    found += [f"dir {state.tmpdir}"] if Path(state.tmpdir).exists() else []
    found += [f"state {state.path}"] if state.path.exists() else []
    found += [f"pid {pid}" for pid in pids if reaper.process_running(pid)]
    return found


def connect_from(node, address: str, port: int, timeout: float = 2.0) -> bool:
    """A TCP connect made inside ``node``'s namespace."""
    code = f"import socket; socket.create_connection(({address!r}, {port}), timeout={timeout}).close()"
    return node.exec([sys.executable, "-c", code], timeout=timeout + 10).returncode == 0


def test_create_and_destroy_leaves_nothing(make_cluster):
    cluster = make_cluster(2, agent=AGENT_HERE)
    state = reaper.RunState.load(cluster._state.path)
    # Processes a test might leave behind: one started by the harness, one detached over ssh.
    cluster.nodes[0].popen(["sleep", "300"])
    assert cluster.nodes[1].ssh(["sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 &"]).returncode == 0
    pids = [p for ns in state.namespaces for p in reaper.namespace_pids(ns)]
    assert len(pids) >= 4, f"expected sshd, sleeps (and agents) in the namespaces, got {pids}"
    watchdog = cluster._watchdog
    assert cluster.close() == []
    assert leftovers(state, pids) == []
    assert watchdog.wait(timeout=10) == 0
    assert cluster.close() == []  # idempotent


def test_watchdog_tears_down_after_owner_is_killed(cluster_support):
    script = textwrap.dedent("""
        import json, sys, time
        from tests.cluster.harness import Cluster
        c = Cluster.create(2, agent=False)
        print(json.dumps(c._state.path.as_posix()), flush=True)
        time.sleep(300)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        state = reaper.RunState.load(Path(json.loads(owner.stdout.readline())))
        pids = [p for ns in state.namespaces for p in reaper.namespace_pids(ns)]
        assert pids and Path(f"/run/netns/{state.namespaces[0]}").exists()
    finally:
        owner.send_signal(signal.SIGKILL)  # no finalizer, no atexit: only the watchdog can clean up
        owner.wait(timeout=10)
    assert wait_until(lambda: not leftovers(state, pids), timeout=30), leftovers(state, pids)


def test_reaper_removes_runs_whose_owner_and_watchdog_are_gone(cluster_support):
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = reaper.RunState(run_id="dead01", owner_pid=dead.pid, owner_start="0", tmpdir=str(Path("/tmp/ftwiz-cluster-dead01")),
                            bridge="ftwzdead01br", namespaces=["ftwz-dead01-node0"], host_veths=["ftwzdead01v0"])
    state.save()
    Path(state.tmpdir).mkdir(exist_ok=True)
    subprocess.run(["ip", "netns", "add", state.namespaces[0]], check=True)
    subprocess.run(["ip", "link", "add", state.bridge, "type", "bridge"], check=True)
    try:
        assert "dead01" in reaper.reap_stale()
        assert leftovers(state, []) == []
    finally:
        reaper.teardown(state)


def test_names_and_subnets_are_unique_and_free(make_cluster):
    before = [n for n in used_networks()]
    a = make_cluster(1, agent=False, sshd=False)
    b = make_cluster(1, agent=False, sshd=False)
    assert a.run_id != b.run_id and a.bridge != b.bridge
    assert not a.subnet.overlaps(b.subnet)
    for cluster in (a, b):
        assert not any(cluster.subnet.overlaps(n) for n in before if n not in (a.subnet, b.subnet)), cluster.subnet
        assert cluster.nodes[0].netns.startswith(f"ftwz-{cluster.run_id}-")


def test_node_layout(make_cluster):
    cluster = make_cluster(3, agent=False, sshd=True)
    assert [n.name for n in cluster.nodes] == ["node0", "node1", "node2"]
    assert len({n.workdir for n in cluster.nodes}) == 3 and all(n.workdir.is_dir() for n in cluster.nodes)
    for node in cluster.nodes:
        assert ipaddress.ip_address(node.address) in cluster.subnet
        links = json.loads(node.exec(["ip", "-j", "addr"], check=True).stdout)
        by_name = {link["ifname"]: link for link in links}
        assert set(by_name) == {"lo", "eth0"}, "a node sees only its loopback and its eth0"
        assert "UP" in by_name["lo"]["flags"] and "UP" in by_name["eth0"]["flags"]
        assert node.address in [a["local"] for a in by_name["eth0"]["addr_info"]]
    n0, n1, n2 = cluster.nodes
    assert connect_from(n1, n0.address, 22) and connect_from(n2, n1.address, 22)
    assert connect_from(n0, cluster.bridge_address, 1) is False  # nothing listens there: refused, not hung
    assert (cluster.token_path.stat().st_mode & 0o777) == 0o600


def test_shared_workdir(make_cluster):
    cluster = make_cluster(2, agent=False, sshd=False, per_node_workdir=False)
    assert cluster.nodes[0].workdir == cluster.nodes[1].workdir


def test_ssh_with_openssh_and_paramiko(make_cluster):
    cluster = make_cluster(2, agent=False)
    for line in cluster.known_hosts_path.read_text().splitlines():
        host, keytype, blob = line.split()
        assert host in [n.address for n in cluster.nodes] and keytype == "ssh-ed25519" and blob.startswith("AAAA")
    key = stat.S_IMODE(cluster.ssh_key_path.stat().st_mode)
    assert key == 0o600
    for node in cluster.nodes:
        res = node.ssh(["ip", "-4", "-o", "addr", "show", "eth0"])
        assert res.returncode == 0, res.stderr
        assert node.address in res.stdout, "ssh must land in the node's own namespace"
        client = node.paramiko_client()
        try:
            _, out, _ = client.exec_command("whoami")
            assert out.read().decode().strip() == "root"
        finally:
            client.close()
    # Unknown host key: refused, never added.
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException):
        client.connect(cluster.nodes[0].address, username="root", key_filename=str(cluster.ssh_key_path),
                       allow_agent=False, look_for_keys=False, timeout=10)
    client.close()


def test_link_down_and_up(make_cluster):
    cluster = make_cluster(2, agent=False)
    node0, node1 = cluster.nodes
    node0.link_down()
    assert node0.link_state()["up"] is False
    assert not node0.tcp_open(22, timeout=1.0)
    assert not connect_from(node1, node0.address, 22, timeout=1.0)
    node0.link_up()
    assert wait_until(lambda: node0.tcp_open(22), timeout=15)
    assert node0.ssh(["true"]).returncode == 0


def test_firewall_mtu_sshd_and_heal(make_cluster):
    cluster = make_cluster(2, agent=False)
    node0, node1 = cluster.nodes
    node0.nft_block_port(22)
    assert not connect_from(node1, node0.address, 22, timeout=1.0)
    node1.set_mtu(1400)
    assert node1.link_state()["mtu"] == 1400
    node1.stop_sshd()
    assert not node1.tcp_open(22)
    fixed = cluster.heal()
    assert any("nft" in f for f in fixed) and any("mtu" in f for f in fixed) and any("sshd" in f for f in fixed)
    assert connect_from(node1, node0.address, 22) and node1.tcp_open(22)
    assert node1.link_state()["mtu"] == 1500
    assert cluster.heal() == []
    # A client still connected to node0's sshd: the listener's per-connection process (its own session) is
    # sshd's, not a stray (CI: a port probe's lingering "sshd: [net]" made heal() report node0; node0 is healed
    # first, while the connection is open). The client itself, started on node1 by the test, is a stray.
    code = f"import socket, time; s = socket.create_connection(({node0.address!r}, 22)); s.recv(64); print('up', flush=True); time.sleep(120)"
    holder = node1.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "up"  # sshd's banner came: its child exists
    assert cluster.heal() == ["node1: stray processes killed"]


def test_heal_kills_strays_but_keeps_daemons(make_cluster):
    cluster = make_cluster(1, agent=AGENT_HERE)
    node = cluster.nodes[0]
    daemons = [p.pid for p in (node._sshd, node._agent) if p is not None]
    stray = node.popen(["sleep", "300"])
    assert node.ssh(["sh", "-c", "setsid sleep 301 </dev/null >/dev/null 2>&1 &"]).returncode == 0
    assert any("stray" in f for f in cluster.heal())
    assert stray.wait(timeout=10) is not None

    def sleepers() -> list[int]:
        found = []
        for pid in reaper.namespace_pids(node.netns):
            try:
                if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue  # exited meanwhile
        return found

    assert wait_until(lambda: not sleepers(), timeout=10), sleepers()
    assert all(pid in reaper.namespace_pids(node.netns) for pid in daemons)
    assert cluster.heal() == []


def test_write_config_is_valid(make_cluster, tmp_path):
    cluster = make_cluster(2, agent=False, sshd=False)
    path = cluster.write_config(tmp_path / "ftwiz.toml", workload="allreduce", iterations=3,
                                node_overrides={"node1": {"gpus": 0}}, nccl={"socket_ifname": "=eth0"})
    config = parse_config(path.read_text(), str(path))
    assert config.cluster.agent_token_file == str(cluster.token_path)
    assert config.cluster.known_hosts == str(cluster.known_hosts_path)
    assert config.job.workload == "allreduce" and config.job.iterations == 3
    assert config.nodes[1].gpus == 0 and config.nccl.socket_ifname == "=eth0"
    for node, entry in zip(cluster.nodes, config.nodes):
        assert (entry.name, entry.host, entry.ssh_user, entry.ssh_port) == (node.name, node.address, "root", 22)
        assert entry.ssh_key == str(cluster.ssh_key_path) and entry.workdir == str(node.workdir)
        assert entry.python == cluster.training_python


def test_failed_start_names_the_node_and_leaves_nothing(cluster_support, monkeypatch):
    require_cluster_support(need_agent=True)  # the failure is provoked through the agent's CLI
    # What this cluster reserved, and only that: other xdist workers create and remove clusters meanwhile, so a
    # before/after listing of every state file and namespace would count theirs too.
    reserved: list[Cluster] = []
    real_reserve = Cluster._reserve.__func__

    def reserve(cls, n):
        cluster = real_reserve(cls, n)
        reserved.append(cluster)
        return cluster

    monkeypatch.setattr(Cluster, "_reserve", classmethod(reserve))
    with pytest.raises(ClusterError) as info:
        Cluster.create(2, agent_args=["--no-such-option"], timeout=60)
    message = str(info.value)
    assert "node0: agent exited" in message or "node1: agent exited" in message, message
    assert "--no-such-option" in message, "the log tail shows why the agent refused to start"
    (cluster,) = reserved
    state = cluster._state
    assert state.namespaces and state.bridge, state
    assert not state.path.exists(), f"{state.path} was left behind"
    namespaces = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert not set(state.namespaces) & namespaces, namespaces
    assert not Path(f"/sys/class/net/{state.bridge}").exists(), state.bridge
    assert not any(Path(f"/sys/class/net/{veth}").exists() for veth in state.host_veths), state.host_veths


POLICY_TEST = """
def test_needs_a_cluster(cluster_support):
    pass
"""

# Runs the policy test as uid 65534 without that user reading the checkout: everything that lives in the
# checkout or its venv (pytest, its built-in plugins, tests.cluster.fixtures) is imported while still root, then
# the process drops to nobody and runs pytest on a test file in a world-readable temp dir. So a checkout inside a
# directory other users cannot enter (/root, a `mktemp -d`) works, and the policy still sees a real non-root euid.
DROP_AND_RUN = """
import importlib, os, pkgutil, sys
import _pytest, pytest
import pdb  # _pytest.debugging imports it in pytest_configure
for module in pkgutil.walk_packages(_pytest.__path__, "_pytest."):
    try:
        importlib.import_module(module.name)
    except ImportError:
        pass  # an optional part (a debugger backend, ...) this run does not use
import tests.cluster.fixtures
folder = sys.argv[1]
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
assert os.geteuid() == 65534
os.chdir(folder)
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "-p", "tests.cluster.fixtures", "-c", "/dev/null",
                      "--rootdir", folder, os.path.join(folder, "test_policy.py")]))
"""


@pytest.mark.parametrize("ci, outcome", [("", "1 skipped"), ("true", "1 error")])
def test_not_root_skips_but_fails_in_ci(ci, outcome):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user")
    folder = Path(tempfile.mkdtemp(prefix="ftwiz-policy-"))
    try:
        folder.chmod(0o755)
        (folder / "test_policy.py").write_text(POLICY_TEST)
        (folder / "test_policy.py").chmod(0o644)
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env.update({"PYTHONPATH": str(REPO_ROOT), "HOME": str(folder), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                    "PYTHONDONTWRITEBYTECODE": "1", **({"CI": ci} if ci else {})})
        res = subprocess.run([sys.executable, "-c", DROP_AND_RUN, str(folder)],
                             cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert outcome in res.stdout, res.stdout + res.stderr
    assert "namespace clusters need root" in res.stdout
    assert res.returncode == (1 if ci else 0)
    if ci:
        assert "CI=true but the namespace-cluster tests cannot run" in res.stdout
