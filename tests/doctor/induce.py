"""Induce real failures: torchrun "nodes" (one torchrun agent each, gloo, CPU) in a private network namespace.

Each scenario gets its own namespace (loopback only), so its ports, firewall rules and listeners touch
nothing else on the machine; several scenarios run at once. Every node's stdout and stderr go to
``<dir>/<node>.log`` as torchrun prints them (``[rankN]:`` prefixes), which is what ``ftwiz --why-log``
reads. The training script is ``tests/doctor/scripts/train.py``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

__all__ = ["SCRIPT", "Namespace", "NodeSpec", "netns_problem", "run_nodes"]

SCRIPT = Path(__file__).resolve().parent / "scripts" / "train.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def netns_problem() -> str | None:
    """None when private network namespaces (and nft) can be used here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 nftables)"
    return None


@dataclass
class NodeSpec:
    """One torchrun agent: its name (log file), process count, endpoint address, args and environment."""

    name: str
    nproc: int
    is_host: bool
    endpoint: str = "127.0.0.1"
    args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    rdzv_extra: str = ""


class Namespace:
    """A private network namespace with loopback up (and 127.0.0.2 on it); deleted on exit."""

    def __init__(self) -> None:
        self.name = f"ftwiz-dr-{secrets.token_hex(3)}"

    def __enter__(self) -> Self:
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", self.name, "addr", "add", "127.0.0.2/8", "dev", "lo"], check=False)
        return self

    def run(self, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.name, *argv], check=kw.pop("check", False), **kw)

    def popen(self, argv: Sequence[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *argv], **kw)

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "netns", "delete", self.name], check=False)


def run_nodes(ns: Namespace, logdir: Path, port: int, nodes: Sequence[NodeSpec], *, run_id: str, timeout: float = 150) -> dict[str, int]:
    """Start every node's torchrun in ``ns``, wait for all (killed after ``timeout`` s); exit codes by node."""
    logdir.mkdir(parents=True, exist_ok=True)
    nnodes = len(nodes)
    procs: dict[str, subprocess.Popen] = {}
    handles = []
    for node in nodes:
        conf = f"is_host={'true' if node.is_host else 'false'}" + (f",{node.rdzv_extra}" if node.rdzv_extra else "")
        argv = [*TORCHRUN, f"--nnodes={nnodes}", f"--nproc-per-node={node.nproc}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={node.endpoint}:{port}", f"--rdzv-id={run_id}", f"--rdzv-conf={conf}",
                "--max-restarts=0", str(SCRIPT), *node.args]
        env = {**os.environ, "OMP_NUM_THREADS": "1", **node.env}
        log = open(logdir / f"{node.name}.log", "wb")
        handles.append(log)
        procs[node.name] = ns.popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    codes: dict[str, int] = {}
    try:
        for name, proc in procs.items():
            try:
                codes[name] = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                codes[name] = proc.wait(10)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(10)
        for log in handles:
            log.close()
    return codes
