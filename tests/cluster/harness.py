"""Multi-host test harness: N nodes on this machine as network namespaces, each with sshd and ftwiz-agent.

Usable from pytest fixtures (``tests/cluster/fixtures.py``), benchmarks and demos alike::

    with Cluster.create(3) as cluster:
        node0, node1 = cluster.nodes[:2]
        node1.agent_post("/v1/probe/connect", {"host": node0.address, "port": 22})
        cluster.write_config("ftwiz.toml", workload="allreduce")

Each node: its own namespace ``ftwz-<run>-nodeI``, a veth called ``eth0`` inside it with address
``10.X.Y.(11+I)/24``, the other end on a private bridge in the root namespace (``10.X.Y.1``, so the
controller reaches every node), its own sshd on port 22 and its own agent on port 8462, and its own
workdir under a per-run temp dir. Cleanup is leak-proof: see ``tests/cluster/reaper.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from tests.cluster import netns as net
from tests.cluster import reaper, sshd
from tests.cluster.netns import ClusterError
from tests.cluster.node import AGENT_PORT, NFT_TABLE, REPO_ROOT, SSH_PORT, Node, log_tail, signal_group

__all__ = ["Cluster", "Node", "ClusterError", "cluster_support_problem", "REPO_ROOT", "AGENT_PORT", "SSH_PORT"]

_MAX_NODES = 64


def cluster_support_problem(*, need_sshd: bool = True, need_agent: bool = False) -> Optional[str]:
    """Why namespace clusters cannot be built here (None when they can): not root, a tool or the agent missing."""
    if os.geteuid() != 0:
        return "namespace clusters need root (ip netns, veth, bridge); run the tests as root (CI does)"
    for tool in ("ip", "nft", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} not found: apt-get install iproute2 nftables openssh-client"
    if need_sshd and not os.access(sshd.SSHD, os.X_OK):
        return f"{sshd.SSHD} not found: apt-get install openssh-server (or `make sysdeps`)"
    if need_agent and not (REPO_ROOT / "agent" / "__main__.py").exists():
        return f"the agent is not there yet ({REPO_ROOT / 'agent' / '__main__.py'} missing): build agent/ first"
    return None

class Cluster:
    """N namespace nodes with sshd and agents; a context manager that always tears everything down."""

    def __init__(self, run_id: str, state: reaper.RunState, subnet: ipaddress.IPv4Network, tmpdir: Path):
        #: Random per-run id; part of every name this run creates.
        self.run_id = run_id
        #: The /24 the nodes live in.
        self.subnet = subnet
        #: The per-run temp dir (removed at teardown).
        self.tmpdir = tmpdir
        #: Bridge name in the root namespace, and its address (the controller's side).
        self.bridge = state.bridge
        self.bridge_address = str(subnet.network_address + 1)
        self.nodes: list[Node] = []
        #: Test user key (private; ``.pub`` beside it) that root on every node accepts.
        self.ssh_key_path = tmpdir / "id_ed25519"
        #: known_hosts with every node's host key, for the controller (ssh and paramiko).
        self.known_hosts_path = tmpdir / "known_hosts"
        #: Agent bearer token file (mode 0600) and its contents.
        self.token_path = tmpdir / "agent.token"
        self.token = ""
        self.agent_python = sys.executable
        self.training_python = sys.executable
        self.agent_interval: Optional[float] = None
        self.agent_args: tuple[str, ...] = ()
        #: Whether agents get ``--probe-allow SUBNET --probe-allow 127.0.0.0/8``.
        self.confine_probes = True
        self.gpu_fixtures: Optional[list[Optional[str]]] = None
        #: Whether this cluster runs sshd / agents on its nodes (what :meth:`heal` restores).
        self.with_sshd = False
        self.with_agent = False
        #: Seconds each set-up phase took (network, keys, start, wait, total).
        self.setup_seconds: dict[str, float] = {}
        self._state = state
        self._watchdog: Optional[subprocess.Popen] = None
        self._closed = False
        self._lock = threading.Lock()

    # -- construction ---------------------------------------------------------------------------------------
    @classmethod
    def create(cls, n: int = 3, *, agent: bool = True, sshd: bool = True, agent_python: Optional[str] = None,
               training_python: Optional[str] = None, per_node_workdir: bool = True,
               agent_interval: Optional[float] = None, gpu_fixture: Union[str, Sequence[Optional[str]], None] = None,
               agent_args: Sequence[str] = (), confine_probes: bool = True, timeout: float = 90.0) -> "Cluster":
        """Build ``n`` nodes and start their sshd and agents concurrently; wait until all answer.

        ``agent_python`` runs the agents (default: this interpreter); ``training_python`` is the
        training interpreter given to the agents as ``--python`` and written to the config (default:
        ``agent_python``). ``gpu_fixture`` is one path for every node or one per node (None = no GPU).
        ``confine_probes`` limits the agents' connect/bandwidth probes to the cluster subnet and loopback;
        ``agent_args`` are appended to every agent's command line.
        Raises :class:`ClusterError` (with the failing node and log tail) after tearing down what was built.
        """
        if not 1 <= n <= _MAX_NODES:
            raise ClusterError(f"a cluster has 1..{_MAX_NODES} nodes, not {n}")
        problem = cluster_support_problem(need_sshd=sshd, need_agent=agent)
        if problem:
            raise ClusterError(problem)
        t0 = time.monotonic()
        cluster = cls._reserve(n)
        try:
            cluster.agent_python = agent_python or sys.executable
            cluster.training_python = training_python or cluster.agent_python
            cluster.agent_interval = agent_interval
            cluster.agent_args = tuple(agent_args)
            cluster.confine_probes = confine_probes
            cluster.with_sshd, cluster.with_agent = sshd, agent
            if gpu_fixture is not None:
                fixtures = [gpu_fixture] * n if isinstance(gpu_fixture, (str, os.PathLike)) else list(gpu_fixture)
                if len(fixtures) != n:
                    raise ClusterError(f"gpu_fixture lists {len(fixtures)} paths for {n} nodes")
                cluster.gpu_fixtures = [str(f) if f else None for f in fixtures]
            cluster._build(n, agent=agent, sshd=sshd, per_node_workdir=per_node_workdir, timeout=timeout, t0=t0)
        except BaseException:
            cluster.close()
            raise
        return cluster

    @classmethod
    def _reserve(cls, n: int) -> "Cluster":
        """Pick names and a subnet, record them in a state file, start the watchdog: nothing exists yet."""
        with reaper.global_lock():
            reaper.reap_stale()
            others = []
            for path in reaper.STATE_DIR.glob("*.json"):
                with contextlib.suppress(OSError, ValueError, TypeError):
                    others.append(reaper.RunState.load(path).subnet)
            while True:
                run_id = secrets.token_hex(3)
                if not (reaper.STATE_DIR / f"{run_id}.json").exists() and not Path(f"/sys/class/net/ftwz{run_id}br").exists():
                    break
            subnet = net.choose_subnet(others)
            tmpdir = Path(tempfile.mkdtemp(prefix=f"ftwiz-cluster-{run_id}-"))
            tmpdir.chmod(0o755)  # sshd (privilege-separated) and agents read files below it
            state = reaper.RunState(
                run_id=run_id, owner_pid=os.getpid(), owner_start=reaper.process_start_time(os.getpid()),
                tmpdir=str(tmpdir), bridge=f"ftwz{run_id}br", subnet=str(subnet),
                namespaces=[f"ftwz-{run_id}-node{i}" for i in range(n)],
                host_veths=[f"ftwz{run_id}v{i}" for i in range(n)],
            )
            state.save()
        cluster = cls(run_id, state, subnet, tmpdir)
        _LIVE.add(cluster)
        try:
            cluster._start_watchdog()
        except BaseException:
            cluster.close()
            raise
        return cluster

    def _start_watchdog(self) -> None:
        state = self._state
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", str(Path(reaper.__file__)), "watch", str(state.path), str(state.owner_pid),
             state.owner_start or "-"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        state.watchdog_pid = self._watchdog.pid
        state.save()

    def _build(self, n: int, *, agent: bool, sshd: bool, per_node_workdir: bool, timeout: float, t0: float) -> None:
        prefix = self.subnet.prefixlen
        net.ensure_neighbour_room(n * n)  # every node resolves every peer, the controller every node
        net.create_bridge(self.bridge, self.bridge_address, prefix)
        for i in range(n):
            sysdir = self.tmpdir / f"node{i}"
            workdir = sysdir / "work" if per_node_workdir else self.tmpdir / "work"
            workdir.mkdir(parents=True, exist_ok=True)
            node = Node(self, i, netns=self._state.namespaces[i], host_veth=self._state.host_veths[i],
                        address=str(self.subnet.network_address + 11 + i), workdir=workdir, sysdir=sysdir)
            net.create_node_link(node.netns, node.host_veth, self.bridge, node.address, prefix, node.iface)
            self.nodes.append(node)
        t_net = time.monotonic()
        self._write_token()
        if sshd:
            self._prepare_ssh()
        t_keys = time.monotonic()
        for node in self.nodes:  # spawn everything first; the slow part (imports, key loading) overlaps
            if sshd:
                node.start_sshd(wait=False)
            if agent:
                node.start_agent(wait=False)
        t_start = time.monotonic()
        if sshd:
            self._wait(self.nodes, what="sshd", timeout=timeout)
        if agent:
            self._wait(self.nodes, what="agent", timeout=timeout)
        t_end = time.monotonic()
        self.setup_seconds = {"network": t_net - t0, "keys": t_keys - t_net, "spawn": t_start - t_keys,
                              "wait": t_end - t_start, "total": t_end - t0}

    def _write_token(self) -> None:
        self.token = secrets.token_urlsafe(32)
        fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.token + "\n")

    def _prepare_ssh(self) -> None:
        sshd.generate_keys([self.ssh_key_path] + [node.host_key_path for node in self.nodes])
        authorized = self.tmpdir / "authorized_keys"
        authorized.write_text(self.ssh_key_path.with_suffix(".pub").read_text())
        lines = []
        for node in self.nodes:
            (node.sysdir / "sshd_config").write_text(sshd.sshd_config_text(
                port=node.ssh_port, host_key=node.host_key_path,
                pid_file=node.sysdir / "sshd.pid", authorized_keys=authorized))
            lines.append(sshd.known_hosts_line(node.address, node.ssh_port, node.host_key_path.with_suffix(".pub")))
        self.known_hosts_path.write_text("\n".join(lines) + "\n")

    def _wait(self, nodes: Sequence[Node], *, what: str, timeout: float) -> None:
        """Poll every node's ``what`` until all are ready; a dead process or the deadline raises."""
        pending = list(nodes)
        deadline = time.monotonic() + timeout
        while pending:
            pending = [node for node in pending if not node._ready(what)]
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(n.name for n in pending)
                logs = "\n".join(f"--- {n.name}: {getattr(n, what + '_log_path')}\n{log_tail(getattr(n, what + '_log_path'))}" for n in pending)
                raise ClusterError(f"{what} not ready on {names} after {timeout:.0f} s\n{logs}")
            time.sleep(0.05)

    # -- use ------------------------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        """The node called ``name`` (``node0``...)."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r}; nodes are {', '.join(n.name for n in self.nodes)}")

    def config(self, *, cluster: Optional[dict] = None, nccl: Optional[dict] = None,
               node_overrides: Optional[dict[str, dict]] = None, **job: Any):
        """An ``FtwizConfig`` for this cluster: every node (root over ssh with the cluster key, the training
        interpreter, its workdir), with ``[cluster]``/``[nccl]`` fields from ``cluster``/``nccl``, per-node
        fields from ``node_overrides`` (``{"node1": {"gpus": 2}}``) and ``[job]`` fields from ``job``."""
        from shared.config import ClusterConfig, FtwizConfig, JobConfig, NcclConfig, NodeConfig

        cluster_fields = {"name": f"ns-{self.run_id}", "agent_token_file": str(self.token_path),
                          "known_hosts": str(self.known_hosts_path), "agent_port": AGENT_PORT, **(cluster or {})}
        unknown = set(node_overrides or {}) - {n.name for n in self.nodes}
        if unknown:
            raise KeyError(f"node_overrides names {sorted(unknown)}; nodes are {[n.name for n in self.nodes]}")
        nodes = [NodeConfig(**{"name": n.name, "host": n.address, "ssh_user": "root", "ssh_port": n.ssh_port,
                               "ssh_key": str(self.ssh_key_path), "python": self.training_python, "workdir": str(n.workdir),
                               **(node_overrides or {}).get(n.name, {})}) for n in self.nodes]
        return FtwizConfig(cluster=ClusterConfig(**cluster_fields), nodes=nodes, job=JobConfig(**job),
                           nccl=NcclConfig(**(nccl or {})))

    def write_config(self, path: Union[str, Path], **overrides: Any) -> Path:
        """Write ``ftwiz.toml`` for this cluster at ``path`` (atomically); see :meth:`config` for ``overrides``."""
        from shared.config import to_toml

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(to_toml(self.config(**overrides)))
        os.replace(tmp, path)
        return path

    def heal(self, *, timeout: float = 60) -> list[str]:
        """Put every node back to its start state (link up, MTU 1500, no nft rules, no stray processes,
        sshd and agent healthy); return what had to be fixed. Fixtures call this before each test."""
        fixed: list[str] = []
        for node in self.nodes:
            state = node.link_state()
            if not state["up"]:
                node.link_up()
                fixed.append(f"{node.name}: link up")
            if state["mtu"] != 1500:
                node.set_mtu(1500)
                fixed.append(f"{node.name}: mtu 1500")
            if net.run(node.netns_argv(["nft", "list", "table", "inet", NFT_TABLE]), check=False).returncode == 0:
                node.nft_flush()
                fixed.append(f"{node.name}: nft rules removed")
            if node.kill_strays():
                fixed.append(f"{node.name}: stray processes killed")
        restarted_sshd = [n for n in self.nodes if self.with_sshd and not (n.sshd_running and n.tcp_open(n.ssh_port))]
        restarted_agent = [n for n in self.nodes if self.with_agent and not (n.agent_running and n.agent_healthy())]
        for node in restarted_sshd:
            node.stop_sshd()
            node.start_sshd(wait=False)
            fixed.append(f"{node.name}: sshd restarted")
        for node in restarted_agent:
            node.stop_agent()
            node.start_agent(wait=False)
            fixed.append(f"{node.name}: agent restarted")
        self._wait(restarted_sshd, what="sshd", timeout=timeout)
        self._wait(restarted_agent, what="agent", timeout=timeout)
        return fixed

    # -- teardown -------------------------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Tear everything down: processes, namespaces, veths, bridge, temp dir. Idempotent; returns problems."""
        with self._lock:
            if self._closed:
                return []
            self._closed = True
        for node in self.nodes:
            for proc in (node._agent, node._sshd, *node._extra):
                signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        for node in self.nodes:
            for proc in (node._agent, node._sshd, *node._extra):
                if proc is not None:
                    try:
                        proc.wait(timeout=max(0.01, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        signal_group(proc, signal.SIGKILL)
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(timeout=2)
        problems = reaper.teardown(self._state)
        if self._watchdog is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.close()  # EOF: the watchdog finds the state file gone and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=5)
        _LIVE.discard(self)
        return problems

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Cluster {self.run_id} {self.subnet} nodes={[n.name for n in self.nodes]}>"


#: Clusters not closed yet; closed at interpreter exit if a caller forgot (the watchdog covers hard kills).
_LIVE: set[Cluster] = set()


@atexit.register
def _close_all() -> None:
    for cluster in list(_LIVE):
        with contextlib.suppress(Exception):
            cluster.close()
