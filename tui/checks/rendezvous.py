"""Rendezvous port: free on the master, and reachable from every other node (the firewall test).

``RendezvousConnectionError`` after the 60 s store timeout, although ping works, is the classic symptom
of a blocked port (pytorch#107021, NVIDIA/nccl#375); the maintainers' advice is to test the port with a
listener. So the master's agent listens on the port for a few seconds while every other node's agent
connects to it.
"""

from __future__ import annotations

import asyncio
import time

from tui.checks.base import CheckContext, CheckResult, check, result


def _open_hint(port: int, node: str) -> str:
    return (
        f"open TCP {port} on {node}: sudo ufw allow {port}/tcp  (nftables: sudo nft add rule inet filter input tcp dport {port} accept; "
        f"iptables: sudo iptables -I INPUT -p tcp --dport {port} -j ACCEPT)"
    )


@check("rendezvous", "rendezvous port free on the master and reachable from every node")
async def rendezvous(ctx: CheckContext) -> list[CheckResult]:
    """``rendezvous.port_free`` on the master, then ``rendezvous.reachable`` per other node."""
    port = ctx.config.cluster.rendezvous_port
    master = ctx.master
    free_title = f"rendezvous port {port} free on the master"
    reach_title = f"rendezvous port {port} reachable from every node"
    others = [n for n in ctx.config.nodes if n.name != master.name]
    if ctx.report(master) is None:
        rows = [ctx.down_skip("rendezvous.port_free", free_title, master)]
        return rows + [ctx.down_skip("rendezvous.reachable", reach_title, master) for _ in others[:1]]
    timeout = float(ctx.option("connect_timeout_s", 3.0))
    # Long enough for every connect probe, short enough not to hold the port when a launch follows.
    ttl = float(ctx.option("listen_ttl_s", timeout + 3.0))
    listen = await ctx.client.probe_listen(master, port, ttl)
    if listen.status_code == 409:
        return [result("rendezvous.port_free", free_title, "fail", master.name,
                       f"port {port} is in use on {master.name}: torchrun could not start its store there",
                       f"find the holder on {master.name}: sudo ss -ltnp 'sport = :{port}' — stop it (a leftover torchrun?) "
                       f"or set [cluster] rendezvous_port to a free port")]
    if listen.value is None:
        return [result("rendezvous.port_free", free_title, "fail" if listen.state.value == "up" else "skip", master.name,
                       f"listen probe failed: {listen.error}", listen.hint)]
    ctx.notes["rendezvous_listener_until"] = listen.value.expires_at
    try:
        answers = await _connect_all(ctx, others, port, timeout, ttl, listen.value.expires_at)
    finally:
        # Free the port now rather than at the listener's expiry, so a launch right after need not wait.
        closed = await ctx.client.probe_unlisten(master, port)
        if closed.ok:
            ctx.notes["rendezvous_listener_until"] = None
    held = ("closed after the test" if closed.ok else
            f"closes in {max(0.0, ctx.notes['rendezvous_listener_until'] - time.time()):.0f} s")
    rows = [result("rendezvous.port_free", free_title, "pass", master.name, f"{master.name}'s agent bound {port} (test listener, {held})")]
    for node, reply in answers:
        rows.append(_reach_row(ctx, node, reply, reach_title, port))
    return rows


async def _connect_all(ctx: CheckContext, others: list, port: int, timeout: float, ttl: float, expires_at: float) -> list:
    """``(node, connect reply or None when its agent is down)`` for every node but the master."""
    master = ctx.master

    async def probe(node):
        if ctx.report(node) is None:
            return node, None
        return node, await ctx.client.probe_connect(node, master.host, port, timeout)

    answers = await asyncio.gather(*(probe(n) for n in others))
    # A busy node may dial after the short-lived test listener has closed: re-arm it once for those.
    expired = [n for n, reply in answers if reply is not None and reply.value is not None and not reply.value.reachable
               and time.time() >= expires_at - 0.5]
    if expired:
        again = await ctx.client.probe_listen(master, port, ttl)
        if again.value is not None:
            ctx.notes["rendezvous_listener_until"] = again.value.expires_at
            retried = {n.name: reply for n, reply in await asyncio.gather(*(probe(n) for n in expired))}
            answers = [(n, retried.get(n.name, reply)) for n, reply in answers]
    return answers


def _reach_row(ctx: CheckContext, node, reply, title: str, port: int) -> CheckResult:
    master = ctx.master
    if reply is None:
        return ctx.down_skip("rendezvous.reachable", title, node)
    if not reply.ok:
        return result("rendezvous.reachable", title, "skip", node.name, f"probe failed: {reply.error}", reply.hint)
    if reply.value.reachable:
        return result("rendezvous.reachable", title, "pass", node.name,
                      f"{node.name} → {master.host}:{port} connected in {reply.value.latency_ms or 0:.2f} ms")
    return result("rendezvous.reachable", title, "fail", node.name,
                  f"{node.name} cannot connect to {master.host}:{port} ({reply.value.error}): the rendezvous would time out "
                  "with RendezvousConnectionError",
                  _open_hint(port, master.name))
