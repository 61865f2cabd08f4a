"""The per-node torchrun command: pure planning, no I/O.

:func:`build_plan` turns a config (plus what the agents reported and what the network plan chose)
into one :class:`NodePlan` per node: the torchrun argv, the environment, and the ``sh`` script that
runs it on the node. Every value that reaches a shell goes through :func:`shlex.quote`
(:func:`quote_path` lets a leading ``~/`` expand on the node and quotes the rest).

**Rendezvous and node ranks.** We use the c10d rendezvous at ``MASTER:rendezvous_port`` with the run
id as ``--rdzv-id``. The master gets ``--rdzv-conf=is_host=true`` and hosts the store, the others
``is_host=false``, and every node gets ``--local-addr=<its host>``: without both, c10d fails with
RendezvousConnectionError after 120 s whenever a node's hostname does not resolve to its own address
(several NICs, ``127.0.1.1`` entries, or network-namespace nodes sharing one hostname). With c10d the
*node* (group) ranks follow arrival order, so they are **not deterministic** across launches: global
rank 0 may land on any node. We accept that (static rendezvous would need every node to agree on its
rank and on a free master port before start, and loses c10d's tolerance of start skew) and instead
record which node got which global ranks from the workloads' ``started`` lines (``run.json`` →
``ranks``). Process counts may differ per node; torchrun sums the local world sizes.
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from shared.config import FtwizConfig, NodeConfig
from shared.nodewire import LOG, NODE_ENV, RUN_ENV, payload_header, run_file, write_exit_sh, write_pgid_sh
from shared.redact import masked_env
from tui.jobshape import node_processes, threads_per_rank
from tui.runs.index import RUN_ID_RE

__all__ = [
    "NodePlan",
    "Payload",
    "WORKLOAD_PACKAGE",
    "build_plan",
    "command_env",
    "make_payload",
    "quote_path",
    "rundir_rel",
    "send_payload",
    "start_script",
    "torchrun_argv",
    "workload_target",
]

#: The package name the workloads are copied under on every node (``<rundir>/ftwiz_workloads``).
WORKLOAD_PACKAGE = "ftwiz_workloads"
#: torchrun prefixes every worker line with this (global rank), see ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``.
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"



@dataclass(frozen=True)
class NodePlan:
    """What runs on one node (a slice of the launch plan: never changed once built)."""

    node: str
    """Node name."""
    host: str
    """The node's address (``--local-addr``)."""
    is_master: bool
    """Whether this node hosts the c10d store."""
    nproc: int
    """Processes torchrun starts here."""
    cuda_visible_devices: Optional[str]
    """Selected GPU indices, or None when GPUs are not selected (CPU processes)."""
    workdir: str
    """The node's workdir as configured (``~`` expands on the node)."""
    python: str
    """The training interpreter on the node."""
    argv: list[str]
    """The torchrun command line (without the environment)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment exported before torchrun starts."""

    @property
    def rundir(self) -> str:
        """``runs/<run id>`` relative to the workdir."""
        return rundir_rel(self.env[RUN_ENV])

    @property
    def command_line(self) -> str:
        """The command as one shell line (environment first) to show and record: secret-looking values masked."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(masked_env(self.env).items()))
        return f"{env} {shlex.join(self.argv)}"


def rundir_rel(run_id: str) -> str:
    """The run directory relative to a node's workdir."""
    return f"runs/{run_id}"


def quote_path(path: str) -> str:
    """Quote ``path`` for a POSIX shell; a leading ``~`` or ``~/`` still expands to the node's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def torchrun_argv(
    plan_node: NodeConfig,
    *,
    config: FtwizConfig,
    run_id: str,
    nproc: int,
    rundir_abs: str,
) -> list[str]:
    """The torchrun argv for one node (see the module docstring for the rendezvous choice)."""
    master = config.master
    is_master = plan_node.name == master.name
    return [
        plan_node.python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={len(config.nodes)}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={_endpoint(master.host, config.cluster.rendezvous_port)}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=is_host={'true' if is_master else 'false'}",
        f"--local-addr={plan_node.host}",
        # ftwiz is the recovery policy: an elastic restart would hide the failure from stop-all.
        "--max-restarts=0",
        # Per-rank stdout/stderr files on the node, and the same lines on torchrun's console
        # with a global-rank prefix, so the controller can name the rank of every line.
        "--tee=3",
        f"--log-dir={rundir_abs}/torchrun",
        *workload_target(config, rundir_abs),
    ]


def workload_target(config: FtwizConfig, rundir_abs: str) -> list[str]:
    """What torchrun runs on every rank: the built-in workloads, or the user-code runner.

    For ``workload = "command"`` the target is ``ftwiz_workloads.usercode`` (shipped with the
    workloads): it runs ``[job].command`` in the rank's own process (``runpy``), from the shipped
    code dir (or the workdir when ``code_dir = ""``), after registering the SIGUSR1 stack dump, so
    a stall stop shows every rank's stack for user code too.
    """
    module = f"{WORKLOAD_PACKAGE}.usercode" if config.job.workload == "command" else WORKLOAD_PACKAGE
    return ["-m", module, "--spec", f"{rundir_abs}/job.json"]


def command_env(config: FtwizConfig) -> dict[str, str]:
    """``[job].env`` for ``workload = "command"`` (the config refuses keys torchrun or ftwiz set)."""
    return dict(config.job.env) if config.job.workload == "command" else {}


def _endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def build_plan(
    config: FtwizConfig,
    run_id: str,
    *,
    rundirs: Mapping[str, str],
    gpu_indices: Optional[Mapping[str, Optional[Sequence[int]]]] = None,
    cpu_cores: Optional[Mapping[str, Optional[int]]] = None,
    machines: Optional[Mapping[str, Optional[str]]] = None,
    network_env: Optional[Mapping[str, Mapping[str, str]]] = None,
) -> list[NodePlan]:
    """One :class:`NodePlan` per node, in config order.

    ``rundirs`` maps node name → absolute run directory on that node (``<workdir>/runs/<run id>``
    as the node resolved it). ``gpu_indices``, ``cpu_cores`` and ``machines`` (kernel boot ids: nodes on one
    host share its cores) come from the agents' reports (missing → CPU processes, one OpenMP thread). ``network_env`` is the network plan's per-node
    environment (``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``, ``NCCL_IB_DISABLE``).
    """
    if not RUN_ID_RE.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} must match {RUN_ID_RE.pattern}")
    gpu_indices = gpu_indices or {}
    cpu_cores = cpu_cores or {}
    network_env = network_env or {}
    master = config.master
    processes = {node.name: node_processes(node, gpu_indices.get(node.name)) for node in config.nodes}
    threads = threads_per_rank({name: nproc for name, (nproc, _) in processes.items()}, cpu_cores, machines)
    plans = []
    for node in config.nodes:
        nproc, cvd = processes[node.name]
        rundir_abs = rundirs[node.name]
        env: dict[str, str] = {}
        env.update(network_env.get(node.name, {}))
        env.update(config.nccl.env)  # the user's [nccl] env wins over the plan, as in shared.netplan
        env.update(command_env(config))
        env.update(
            {
                "MASTER_ADDR": master.host,
                "MASTER_PORT": str(config.cluster.rendezvous_port),
                RUN_ENV: run_id,
                NODE_ENV: node.name,
                "PYTHONPATH": rundir_abs,
                "PYTHONUNBUFFERED": "1",
                "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": RANK_PREFIX_TEMPLATE,
            }
        )
        # the machine's cores over its ranks (nodes on one host share them), unless [nccl].env / [job].env set it
        env.setdefault("OMP_NUM_THREADS", str(threads[node.name]))
        if cvd is not None:
            env["CUDA_VISIBLE_DEVICES"] = cvd
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # NVML index order, as the agent reports
        argv = torchrun_argv(node, config=config, run_id=run_id, nproc=nproc, rundir_abs=rundir_abs)
        plans.append(
            NodePlan(
                node=node.name,
                host=node.host,
                is_master=node.name == master.name,
                nproc=nproc,
                cuda_visible_devices=cvd,
                workdir=node.workdir,
                python=node.python,
                argv=argv,
                env=env,
            )
        )
    return plans


def start_script(plan: NodePlan, rundir_abs: str) -> str:
    """The ``sh`` script that runs torchrun on the node; every value is shell-quoted.

    It records its pid (= its process group, since it is started under ``setsid``) with its start time and, when
    torchrun ends by itself, the exit code (``<node>.exit``, written atomically). torchrun's output
    goes to ``<node>.log`` in the run directory: the node-side log that outlives the controller.
    """
    lines = [
        "#!/bin/sh",
        f"# ftwiz run {plan.env[RUN_ENV]} on node {plan.node}: generated, every value quoted.",
        f"cd {quote_path(plan.workdir)} || exit 97",
        # The pgid and the leader's start time (/proc/PID/stat field 22): a stop signals the group only while both match.
        write_pgid_sh(rundir_abs, plan.node),
    ]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(plan.env.items())]
    if "GLOO_SOCKET_IFNAME" not in plan.env:
        lines += _interface_fallback(plan.env["MASTER_ADDR"])
    lines += [
        f"{shlex.join(plan.argv)} < /dev/null >> {shlex.quote(f'{rundir_abs}/{run_file(plan.node, LOG)}')} 2>&1",
        "code=$?",
        write_exit_sh(rundir_abs, plan.node),
        "exit $code",
        "",
    ]
    return "\n".join(lines)


def _interface_fallback(master: str) -> list[str]:
    """Without an interface plan (no agent report): the interface that routes to the master, found on
    the node; gloo would otherwise bind to whatever the hostname resolves to, often loopback."""
    quoted = shlex.quote(master)
    return [
        "# No interface plan for this node: use the one that routes to the master (never lo).",
        f"dev=$(ip -o route get {quoted} 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p')",
        f"if [ \"$dev\" = lo ]; then dev=$(ip -o addr show 2>/dev/null | awk -v a={quoted} '{{split($4, p, \"/\"); if (p[1] == a) print $2}}' | head -n 1); fi",
        'if [ -n "$dev" ] && [ "$dev" != lo ]; then export GLOO_SOCKET_IFNAME="$dev"; [ -n "${NCCL_SOCKET_IFNAME+x}" ] || export NCCL_SOCKET_IFNAME="=$dev"; fi',
    ]


@dataclass(frozen=True)
class Payload:
    """What one node's launch exec receives: its own files, then tars every node gets (built once, read from disk)."""

    files: Mapping[str, bytes]
    """Relative path → content (``job.json``, ``<node>.sh``, the workloads package)."""
    tars: tuple[Path, ...] = ()
    """Whole tar files appended as they are (the user's code: :func:`tui.codeship.bundle_for_run`)."""


#: How much of a shared tar is read and sent at once.
SEND_CHUNK = 1 << 20


def make_payload(files: Mapping[str, bytes]) -> bytes:
    """``files`` (relative path → content) as one uncompressed tar (the node helper unpacks it).

    Every file is mode 0600: ``job.json`` and the start script carry ``[job].env`` and ``[nccl].env`` values.
    """
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, now
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def send_payload(send: Callable[[bytes], None], payload: Payload) -> int:
    """Send ``payload`` as the launch protocol's ``payload <n>`` frame: the node's own tar, then each shared tar
    streamed from disk in :data:`SEND_CHUNK` pieces (the node reads them as one archive: ``ignore_zeros``).
    Returns the bytes sent after the header line."""
    head = make_payload(payload.files)
    handles = [open(path, "rb") for path in payload.tars]
    try:
        total = len(head) + sum(os.fstat(handle.fileno()).st_size for handle in handles)
        send(payload_header(total) + head)
        sent = len(head)
        for handle in handles:
            while chunk := handle.read(SEND_CHUNK):
                send(chunk)
                sent += len(chunk)
        if sent != total:
            raise RuntimeError(f"a shipped tar changed size while it was sent ({sent} of {total} bytes)")
        return sent
    finally:
        for handle in handles:
            handle.close()
