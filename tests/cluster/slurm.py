"""A real Slurm cluster on this machine: one munged and slurmctld, one slurmd per namespace node.

Built on the namespace harness (``tests/cluster/harness.py``: nodes, bridge, state file, watchdog, reaper),
without sshd or agents: Slurm starts every process. Usage::

    with SlurmCluster.create(3) as slurm:
        env = slurm.env()                       # SLURM_CONF for sbatch/squeue/srun/scancel
        job = slurm.sbatch(script_path)
        slurm.wait_job_state(job, {"COMPLETED"})

What took finding (measured here with slurm-wlm 22.05.8, see issue 13):

* every daemon runs inside its node's network namespace (entered with ``nsenter --net``, so ``ip netns pids``
  finds it and the reaper's teardown kills it with everything Slurm started there), in a private mount and UTS
  namespace with the node's own hostname: slurmctld refuses to start when the hostname is not its SlurmctldHost;
* slurmd 22.05 always loads a cgroup plugin; ``ip netns exec`` remounts ``/sys`` (hiding ``/sys/fs/cgroup``) and
  slurmd dies, so we do not use it: ``CgroupPlugin=cgroup/v1`` and an empty tmpfs over ``/sys/fs/cgroup`` in the
  node's private mount namespace (no real cgroup is touched);
* node names must resolve inside each node (torchrun's c10d checks its own hostname): a private ``/etc/hosts``
  is bind-mounted in each node's mount namespace;
* munged's unix socket lives on the shared filesystem, so one munged serves every node (``AuthInfo=socket=``).

Teardown: jobs are cancelled first (their processes outlive slurmd), then the daemons get SIGTERM; whatever is
left in the namespaces is killed by :func:`tests.cluster.reaper.teardown` (also on a hard kill, by the watchdog).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.cluster.harness import Cluster, ClusterError, cluster_support_problem
from tests.cluster.node import Node

__all__ = ["PARTITION", "SLURM_TOOLS", "SlurmCluster", "slurm_support_problem"]

#: Binaries the harness and the Slurm backend need (``make sysdeps`` installs them).
SLURM_TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "srun", "scancel", "scontrol", "sinfo",
               "nsenter", "unshare")
#: The one partition of the test cluster.
PARTITION = "debug"
#: Per-node CPUs declared to Slurm; each node sees the whole machine.
_CPUS = os.cpu_count() or 1


def slurm_support_problem() -> str | None:
    """Why a Slurm test cluster cannot be built here (None when it can)."""
    problem = cluster_support_problem(need_sshd=False, need_agent=False)
    if problem:
        return problem
    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None]
    if missing:
        return (f"{', '.join(missing)} not found: apt-get install slurmctld slurmd slurm-client munge "
                "(or `make sysdeps`)")
    return None


class SlurmCluster:
    """Namespace nodes running slurmd, node0 also slurmctld and munged; a context manager."""

    def __init__(self, cluster: Cluster):
        #: The underlying namespace cluster (nodes, addresses, tmpdir, teardown).
        self.cluster = cluster
        #: Where this cluster's Slurm files live (config, key, state, spool, logs).
        self.dir = cluster.tmpdir / "slurm"
        #: ``slurm.conf`` (pass as ``SLURM_CONF``).
        self.conf_path = self.dir / "slurm.conf"
        #: munged's socket on the shared filesystem.
        self.munge_socket = self.dir / "munge" / "munge.socket"
        #: A directory every node can write (job outputs, exported scripts, run logs).
        self.shared_dir = cluster.tmpdir / "shared"
        self.partition = PARTITION
        self._daemons: list[subprocess.Popen] = []

    @property
    def nodes(self) -> list[Node]:
        """The namespace nodes (``node0``..)."""
        return self.cluster.nodes

    # -- construction ---------------------------------------------------------------------------------------
    @classmethod
    def create(cls, n: int = 3, *, ghost_nodes: int = 0, timeout: float = 60.0) -> SlurmCluster:
        """Build ``n`` nodes and start munged, slurmctld and ``n`` slurmd; wait until every node is idle.

        ``ghost_nodes`` extra nodes are declared in the partition but never started (always DOWN): a job that
        needs them pends forever, with a reason ``squeue`` reports.
        """
        problem = slurm_support_problem()
        if problem:
            raise ClusterError(problem)
        cluster = Cluster.create(n, agent=False, sshd=False)
        slurm = cls(cluster)
        try:
            slurm._write_files(ghost_nodes)
            slurm._start(timeout)
        except BaseException:
            slurm.close()
            raise
        return slurm

    def _write_files(self, ghost_nodes: int) -> None:
        for sub in ("munge", "state", "spool", "log"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "munge").chmod(0o700)
        self.shared_dir.mkdir(parents=True, exist_ok=True)
        self.shared_dir.chmod(0o777)
        key = self.dir / "munge" / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(1024))
        ghost_base = len(self.nodes)
        hosts = ["127.0.0.1 localhost"] + [f"{node.address} {node.name}" for node in self.nodes]
        (self.dir / "hosts").write_text("\n".join(hosts) + "\n")
        (self.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        self.conf_path.write_text(self._slurm_conf(ghost_base, ghost_nodes))

    def _slurm_conf(self, ghost_base: int, ghost_nodes: int) -> str:
        d = self.dir
        master = self.nodes[0]
        lines = [
            "# ftwiz test cluster: generated by tests/cluster/slurm.py",
            "ClusterName=ftwiz",
            f"SlurmctldHost={master.name}({master.address})",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'spool'}/slurmd-%n.pid",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'log'}/slurmd-%n.log",
            "SlurmctldPort=6817",
            "SlurmdPort=6818",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "MailProg=/bin/true",  # no mailer installed
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "KillWait=5",
            "MinJobAge=300",
            "SlurmctldParameters=enable_configless",
            "InactiveLimit=0",
            "SlurmdTimeout=30",
        ]
        for node in self.nodes:
            lines.append(f"NodeName={node.name} NodeAddr={node.address} CPUs={_CPUS} State=UNKNOWN")
        for i in range(ghost_base, ghost_base + ghost_nodes):
            # Never started: declared so a job can ask for more nodes than run (it pends with a reason).
            lines.append(f"NodeName=node{i} NodeAddr=127.0.0.{200 + i} CPUs={_CPUS} State=FUTURE")
        lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for the Slurm client commands (``SLURM_CONF`` set, proxies dropped)."""
        env = dict(os.environ if base is None else base)
        for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID"):  # never inherit an outer allocation
            env.pop(var, None)
        env["SLURM_CONF"] = str(self.conf_path)
        return env

    def _in_node(self, node: Node, argv: list[str], log: Path) -> subprocess.Popen:
        """Start ``argv`` in ``node``'s network namespace, own UTS and mount namespace (hostname, /etc/hosts)."""
        setup = " && ".join([
            f"hostname {shlex.quote(node.name)}",
            "mount --make-rprivate /",
            "mount -t tmpfs ftwiz-no-cgroup /sys/fs/cgroup",
            f"mount --bind {shlex.quote(str(self.dir / 'hosts'))} /etc/hosts",
            f"exec {shlex.join(argv)}",
        ])
        full = ["nsenter", f"--net=/run/netns/{node.netns}", "unshare", "--uts", "--mount", "sh", "-c", setup]
        env = self.env()
        env["SLURM_CONF"] = str(self.conf_path)
        with open(log, "ab") as out:
            proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        node._extra.append(proc)  # the namespace cluster signals it at close
        self._daemons.append(proc)
        return proc

    def _start(self, timeout: float) -> None:
        t0 = time.monotonic()
        master = self.nodes[0]
        logs = self.dir / "log"
        munge = self.dir / "munge"
        self._in_node(master, ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                               f"--log-file={logs / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"],
                      logs / "munged.out")
        self._wait_for(lambda: self.munge_socket.exists(), timeout, "munged socket", logs / "munged.log")
        self._in_node(master, ["slurmctld", "-D", "-i", "-f", str(self.conf_path)], logs / "slurmctld.out")
        for node in self.nodes:
            self._in_node(node, ["slurmd", "-D", "-N", node.name, "-f", str(self.conf_path)],
                          logs / f"slurmd-{node.name}.out")
        self._wait_for(self._all_idle, timeout, "every node idle in sinfo", logs / "slurmctld.log")
        self.cluster.setup_seconds["slurm"] = time.monotonic() - t0

    def _all_idle(self) -> bool:
        for proc in self._daemons:
            if proc.poll() is not None:
                raise ClusterError(f"a Slurm daemon exited ({proc.args!r}, exit {proc.returncode}); "
                                   f"logs: {self.dir / 'log'}\n{self.log_tails()}")
        states = self.node_states()
        return len(states) >= len(self.nodes) and all(states.get(n.name) == "idle" for n in self.nodes)

    def _wait_for(self, ready: Any, timeout: float, what: str, log: Path) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise ClusterError(f"{what}: not ready after {timeout:.0f} s; see {log}\n{self.log_tails()}")
            time.sleep(0.1)

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of every daemon log (for failure messages)."""
        out = []
        for path in sorted((self.dir / "log").glob("*")):
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(out)

    # -- client commands ------------------------------------------------------------------------------------
    def run(self, argv: Iterable[str], *, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a Slurm client command from the controller's side (root namespace) with this cluster's config."""
        args = list(argv)
        res = subprocess.run(args, capture_output=True, text=True, env=self.env(), timeout=timeout, check=False)
        if check and res.returncode != 0:
            raise ClusterError(f"{shlex.join(args)} failed (exit {res.returncode}): {res.stderr.strip()}")
        return res

    def node_states(self) -> dict[str, str]:
        """Node name -> state as ``sinfo`` prints it (``idle``, ``alloc``, ``down*``, ...)."""
        res = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=10)
        if res.returncode != 0:
            return {}
        pairs = (line.split() for line in res.stdout.splitlines())
        return {p[0]: p[1] for p in pairs if len(p) == 2}

    def sbatch(self, script: Path, *args: str) -> str:
        """Submit ``script`` (``sbatch --parsable``); returns the job id."""
        out = self.run(["sbatch", "--parsable", *args, str(script)]).stdout.strip()
        return out.split(";")[0]

    def job_state(self, job_id: str) -> str:
        """The job's state from ``scontrol show job`` (``PENDING``, ``RUNNING``, ``COMPLETED``, ...), '' if unknown."""
        res = self.run(["scontrol", "-o", "show", "job", job_id], check=False, timeout=10)
        for field in res.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return ""

    def wait_job_state(self, job_id: str, states: set[str], timeout: float = 120.0) -> str:
        """Wait until the job is in one of ``states``; returns it (raises with the logs after ``timeout``)."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in states:
                return state
            time.sleep(0.2)
        raise ClusterError(f"job {job_id} still {state or 'unknown'} after {timeout:.0f} s, wanted {sorted(states)}\n"
                           f"{self.log_tails()}")

    def cancel_all(self) -> None:
        """``scancel`` every job of the cluster and wait until none runs (their processes outlive slurmd)."""
        self.run(["scancel", "--partition", self.partition], check=False, timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            res = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=10)
            if res.returncode != 0 or not res.stdout.strip():
                return
            time.sleep(0.1)

    # -- teardown -------------------------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Cancel jobs, stop the daemons, tear the namespaces down (idempotent); returns the problems met."""
        with contextlib.suppress(Exception):
            if self._daemons and all(p.poll() is None for p in self._daemons[:2]):
                self.cancel_all()
        return self.cluster.close()

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SlurmCluster {self.cluster.run_id} nodes={[n.name for n in self.nodes]}>"
