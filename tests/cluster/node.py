"""One namespace node of a test cluster: run things in it, cut its link, firewall it, drive its sshd and agent."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from tests.cluster import netns as net
from tests.cluster import reaper, sshd
from tests.cluster.netns import ClusterError

if TYPE_CHECKING:
    from tests.cluster.harness import Cluster

__all__ = ["Node", "REPO_ROOT", "AGENT_PORT", "SSH_PORT", "NODE_IFACE"]

REPO_ROOT = Path(__file__).resolve().parents[2]
AGENT_PORT = 8462
SSH_PORT = 22
NODE_IFACE = "eth0"
NFT_TABLE = "ftwiz_test"
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


class Node:
    """One namespace node. Create through :meth:`Cluster.create`; every helper acts inside its namespace."""

    def __init__(self, cluster: "Cluster", index: int, *, netns: str, host_veth: str, address: str, workdir: Path, sysdir: Path):
        self.cluster = cluster
        #: Position in ``cluster.nodes``.
        self.index = index
        #: Node name (``node0``, ``node1``, ...), also the agent's ``--node-name``.
        self.name = f"node{index}"
        #: The network namespace, e.g. ``ftwz-1a2b3c-node0``.
        self.netns = netns
        #: The interface inside the namespace.
        self.iface = NODE_IFACE
        #: The veth end on the bridge, in the root namespace.
        self.host_veth = host_veth
        #: The node's IPv4 address (SSH, agent, MASTER_ADDR).
        self.address = address
        #: This node's workdir (own dir per node unless ``per_node_workdir=False``).
        self.workdir = workdir
        #: Node-private harness files: sshd config, host key, logs.
        self.sysdir = sysdir
        self.ssh_port = SSH_PORT
        self.agent_port = AGENT_PORT
        self._agent: Optional[subprocess.Popen] = None
        self._sshd: Optional[subprocess.Popen] = None
        self._extra: list[subprocess.Popen] = []
        #: ``(certificate, key, CA bundle)`` once the agent was started with TLS (kept for restarts).
        self.agent_tls: Optional[tuple[Path, Path, Path]] = None

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.address} netns={self.netns}>"

    # -- paths ------------------------------------------------------------------------------------------
    @property
    def agent_url(self) -> str:
        """Base URL of this node's agent, e.g. ``http://10.77.3.11:8462`` (``https://`` with TLS)."""
        return f"{'https' if self.agent_tls else 'http'}://{self.address}:{self.agent_port}"

    @property
    def token_path(self) -> Path:
        """The agent token file (shared by the cluster, mode 0600)."""
        return self.cluster.token_path

    @property
    def host_key_path(self) -> Path:
        """This node's sshd host private key."""
        return self.sysdir / "ssh_host_ed25519_key"

    @property
    def agent_log_path(self) -> Path:
        """stdout+stderr of this node's agent."""
        return self.sysdir / "agent.log"

    @property
    def sshd_log_path(self) -> Path:
        """stderr of this node's sshd (``-e``)."""
        return self.sysdir / "sshd.log"

    # -- running things inside the namespace --------------------------------------------------------------
    def netns_argv(self, argv: Sequence[str]) -> list[str]:
        """``ip netns exec NS ARGV...`` (argv list, no shell)."""
        return ["ip", "netns", "exec", self.netns, *map(str, argv)]

    def exec(self, argv: Sequence[str], *, check: bool = False, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` inside the namespace and wait (``subprocess.run``; output captured as text by default)."""
        kw.setdefault("capture_output", "stdout" not in kw and "stderr" not in kw)
        kw.setdefault("text", True)
        kw.setdefault("env", _child_env())
        return subprocess.run(self.netns_argv(argv), check=check, timeout=timeout, **kw)

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen:
        """Start ``argv`` inside the namespace in its own session; it is killed at cluster teardown."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("env", _child_env())
        proc = subprocess.Popen(self.netns_argv(argv), start_new_session=True, **kw)
        self._extra.append(proc)
        return proc

    # -- link ---------------------------------------------------------------------------------------------
    def link_down(self) -> None:
        """Take ``eth0`` down inside the namespace: the node drops off the network."""
        net.ip("link", "set", self.iface, "down", netns=self.netns)

    def link_up(self) -> None:
        """Bring ``eth0`` back up."""
        net.ip("link", "set", self.iface, "up", netns=self.netns)

    def set_mtu(self, mtu: int) -> None:
        """Set the MTU of ``eth0`` inside the namespace (the bridge side keeps its own)."""
        net.ip("link", "set", self.iface, "mtu", str(int(mtu)), netns=self.netns)

    def link_state(self) -> dict:
        """``ip -j link show eth0`` inside the namespace: ``{"up": bool, "mtu": int}``."""
        info = json.loads(net.ip("-j", "link", "show", self.iface, netns=self.netns).stdout)[0]
        return {"up": "UP" in info.get("flags", []), "mtu": int(info.get("mtu", 0))}

    # -- firewall -----------------------------------------------------------------------------------------
    def nft_block_port(self, port: int) -> None:
        """Drop inbound TCP to ``port`` in this namespace (nftables), so connects to it time out."""
        script = (
            f"add table inet {NFT_TABLE}\n"
            f"add chain inet {NFT_TABLE} input {{ type filter hook input priority 0 ; policy accept ; }}\n"
            f"add rule inet {NFT_TABLE} input tcp dport {int(port)} drop\n"
        )
        net.run(self.netns_argv(["nft", "-f", "-"]), input=script)

    def nft_flush(self) -> None:
        """Remove every rule :meth:`nft_block_port` added in this namespace."""
        net.run(self.netns_argv(["nft", "delete", "table", "inet", NFT_TABLE]), check=False)

    # -- sshd ---------------------------------------------------------------------------------------------
    def start_sshd(self, *, wait: bool = True, timeout: float = 20) -> None:
        """Start this node's sshd (``sshd -D -e -f <own config>``) and, with ``wait``, until port 22 accepts."""
        if self.sshd_running:
            return
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        argv = [sshd.SSHD, "-D", "-e", "-f", str(self.sysdir / "sshd_config")]
        self._sshd = self._spawn(argv, self.sshd_log_path)
        if wait:
            self.cluster._wait([self], what="sshd", timeout=timeout)

    def stop_sshd(self) -> None:
        """Stop this node's sshd (the listener; sessions already open go too)."""
        _stop(self._sshd)
        self._sshd = None

    @property
    def sshd_running(self) -> bool:
        """Whether the sshd this harness started is still running."""
        return self._sshd is not None and self._sshd.poll() is None

    def ssh_argv(self, command: Sequence[str] = (), *, connect_timeout_s: float = 5.0) -> list[str]:
        """``ssh`` argv logging in as root with the cluster key and known_hosts; ``command`` is shell-quoted."""
        argv = ["ssh", *sshd.ssh_client_options(self.cluster.ssh_key_path, self.cluster.known_hosts_path,
                                                connect_timeout_s=connect_timeout_s),
                "-p", str(self.ssh_port), f"root@{self.address}"]
        if command:
            argv += ["--", shlex.join(map(str, command))]
        return argv

    def ssh(self, command: Sequence[str], *, timeout: float = 30, check: bool = False) -> subprocess.CompletedProcess:
        """Run ``command`` on the node over ssh (from the root namespace, like the controller)."""
        return subprocess.run(self.ssh_argv(command), capture_output=True, text=True, timeout=timeout, check=check,
                              stdin=subprocess.DEVNULL)

    def paramiko_client(self, *, timeout: float = 10.0):
        """A connected ``paramiko.SSHClient`` as root: cluster key, known_hosts, RejectPolicy (no host key guessing)."""
        import paramiko  # only tests that use paramiko pay for the import

        client = paramiko.SSHClient()
        client.load_host_keys(str(self.cluster.known_hosts_path))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(self.address, port=self.ssh_port, username="root", key_filename=str(self.cluster.ssh_key_path),
                       timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                       allow_agent=False, look_for_keys=False)
        return client

    # -- agent --------------------------------------------------------------------------------------------
    def agent_argv(self) -> list[str]:
        """The command line that serves this node's agent (run inside the namespace)."""
        c = self.cluster
        argv = [c.agent_python, "-m", "agent", "--host", "0.0.0.0", "--port", str(self.agent_port),
                "--token-file", str(c.token_path), "--node-name", self.name, "--disk-path", str(self.workdir)]
        if c.training_python != c.agent_python:
            argv += ["--python", c.training_python]
        if c.agent_interval is not None:
            argv += ["--interval", str(c.agent_interval)]
        if c.confine_probes:
            # The agents' probes may reach only this cluster and loopback (the project's network rule).
            argv += ["--probe-allow", str(c.subnet), "--probe-allow", "127.0.0.0/8"]
        if self.agent_tls is not None:
            argv += ["--tls-cert", str(self.agent_tls[0]), "--tls-key", str(self.agent_tls[1]), "--tls-ca", str(self.agent_tls[2])]
        fixture = c.gpu_fixtures[self.index] if c.gpu_fixtures else None
        if fixture:
            argv += ["--gpu-fixture", str(fixture)]
        return argv + list(c.agent_args)

    def start_agent(self, *, wait: bool = True, timeout: float = 60, tls: Optional[tuple[Path, Path, Path]] = None) -> None:
        """Start this node's agent inside the namespace and, with ``wait``, until ``/healthz`` answers 200.

        ``tls``: ``(certificate, key, CA bundle)``: the agent serves HTTPS only (``--tls-cert``/``--tls-key``) and
        verifies its peers against the bundle (``--tls-ca``); kept for later restarts.
        """
        if tls is not None:
            self.agent_tls = tls
        if self.agent_running:
            return
        self._agent = self._spawn(self.agent_argv(), self.agent_log_path, cwd=REPO_ROOT)
        if wait:
            self.cluster._wait([self], what="agent", timeout=timeout)

    def stop_agent(self) -> None:
        """Stop this node's agent (SIGTERM, then SIGKILL after a few seconds)."""
        _stop(self._agent)
        self._agent = None

    @property
    def agent_running(self) -> bool:
        """Whether the agent this harness started is still running."""
        return self._agent is not None and self._agent.poll() is None

    def agent_request(self, method: str, path: str, *, json_body: Any = None, token: Optional[str] = "cluster",
                      timeout: float = 30.0):
        """One HTTP request to this node's agent (``httpx``, no proxies); ``token=None`` sends no Authorization."""
        import httpx

        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {self.cluster.token if token == 'cluster' else token}"
        with httpx.Client(trust_env=False, timeout=timeout) as client:
            return client.request(method, self.agent_url + path, json=json_body, headers=headers)

    def agent_get(self, path: str, **kw: Any) -> Any:
        """GET ``path`` with the token; the decoded JSON (raises ``httpx.HTTPStatusError`` on 4xx/5xx)."""
        response = self.agent_request("GET", path, **kw)
        response.raise_for_status()
        return response.json()

    def agent_post(self, path: str, body: Any = None, **kw: Any) -> Any:
        """POST JSON ``body`` to ``path`` with the token; the decoded JSON (raises on 4xx/5xx)."""
        response = self.agent_request("POST", path, json_body=body if body is not None else {}, **kw)
        response.raise_for_status()
        return response.json()

    # -- health -------------------------------------------------------------------------------------------
    def tcp_open(self, port: int, timeout: float = 0.5) -> bool:
        """Whether ``address:port`` accepts a TCP connection from the root namespace."""
        try:
            with socket.create_connection((self.address, port), timeout=timeout):
                return True
        except OSError:
            return False

    def agent_healthy(self, timeout: float = 1.0) -> bool:
        """Whether ``GET /healthz`` answers 200 (stdlib HTTP: no proxy can intervene)."""
        if self.agent_tls is not None:
            context = ssl.create_default_context(cafile=str(self.agent_tls[2]))
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(self.address, self.agent_port, timeout=timeout, context=context)
        else:
            conn = http.client.HTTPConnection(self.address, self.agent_port, timeout=timeout)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def kill_strays(self) -> list[int]:
        """Kill every process in the namespace but the sshd listener and the agent (with the agent's children).

        What was started over ssh (its own session under sshd) or by :meth:`popen` counts as stray; the
        listener's own per-connection processes (``sshd: [net]``, ``sshd-session``: they call setsid, and
        linger a moment after a client such as a port probe closed) do not.
        """
        sessions = {p.pid for p in (self._agent, self._sshd) if p is not None and p.poll() is None}
        agent = self._agent.pid if self.agent_running else None
        sshd = self._sshd.pid if self._sshd is not None and self._sshd.poll() is None else None
        stray = [pid for pid in reaper.namespace_pids(self.netns)
                 if _stat_field(pid, 3) not in sessions and (agent is None or not _descends_from(pid, agent))
                 and not (sshd is not None and _comm(pid).startswith("sshd") and _descends_from(pid, sshd))]
        for pid in stray:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._extra = [p for p in self._extra if p.poll() is None]
        return stray

    # -- internals ----------------------------------------------------------------------------------------
    def _spawn(self, argv: Sequence[str], log_path: Path, cwd: Optional[Path] = None) -> subprocess.Popen:
        log = open(log_path, "ab")
        try:
            return subprocess.Popen(self.netns_argv(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=cwd, env=_child_env(node_cache=True))
        finally:
            log.close()

    def _ready(self, what: str) -> bool:
        """One readiness check of ``what`` ("sshd" or "agent"); raises if its process has exited."""
        proc, log, check = {
            "sshd": (self._sshd, self.sshd_log_path, lambda: self.tcp_open(self.ssh_port)),
            "agent": (self._agent, self.agent_log_path, self.agent_healthy),
        }[what]
        if proc is None:
            raise ClusterError(f"{self.name}: {what} was not started")
        if proc.poll() is not None:
            raise ClusterError(f"{self.name}: {what} exited with code {proc.returncode} during start-up; "
                               f"last lines of {log}:\n{log_tail(log)}")
        return check()


NODE_CACHE = reaper.STATE_DIR / "node-cache"
"""``XDG_CACHE_HOME`` of every node's agent and sshd. The agents cache a CPU torch build's versions there (keyed by the
interpreter and torch's files, :mod:`agent.workloads.versions`); without it an agent started under a test that
points ``XDG_CACHE_HOME`` at a directory of its own (the checklist tests keep their mesh cache apart) imported
torch again to answer its first report: 26 times in one run, 48 CPU seconds. The nodes share one interpreter and
one torch, so one cache is what separate machines with the same install would each hold."""


def _child_env(*, node_cache: bool = False) -> dict[str, str]:
    """Environment for node processes: no proxy (nodes reach only namespace addresses), the repo importable; with
    ``node_cache`` (the node's daemons: agent, sshd), the nodes' shared cache. A command a test runs in a node
    keeps the test's own ``XDG_CACHE_HOME``."""
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
    if node_cache:
        NODE_CACHE.mkdir(mode=0o700, parents=True, exist_ok=True)
        env["XDG_CACHE_HOME"] = str(NODE_CACHE)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def signal_group(proc: Optional[subprocess.Popen], sig: int) -> None:
    """Signal the process group of ``proc`` (its own session) while it is still our unreaped child."""
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def _stop(proc: Optional[subprocess.Popen], grace_s: float = 5.0) -> None:
    if proc is None:
        return
    signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=5)


def _stat_field(pid: int, index: int) -> Optional[int]:
    """Field ``index`` after the command name in /proc/PID/stat (1: ppid, 3: session); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[index])


def _comm(pid: int) -> str:
    """The process's command name (/proc/PID/comm), or "" if gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is ``pid``'s parent, grandparent, ... (pid 1 ends the walk)."""
    for _ in range(64):
        parent = _stat_field(pid, 1)
        if parent is None or parent <= 1:
            return False
        if parent == ancestor:
            return True
        pid = parent
    return False


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:]) or "(empty)"
    except OSError:
        return "(no log)"
