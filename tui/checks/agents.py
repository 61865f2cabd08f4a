"""Agents: reachable and authorized on every node, equal versions, clocks in step."""

from __future__ import annotations

from collections import Counter

from shared.version import __version__
from tui.checks.base import CheckContext, CheckResult, Status, check, result

MAX_SKEW_S = 1.0
"""Largest clock difference between nodes that keeps logs, checkpoints and NCCL timeouts coherent."""


@check("agent.reachable", "agent reachable and authorized")
def agent_reachable(ctx: CheckContext) -> list[CheckResult]:
    """One row per node: up passes; down, unauthorized and incompatible fail with the client's fix."""
    rows = []
    for node in ctx.config.nodes:
        status = ctx.statuses[node.name]
        report = status.report
        if status.up and report is not None:
            rtt = f", {status.rtt_s * 1000:.0f} ms" if status.rtt_s is not None else ""
            rows.append(result("agent.reachable", "agent reachable and authorized", "pass", node.name,
                               f"{status.url} up (agent {report.agent_version}, host {report.hostname}{rtt})"))
        else:
            rows.append(result("agent.reachable", "agent reachable and authorized", "fail", node.name,
                               f"{status.state.value}: {status.message}", status.hint))
    return rows


@check("agent.version", "equal agent versions")
def agent_versions(ctx: CheckContext) -> list[CheckResult]:
    """Every agent runs the same ftwiz version, and the controller's: warn naming the odd node."""
    title = "equal agent versions"
    versions = {name: r.agent_version for name, r in ctx.reports.items()}
    if not versions:
        return [result("agent.version", title, "skip", None, "no agent is up")]
    counts = Counter(versions.values())
    common, _ = counts.most_common(1)[0]
    rows = []
    for name, version in versions.items():
        if version != common:
            others = ", ".join(n for n, v in versions.items() if v == common)
            rows.append(result("agent.version", title, "warn", name,
                               f"agent {version} on {name} vs {common} on {others}",
                               f"install ftwiz {__version__} on {name} and restart its agent"))
    if rows:
        return rows
    if common != __version__:
        return [result("agent.version", title, "warn", None,
                       f"every agent runs {common}, this ftwiz is {__version__}",
                       f"use the same version here and on the nodes: pip install ftwiz=={common}")]
    return [result("agent.version", title, "pass", None, f"ftwiz {common} on {len(versions)} node(s) and here")]


@check("clock.skew", "clock skew ≤ 1 s")
def clock_skew(ctx: CheckContext) -> list[CheckResult]:
    """Each agent's clock against the master's (both measured against ours, corrected by half the RTT)."""
    title = "clock skew ≤ 1 s"
    hint_ntp = "enable time sync on {node}: sudo timedatectl set-ntp true (or start chrony)"
    offsets = {name: s.clock_offset_s for name, s in ctx.statuses.items() if s.clock_offset_s is not None}
    master = ctx.master.name
    rows = []
    reference = offsets.get(master)
    for node in ctx.config.nodes:
        offset = offsets.get(node.name)
        if offset is None:
            rows.append(ctx.down_skip("clock.skew", title, node))
            continue
        if node.name == master or reference is None:
            status: Status = "pass" if abs(offset) <= MAX_SKEW_S else "warn"
            detail = f"{offset:+.3f} s vs this machine"
            hint = "" if status == "pass" else (
                f"this machine's clock or {node.name}'s is off: run `sudo timedatectl set-ntp true` on both "
                "(only log times are affected when the nodes agree among themselves)"
            )
            rows.append(result("clock.skew", title, status, node.name, detail, hint))
            continue
        skew = offset - reference
        status = "pass" if abs(skew) <= MAX_SKEW_S else "fail"
        rows.append(result("clock.skew", title, status, node.name,
                           f"{skew:+.3f} s vs master {master} ({offset:+.3f} s vs this machine)",
                           "" if status == "pass" else hint_ntp.format(node=node.name)))
    return rows
