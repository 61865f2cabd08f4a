"""Software: the training interpreter's versions agree across nodes, and the job's packages exist.

torch, its CUDA build, NCCL and Python must match on every node — a mismatch hangs at the first
collective (NVIDIA/nccl#286, huggingface/accelerate#412, pytorch#122571) — so a mismatch fails. A driver
mismatch and transformers/peft/bitsandbytes/accelerate mismatches warn.
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Callable, Optional

from shared.config import FtwizConfig
from shared.models import NodeReport
from tui.checks.base import CheckContext, CheckResult, Status, check, result

_NOT_INSTALLED = "not installed"


def required_packages(config: FtwizConfig) -> list[str]:
    """Packages the job imports on every node."""
    job = config.job
    if job.workload in ("allreduce", "command"):
        return ["torch"]  # your own code's packages: [job].requires, checked by job.requires
    needed = ["torch", "transformers", "peft"]
    if job.method == "qlora" or job.optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        needed.append("bitsandbytes")
    return needed


def _pip_hint(package: str, version: Optional[str], python: str, node: str) -> str:
    spec = f"{package}=={version}" if version and version != _NOT_INSTALLED else package
    if package == "torch" and version and "+" in version:
        spec += "  (same build: use the same --index-url as on the other nodes)"
    return f"on {node}: {shlex.quote(python)} -m pip install {spec}"


# (label, how to read it from a report, status on mismatch, pip package to reinstall or None)
_COMPONENTS: list[tuple[str, Callable[[NodeReport], Optional[str]], Status, Optional[str]]] = [
    ("Python", lambda r: r.software.python if r.software else None, "fail", None),
    ("torch", lambda r: r.software.torch if r.software else None, "fail", "torch"),
    ("torch CUDA build", lambda r: (r.software.torch_cuda or "cpu") if r.software and r.software.torch else None, "fail", "torch"),
    ("NCCL", lambda r: (r.software.nccl or "none") if r.software and r.software.torch else None, "fail", "torch"),
    ("NVIDIA driver", lambda r: r.driver_version if r.gpus else None, "warn", None),
    ("transformers", lambda r: r.software.transformers if r.software else None, "warn", "transformers"),
    ("peft", lambda r: r.software.peft if r.software else None, "warn", "peft"),
    ("bitsandbytes", lambda r: r.software.bitsandbytes if r.software else None, "warn", "bitsandbytes"),
    ("accelerate", lambda r: r.software.accelerate if r.software else None, "warn", "accelerate"),
]


@check("env.parity", "software versions equal on every node")
def env_parity(ctx: CheckContext) -> list[CheckResult]:
    """Compare each component across the nodes that report it; name the odd node and both versions."""
    title = "software versions equal on every node"
    rows: list[CheckResult] = []
    reports = {}
    for node in ctx.config.nodes:
        report = ctx.report(node)
        if report is None:
            continue
        if report.software is None or report.software.error:
            why = report.software.error if report.software else "the agent has not probed the training interpreter yet"
            rows.append(result("env.parity", title, "skip", node.name, f"left out of the comparison: {why}",
                               "see the env.packages row for this node"))
            continue
        reports[node.name] = report
    if len(reports) < 2:
        if rows:
            return rows
        detail = "one node: nothing to compare" if ctx.single_node else "fewer than two nodes up: nothing to compare"
        return [result("env.parity", title, "skip" if not ctx.single_node else "pass", None, detail)]
    same: list[str] = []
    for label, read, severity, package in _COMPONENTS:
        values = {name: read(r) for name, r in reports.items()}
        values = {n: v for n, v in values.items() if v is not None}
        if len(values) < 2:
            continue
        counts = Counter(values.values())
        if len(counts) == 1:
            same.append(f"{label} {next(iter(counts))}")
            continue
        master_value = values.get(ctx.master.name)
        top = max(counts.values())
        leaders = [v for v, c in counts.items() if c == top]
        reference = master_value if master_value in leaders else leaders[0]
        holders = ", ".join(n for n, v in values.items() if v == reference)
        for name, value in values.items():
            if value == reference:
                continue
            python = ctx.config.node(name).python
            hint = (_pip_hint(package, reference, python, name) if package
                    else f"install {label} {reference} on {name} (same as {holders})")
            rows.append(result("env.parity", title, severity, name, f"{label} {value} on {name} vs {reference} on {holders}", hint))
    if not any(r.status != "skip" for r in rows):
        rows.append(result("env.parity", title, "pass", None, "; ".join(same) + f" equal on {', '.join(reports)}"))
    return rows


@check("env.packages", "job's packages installed")
def env_packages(ctx: CheckContext) -> list[CheckResult]:
    """Per node: the training interpreter runs, is the one configured, and has the job's packages."""
    title = "job's packages installed"
    needed = required_packages(ctx.config)
    rows = []
    for node in ctx.config.nodes:
        report = ctx.report(node)
        if report is None:
            rows.append(ctx.down_skip("env.packages", title, node))
            continue
        sw = report.software
        if sw is None:
            rows.append(result("env.packages", title, "skip", node.name, "the agent has not probed the training interpreter yet",
                               "run the check again in a few seconds"))
            continue
        if sw.error:
            rows.append(result("env.packages", title, "fail", node.name, f"training interpreter {sw.python_executable}: {sw.error}",
                               f"set python for {node.name} in ftwiz.toml to a working interpreter (test: ssh {node.host} {shlex.quote(node.python)} -V)"))
            continue
        if sw.python_executable != node.python:
            rows.append(result("env.packages", title, "warn", node.name,
                               f"the agent probes {sw.python_executable}, but ftwiz.toml says python = {node.python}",
                               f"restart the agent on {node.name} with --python {shlex.quote(node.python)}"))
        missing = [p for p in needed if getattr(sw, p, None) is None]
        if missing:
            what = f"{ctx.config.job.workload}" + (f" ({ctx.config.job.method})" if ctx.config.job.workload == "sft" else "")
            rows.append(result("env.packages", title, "fail", node.name,
                               f"{', '.join(missing)} missing in {sw.python_executable} ({what} needs {', '.join(needed)})",
                               f"on {node.name}: {shlex.quote(sw.python_executable)} -m pip install {' '.join(missing)}"))
        else:
            found = ", ".join(f"{p} {getattr(sw, p)}" for p in needed)
            rows.append(result("env.packages", title, "pass", node.name, f"{found} (Python {sw.python})"))
    return rows
