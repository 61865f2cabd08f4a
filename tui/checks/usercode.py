"""Your own code (``workload = "command"``): its packages on every node, and the command's script.

``job.requires``: every ``[job].requires`` entry is looked up in each node's training interpreter
(``importlib.metadata``, nothing imported) over SSH. Missing, or a version outside the requirement's
specifier → fail with the ``pip install`` line for that node; versions differing between nodes → warn
(torch, CUDA and NCCL parity stay ``env.parity``'s, a fail). ``job.code``: the code dir can be shipped
(exists, under the size cap) and holds the command's script; with ``code_dir = ""`` the node probe
looks for the script (or ``-m`` module) from the node's workdir instead.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import re
import shlex
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from shared.config import FtwizConfig, NodeConfig
from tui.checks.base import CheckContext, CheckResult, check, result
from tui.codeship import CodeDirError, collect_code, resolve_code_dir
from tui.jobshape import selected_gpus

__all__ = ["NodeProbe", "probe_node", "requirement_name"]

# Runs in the node's training interpreter: argv = workdir, "script"|"module", target, then distribution names.
# Prints one JSON object: {"versions": {name: version|null}, "target": true|false|null}.
_PROBE = r'''
import importlib.metadata as m, importlib.util as u, json, os, sys
workdir, kind, target, names = os.path.expanduser(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
found = None
if kind == "script":
    found = os.path.isfile(os.path.join(workdir, os.path.expanduser(target)))
elif kind == "module":
    sys.path.insert(0, workdir)
    try:
        found = u.find_spec(target) is not None
    except (ImportError, ValueError):
        found = False
print("FTWIZ-USERCODE:" + json.dumps({"versions": {n: version(n) for n in names}, "target": found}))
'''
_MARKER = "FTWIZ-USERCODE:"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def requirement_name(requirement: str) -> str:
    """``"trl>=0.20"`` → ``"trl"``; ``"transformers[torch]"`` → ``"transformers"``."""
    match = _NAME.match(requirement.strip())
    return match.group(0) if match else requirement.strip()


class NodeProbe:
    """What one node's training interpreter said (or why it could not be asked)."""

    def __init__(self, node: str, *, versions: Optional[dict[str, Optional[str]]] = None, target: Optional[bool] = None,
                 error: Optional[str] = None) -> None:
        self.node, self.versions, self.target, self.error = node, versions or {}, target, error


def _target(config: FtwizConfig) -> tuple[str, str]:
    """What to look for on the node: ("script", path) or ("module", name); ("none", "") when shipped."""
    job = config.job
    if job.code_dir != "" or not job.command:
        return "none", ""
    if job.command[0] == "-m":
        return "module", job.command[1]
    return "script", job.command[0]


def probe_node(node: NodeConfig, config: FtwizConfig, timeout: float) -> NodeProbe:
    """Ask ``node``'s training interpreter for the required packages' versions (runs in a worker thread)."""
    kind, target = _target(config)
    argv = [node.python, "-c", _PROBE, node.workdir, kind, target, *(requirement_name(r) for r in config.job.requires)]
    try:
        if node.local:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
            stdout, code, stderr = done.stdout, done.returncode, done.stderr
        else:
            from tui import ssh  # paramiko loads only when a node needs SSH

            client = ssh.connect(node, config.cluster, timeout=config.cluster.ssh_connect_timeout_s)
            try:
                res = ssh.run(client, argv, timeout=timeout)
            finally:
                client.close()
            stdout, code, stderr = res.stdout, res.exit_status, res.stderr
    except Exception as exc:
        return NodeProbe(node.name, error=f"{type(exc).__name__}: {exc}")
    line = next((text for text in stdout.splitlines() if text.startswith(_MARKER)), None)
    if code != 0 or line is None:
        return NodeProbe(node.name, error=f"{node.python} exited {code}: {stderr.strip()[-300:] or 'no output'}")
    data = json.loads(line[len(_MARKER):])
    return NodeProbe(node.name, versions=data.get("versions") or {}, target=data.get("target"))


@check("job.requires", "your code's packages on every node", needs_ssh=True)
async def job_requires(ctx: CheckContext) -> list[CheckResult]:
    """Per node: each ``[job].requires`` installed and satisfying its version; across nodes: equal versions."""
    title = "your code's packages on every node"
    config = ctx.config
    if config.job.workload != "command":
        return []
    if not config.job.requires and _target(config)[0] == "none":
        return [result("job.requires", title, "pass", None, "[job].requires is empty: nothing to check",
                       'list what your code imports in [job].requires, e.g. requires = ["trl>=0.20", "transformers"]')]
    nodes = [n for n in config.nodes if n.local or (ctx.ssh.get(n.name) is not None and ctx.ssh[n.name].ok)]
    rows = [result("job.requires", title, "skip", n.name, "no SSH login to this node", "see the ssh.auth row")
            for n in config.nodes if n not in nodes]
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(nodes))), thread_name_prefix="ftwiz-requires") as pool:
        probes = await asyncio.gather(*(loop.run_in_executor(pool, probe_node, n, config, 30.0) for n in nodes))
    return rows + judge(config, list(probes))


def judge(config: FtwizConfig, probes: list[NodeProbe]) -> list[CheckResult]:
    """Rows from the nodes' answers (pure: the unit tests feed it answers)."""
    title = "your code's packages on every node"
    rows: list[CheckResult] = []
    kind, target = _target(config)
    for probe in probes:
        node = config.node(probe.node)
        if probe.error:
            rows.append(result("job.requires", title, "fail", probe.node, f"could not ask the training interpreter: {probe.error}",
                               f"check python = {node.python} for {probe.node} (test: ssh {node.host} {shlex.quote(node.python)} -V)"))
            continue
        problems, hints = [], []
        for requirement in config.job.requires:
            name = requirement_name(requirement)
            have = probe.versions.get(name)
            if have is None:
                problems.append(f"{name} missing")
                hints.append(requirement)
            elif not _satisfies(requirement, have):
                problems.append(f"{name} {have} does not satisfy {requirement}")
                hints.append(requirement)
        if kind != "none" and probe.target is False:
            where = os.path.join(node.workdir, target) if kind == "script" else f"importable from {node.workdir}"
            problems.append(f"{'script' if kind == 'script' else 'module'} {target} not found ({where})")
        if problems:
            pip = f"on {probe.node}: {shlex.quote(node.python)} -m pip install {' '.join(shlex.quote(h) for h in hints)}" if hints else ""
            fix = pip or f'put the code on {probe.node} under {node.workdir}, or ship it with code_dir = "."'
            rows.append(result("job.requires", title, "fail", probe.node, "; ".join(problems), fix))
    rows += _parity(config, probes)
    if not any(r.status in ("fail", "warn") for r in rows) and probes:
        found = ", ".join(f"{requirement_name(r)} {probes[0].versions.get(requirement_name(r))}" for r in config.job.requires)
        rows.append(result("job.requires", title, "pass", None, f"{found or 'the command'} on {', '.join(p.node for p in probes)}"))
    return rows


def _parity(config: FtwizConfig, probes: list[NodeProbe]) -> list[CheckResult]:
    rows = []
    for requirement in config.job.requires:
        name = requirement_name(requirement)
        values = {p.node: p.versions.get(name) for p in probes if not p.error and p.versions.get(name)}
        counts = Counter(values.values())
        if len(counts) < 2:
            continue
        reference = values.get(config.master.name) or counts.most_common(1)[0][0]
        holders = ", ".join(n for n, v in values.items() if v == reference)
        for node_name, value in values.items():
            if value != reference:
                python = shlex.quote(config.node(node_name).python)
                rows.append(result("job.requires", "your code's packages on every node", "warn", node_name,
                                   f"{name} {value} on {node_name} vs {reference} on {holders}",
                                   f"on {node_name}: {python} -m pip install {name}=={reference}"))
    return rows


def _satisfies(requirement: str, version: str) -> bool:
    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion
    except ImportError:  # without packaging, presence is all we can say
        return True
    try:
        return Requirement(requirement).specifier.contains(version, prereleases=True)
    except (InvalidRequirement, InvalidVersion):
        return True


@check("job.code", "your code ready to ship")
def job_code(ctx: CheckContext) -> list[CheckResult]:
    """The code dir exists, is under the size cap, and holds the command's script."""
    title = "your code ready to ship"
    job = ctx.config.job
    if job.workload != "command":
        return []
    if job.code_dir == "":
        return [result("job.code", title, "pass", None, 'code_dir = "": the code is already on every node (job.requires checks the script there)')]
    config_dir = ctx.option("config_dir", None)
    root = resolve_code_dir(job.code_dir, config_dir)
    try:
        bundle = collect_code(root)
    except CodeDirError as exc:
        return [result("job.code", title, "fail", None, str(exc).split(". Fix: ")[0], _fix(str(exc)))]
    detail = f"{len(bundle.manifest)} file(s), {bundle.total_bytes / 1e6:.1f} MB from {root} (sha256 {bundle.sha256[:12]})"
    if job.command and job.command[0] != "-m":
        script = os.path.normpath(job.command[0])
        if script not in bundle.paths:
            close = difflib.get_close_matches(script, [f for f in bundle.paths if f.endswith(".py")], n=1)
            guess = f"did you mean {close[0]}? " if close else ""
            return [result("job.code", title, "fail", None, f"{job.command[0]} is not in the shipped code ({root})",
                           guess + "fix [job].command (paths resolve inside code_dir) or code_dir, or un-ignore the script")]
        nccl = nccl_without_gpu(ctx, _head(root / script), job.command)
        if nccl is not None:
            return [result("job.code", title, "pass", None, detail), nccl]
    return [result("job.code", title, "pass", None, detail)]


#: A backend literal in the script: ``init_process_group("nccl")``, ``backend = 'nccl'``.
_NCCL_LITERAL = re.compile(rb"""["']nccl["']""")
_GLOO_LITERAL = re.compile(rb"\bgloo\b")


def nccl_without_gpu(ctx: CheckContext, source: bytes, command: list[str]) -> Optional[CheckResult]:
    """A warn row when the script names NCCL as its backend and some node runs CPU ranks (NCCL needs a
    GPU: "Distributed package doesn't have NCCL built in" on a CPU torch). None when the script also names
    gloo (it chooses), the command passes gloo, or every node runs on GPUs."""
    if not _NCCL_LITERAL.search(source) or _GLOO_LITERAL.search(source) or any("gloo" in arg for arg in command):
        return None
    cpu_nodes = [n.name for n in ctx.config.nodes if n.cpu_ranks is not None
                 or (ctx.report(n) is not None and not selected_gpus(n, ctx.report(n)))]
    if not cpu_nodes:
        return None
    line = next(i for i, text in enumerate(source.splitlines(), 1) if _NCCL_LITERAL.search(text))
    takes_flag = b"--backend" in source or b"backend =" in source or b"backend=" in source
    flag = 'pass "--backend=gloo" in [job].command (your script reads a backend setting), or ' if takes_flag else ""
    return result("job.code", "your code ready to ship", "warn", None,
                  f"{command[0]}:{line} asks for the NCCL backend, but {', '.join(cpu_nodes)} run(s) CPU ranks (no GPU): "
                  "NCCL needs a GPU (\"Distributed package doesn't have NCCL built in\")",
                  flag + 'choose gloo on CPU in the script: dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")')


def _head(path: Path, limit: int = 1 << 20) -> bytes:
    """The first ``limit`` bytes of a shipped script (what the NCCL-on-CPU check reads); empty when unreadable."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def _fix(message: str) -> str:
    return message.split(". Fix: ", 1)[1] if ". Fix: " in message else 'set [job].code_dir to your code, or code_dir = ""'


def options_for(config_path: Optional[str]) -> dict[str, Any]:
    """Checklist options that make ``code_dir`` resolve against ftwiz.toml's directory."""
    return {"config_dir": os.path.dirname(os.path.abspath(config_path))} if config_path else {}
