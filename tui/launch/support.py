"""Small helpers of the supervisor: the workloads package, the network plan, an agent's stop, messages."""

from __future__ import annotations

import asyncio
from typing import Any, Mapping, Optional

from shared.config import FtwizConfig
from tui.launch.nodecode import package_dir, package_files
from tui.launch.plan import WORKLOAD_PACKAGE

__all__ = ["SHIPPED_SHARED", "agent_stop", "explain", "plan_network", "workload_files"]

#: The ``shared`` modules the workloads import on a node (standard library only: a test checks it), shipped under their
#: own names beside the ``ftwiz_workloads`` package, so the workloads import them as ``shared.*`` there as here.
SHIPPED_SHARED = ("shared/__init__.py", "shared/balanceplan.py", "shared/codepaths.py", "shared/nodewire.py", "shared/protocol.py")


def workload_files() -> dict[str, bytes]:
    """The ``agent/workloads`` package as ``ftwiz_workloads/...`` files (no caches), found as the node helper is
    (:func:`tui.launch.nodecode.package_files`), without importing the agent daemon, and the ``shared`` modules it
    imports (:data:`SHIPPED_SHARED`) under their own paths."""
    found = package_files("agent.workloads", (".py", ".json", ".jinja", ".txt"))
    files = {f"{WORKLOAD_PACKAGE}/{name}": data for name, data in found.items()}
    for path in SHIPPED_SHARED:
        source = package_dir("shared") / path.split("/", 1)[1]
        if not source.is_file():
            raise RuntimeError(f"{source} is missing: the shared package is not installed beside ftwiz")
        files[path] = source.read_bytes()
    if f"{WORKLOAD_PACKAGE}/__main__.py" not in files:
        raise RuntimeError(f"the workloads package at {package_dir('agent.workloads')} has no __main__.py")
    return files


def plan_network(config: FtwizConfig, reports: Mapping[str, Any]) -> Optional[dict[str, dict[str, str]]]:
    """The network plan's per-node environment from the agents' reports (None without reports).

    A node the plan has no interface for falls back, on the node, to the interface that routes to
    the master (see :func:`tui.launch.plan.start_script`).
    """
    if not reports:
        return None
    try:
        from shared.netplan import node_env

        return node_env(config, reports)
    except Exception:  # a plan that cannot be made is the checklist's to report, not a reason not to start
        return None


def agent_stop(config: FtwizConfig, node: str, run_id: str) -> Optional[dict]:
    """Ask ``node``'s agent to kill the run's processes; the report as the SSH helper's shape, or None."""
    from tui.client import AgentClient

    async def call() -> Any:
        async with AgentClient(config) as client:
            return await client.stop_run(node, run_id)

    try:
        reply = asyncio.run(call())
    except Exception:
        return None
    value = getattr(reply, "value", None) or getattr(reply, "result", None)
    if not getattr(reply, "ok", False) or value is None:
        return None
    return {
        "killed": [k.model_dump() for k in value.killed],
        "remaining": list(value.remaining),
        "via": "agent",
    }


def explain(exc: BaseException) -> str:
    """A one-line message with the fix, from whatever a node operation raised."""
    message = getattr(exc, "message", None)
    hint = getattr(exc, "hint", None)
    if message and hint:
        return f"{message} — fix: {hint}"
    if isinstance(exc, TimeoutError):
        return f"timed out ({exc or 'no answer'})"
    return str(exc) or type(exc).__name__
