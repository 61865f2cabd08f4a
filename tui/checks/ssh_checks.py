"""SSH: key authentication on every node, and the dataset/model reachable from every node.

The engine calls :func:`gather_ssh` once: a thread per node logs in with :func:`tui.ssh.connect`
(unknown host keys refused, with the ``ssh-keyscan`` hint), runs one ``test -e`` pass over the paths
the job needs, and closes. The two checks below only read those outcomes.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from shared.config import FtwizConfig, NodeConfig
from tui.checks.base import CheckContext, CheckResult, SshOutcome, check, result

HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
"""An HF hub model id (``org/name``); a relative directory of that shape is tried as a path first."""

# Prints 1/0 per path. $1 is the workdir; "hf:NAME" looks in the node's HF hub cache. Paths travel as
# separate, quoted argv words: the script never interpolates them into code.
_TEST_SCRIPT = r'''w=$1; shift
case "$w" in "~") w=$HOME;; "~/"*) w="$HOME/${w#??}";; esac
hub="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"
for p in "$@"; do
  case "$p" in
    hf:*) d="$hub/${p#hf:}";;
    "~") d=$HOME;;
    "~/"*) d="$HOME/${p#??}";;
    /*) d=$p;;
    *) d="$w/$p";;
  esac
  if [ -e "$d" ]; then echo 1; else echo 0; fi
done'''


def hf_cache_dir_name(model_id: str) -> str:
    """``org/name`` → ``models--org--name`` (the HF hub cache layout)."""
    return "models--" + model_id.replace("/", "--")


def _copy_hint(path: str, node: NodeConfig) -> str:
    """An rsync line that puts ``path`` where ``node`` will look for it."""
    remote = path if path.startswith(("/", "~")) else f"{node.workdir.rstrip('/')}/{path}"
    user = f"{node.ssh_user}@" if node.ssh_user else ""
    port = f"-e 'ssh -p {node.ssh_port}' " if node.ssh_port and node.ssh_port != 22 else ""
    remote = remote.rstrip("/")
    quoted = "~/" + shlex.quote(remote[2:]) if remote.startswith("~/") else shlex.quote(remote)
    return f"rsync -a {port}{shlex.quote(path.rstrip('/'))} {user}{node.host}:{quoted}"


def needed_paths(config: FtwizConfig) -> list[str]:
    """Paths every node must see, as configured (relative to the node's workdir)."""
    if config.job.workload != "sft":
        return []
    return [config.job.dataset, config.job.model]


def _local_test(node: NodeConfig, paths: list[str], hf_ids: list[str]) -> tuple[dict[str, bool], dict[str, bool]]:
    workdir = os.path.expanduser(node.workdir)
    found = {p: os.path.exists(os.path.join(workdir, os.path.expanduser(p))) for p in paths}
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
    cached = {m: os.path.isdir(os.path.join(hub, hf_cache_dir_name(m))) for m in hf_ids}
    return found, cached


def _probe_node(node: NodeConfig, config: FtwizConfig, timeout: float) -> SshOutcome:
    """Log in to ``node`` and test the job's paths (runs in a worker thread)."""
    paths = needed_paths(config)
    hf_ids = [p for p in paths[1:] if HF_ID.fullmatch(p)]
    if node.local:
        found, cached = _local_test(node, paths, hf_ids)
        return SshOutcome(node.name, ok=True, skipped="local node: no SSH needed", paths=found, hf_cache=cached)
    from tui import ssh  # paramiko (and cryptography) load only when a node needs SSH

    started = time.monotonic()
    try:
        client = ssh.connect(node, config.cluster, timeout=timeout)
    except ssh.SshError as exc:
        return SshOutcome(node.name, ok=False, error=exc)
    outcome = SshOutcome(node.name, ok=True, seconds=time.monotonic() - started)
    try:
        if paths:
            words = list(paths) + [f"hf:{hf_cache_dir_name(m)}" for m in hf_ids]
            res = ssh.run(client, ["sh", "-c", _TEST_SCRIPT, "sh", node.workdir, *words], timeout=timeout)
            flags = res.stdout.split()
            if res.exit_status != 0 or len(flags) != len(words):
                outcome.path_error = f"test script failed (exit {res.exit_status}): {res.stderr.strip()[:200]}"
            else:
                outcome.paths = {p: flags[i] == "1" for i, p in enumerate(paths)}
                outcome.hf_cache = {m: flags[len(paths) + i] == "1" for i, m in enumerate(hf_ids)}
    except (TimeoutError, OSError, Exception) as exc:  # any SSH channel failure is a row, not a crash
        outcome.path_error = f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return outcome


async def gather_ssh(config: FtwizConfig, *, timeout: Optional[float] = None) -> dict[str, SshOutcome]:
    """Log in to every node concurrently (one thread and one client per node)."""
    timeout = config.cluster.ssh_connect_timeout_s if timeout is None else timeout
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=min(32, len(config.nodes)), thread_name_prefix="ftwiz-ssh") as pool:
        outcomes = await asyncio.gather(*(loop.run_in_executor(pool, _probe_node, n, config, timeout) for n in config.nodes))
    return {o.node: o for o in outcomes}


@check("ssh.auth", "SSH key authentication", needs_ssh=True)
def ssh_auth(ctx: CheckContext) -> list[CheckResult]:
    """Per node: paramiko logged in with keys/agent and a known host key."""
    title = "SSH key authentication"
    rows = []
    for node in ctx.config.nodes:
        outcome = ctx.ssh.get(node.name)
        if outcome is None:
            rows.append(result("ssh.auth", title, "skip", node.name, "SSH not checked"))
        elif outcome.skipped:
            rows.append(result("ssh.auth", title, "skip" if not outcome.error else "fail", node.name, outcome.skipped))
        elif outcome.ok:
            took = f" in {outcome.seconds:.2f} s" if outcome.seconds is not None else ""
            rows.append(result("ssh.auth", title, "pass", node.name, f"logged in to {node.host}{took}"))
        else:
            err = outcome.error
            rows.append(result("ssh.auth", title, "fail", node.name, err.message if err else "failed", err.hint if err else ""))
    return rows


@check("data.reachable", "dataset and model reachable", needs_ssh=True)
def data_reachable(ctx: CheckContext) -> list[CheckResult]:
    """Per node: the dataset exists under the workdir; the model is a directory there or an HF id (cached or not)."""
    title = "dataset and model reachable"
    job = ctx.config.job
    if job.workload != "sft":
        return [result("data.reachable", title, "skip", None, f"workload {job.workload} needs no dataset or model")]
    rows = []
    for node in ctx.config.nodes:
        outcome = ctx.ssh.get(node.name)
        if outcome is None or (not outcome.ok and outcome.error is not None):
            rows.append(result("data.reachable", title, "skip", node.name, "no SSH session to look with",
                               "fix the ssh.auth row for this node first"))
            continue
        if outcome.path_error:
            rows.append(result("data.reachable", title, "skip", node.name, f"could not test paths: {outcome.path_error}"))
            continue
        if not outcome.paths.get(job.dataset, False):
            rows.append(result("data.reachable", title, "fail", node.name,
                               f"dataset {job.dataset} not found on {node.name} (relative to workdir {node.workdir})",
                               f"copy it there: {_copy_hint(job.dataset, node)}"))
        if outcome.paths.get(job.model, False):
            model_row = ("pass", f"dataset and model directory {job.model} present")
        elif HF_ID.fullmatch(job.model):
            if outcome.hf_cache.get(job.model, False):
                model_row = ("pass", f"model {job.model} in the node's HF cache")
            else:
                rows.append(result("data.reachable", title, "warn", node.name,
                                   f"model {job.model} is not in {node.name}'s HF cache: each node will download it at start",
                                   f"pre-download on {node.name}: huggingface-cli download {job.model} (or set HF_HOME to a shared cache)"))
                continue
        else:
            rows.append(result("data.reachable", title, "fail", node.name,
                               f"model directory {job.model} not found on {node.name} (relative to workdir {node.workdir})",
                               f"copy it there: {_copy_hint(job.model, node)}"))
            continue
        if not any(r.node == node.name and r.status == "fail" for r in rows):
            rows.append(result("data.reachable", title, "pass", node.name, model_row[1]))
    return rows
