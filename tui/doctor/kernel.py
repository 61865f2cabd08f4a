"""Asking the nodes' agents for the kernel's OOM-kill record of a pid (``GET /v1/kernel/oom/{pid}``)."""

from __future__ import annotations

import asyncio
from typing import Any

from .diagnose import KernelLookup

__all__ = ["agent_kernel_lookup"]


def agent_kernel_lookup(config: Any) -> KernelLookup:
    """A :data:`KernelLookup` over ``config``'s agents; raises OSError when the node's agent cannot answer or
    cannot read its kernel log (then nothing is concluded)."""
    names = {n.name for n in config.nodes}

    def lookup(node: str | None, pid: int, at: float | None) -> str | None:
        if node is None or node not in names:
            raise OSError(f"node {node!r} is not in the config, so its agent cannot be asked")
        from tui.client import AgentClient

        async def call() -> Any:
            async with AgentClient(config) as client:
                return await client.kernel_oom(node, pid, at)

        try:
            reply = asyncio.run(call())
        except Exception as exc:
            raise OSError(f"{node}'s agent could not be asked: {type(exc).__name__}: {exc}") from None
        value = getattr(reply, "value", None)
        if value is None:
            raise OSError(f"{node}'s agent: {reply.error or 'no answer'}")
        if value.error:
            raise OSError(value.error)
        return value.line if value.found else None

    return lookup
