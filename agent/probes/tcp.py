"""TCP reachability probes run *from* this node: connect to a peer, or hold a listener for one.

``connect`` answers whether a peer's port accepts connections from here. ``ListenerRegistry``
keeps temporary listeners so peers can test a rendezvous port before torchrun binds it.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from shared.models import ConnectProbeResult, ListenProbeResult

from ..settings import IpNetwork

__all__ = ["connect", "connect_many", "CONNECT_MANY_BUDGET_S", "CONNECT_MANY_PARALLEL", "target_refusal", "ListenerRegistry", "ListenError", "MAX_LISTENERS"]

CONNECT_MANY_PARALLEL = 16
"""Targets a batch connect probes at once: enough that 63 peers take a few round trips, few enough that
a 64-node mesh (64 agents probing at once) never holds thousands of half-open sockets."""
CONNECT_MANY_BUDGET_S = 20.0
"""A batch starts no connect after this long (a try already running still ends within its timeout), so one
request holds the agent at most this plus one timeout however many targets drop packets."""
MAX_LISTENERS = 16
"""Temporary listeners one agent holds at once; more would let a caller exhaust descriptors."""


def target_refusal(host: str, allow: Sequence[IpNetwork]) -> Optional[str]:
    """Why ``host`` may not be probed under ``--probe-allow``, or ``None`` when it may."""
    if not allow:
        return None
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return f"{host!r} is not an IP address; this agent runs with --probe-allow and probes only addresses inside it"
    if not any(address in network for network in allow if network.version == address.version):
        networks = ", ".join(str(network) for network in allow)
        return f"{address} is outside --probe-allow ({networks}); this agent does not probe it"
    return None


async def connect(host: str, port: int, timeout_s: float, *, allow: Sequence[IpNetwork] = ()) -> ConnectProbeResult:
    """Open (and close) one TCP connection; failures are values, never exceptions."""
    refusal = target_refusal(host, allow)
    if refusal:
        return ConnectProbeResult(host=host, port=port, reachable=False, error=refusal)
    deadline = time.monotonic() + timeout_s
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s)
    except asyncio.TimeoutError:
        return ConnectProbeResult(host=host, port=port, reachable=False, error=f"resolving {host!r} took longer than {timeout_s:g} s")
    except (OSError, UnicodeError, ValueError) as error:
        return ConnectProbeResult(host=host, port=port, reachable=False, error=f"cannot resolve {host!r}: {_reason(error)}")
    family, _, _, _, sockaddr = infos[0]
    resolved = str(sockaddr[0])  # the address (getaddrinfo types the tuple loosely)
    started = time.perf_counter()
    try:
        remaining = max(0.001, deadline - time.monotonic())
        _, writer = await asyncio.wait_for(asyncio.open_connection(resolved, port, family=family), remaining)
    except asyncio.TimeoutError:
        return ConnectProbeResult(
            host=host, port=port, reachable=False, resolved=resolved,
            error=f"no answer from {resolved}:{port} within {timeout_s:g} s (a firewall dropping packets?)",
        )
    except OSError as error:
        return ConnectProbeResult(host=host, port=port, reachable=False, resolved=resolved, error=_connect_error(error, resolved, port))
    latency_ms = (time.perf_counter() - started) * 1000.0
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    except (OSError, asyncio.TimeoutError):
        pass
    return ConnectProbeResult(host=host, port=port, reachable=True, latency_ms=round(latency_ms, 3), resolved=resolved)


async def connect_many(targets: Sequence[tuple[str, int]], tries: int, timeout_s: float, *,
                       allow: Sequence[IpNetwork] = ()) -> list[ConnectProbeResult]:
    """:func:`connect` to every target, ``tries`` times each in sequence, :data:`CONNECT_MANY_PARALLEL` targets
    at once; per target the best answered try counts (a try that timed out is tried again: on a busy host
    a handshake can miss one timeout), a refusal or a refused target ends its tries. Order as given."""
    gate = asyncio.Semaphore(CONNECT_MANY_PARALLEL)
    deadline = time.monotonic() + CONNECT_MANY_BUDGET_S

    async def one(host: str, port: int) -> ConnectProbeResult:
        best: Optional[ConnectProbeResult] = None
        failed: Optional[ConnectProbeResult] = None
        async with gate:
            for _ in range(tries):
                if time.monotonic() > deadline:
                    break
                reply = await connect(host, port, timeout_s, allow=allow)
                if not reply.reachable:
                    failed = reply
                    if "no answer" not in (reply.error or ""):
                        break  # refused, unresolvable or outside --probe-allow: trying again changes nothing
                elif best is None or (reply.latency_ms or 0.0) < (best.latency_ms or 0.0):
                    best = reply
        return best or failed or ConnectProbeResult(
            host=host, port=port, reachable=False,
            error=f"not tried: the batch ran past {CONNECT_MANY_BUDGET_S:g} s (too many targets timing out)")

    return list(await asyncio.gather(*(one(host, port) for host, port in targets)))


class ListenError(Exception):
    """A listener could not be opened; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class _Listener:
    server: asyncio.AbstractServer
    expires_at: float
    accepted: int = 0


class ListenerRegistry:
    """Temporary TCP listeners on all IPv4 addresses, each closed after its time to live."""

    def __init__(self, *, node_name: str, max_listeners: int = MAX_LISTENERS) -> None:
        self.node_name = node_name
        self.max_listeners = max_listeners
        self._listeners: dict[int, _Listener] = {}
        self._lock = asyncio.Lock()

    async def listen(self, port: int, ttl_s: float) -> ListenProbeResult:
        """Hold ``port`` for ``ttl_s`` seconds; a repeat call reports the listener already held."""
        async with self._lock:
            existing = self._listeners.get(port)
            if existing is not None:
                return ListenProbeResult(port=port, listening=True, expires_at=existing.expires_at, accepted=existing.accepted)
            if len(self._listeners) >= self.max_listeners:
                raise ListenError(429, f"this agent already holds {self.max_listeners} test listeners; wait for them to expire")
            listener = _Listener(server=None, expires_at=time.time() + ttl_s)  # type: ignore[arg-type]

            def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                listener.accepted += 1
                writer.close()

            try:
                listener.server = await asyncio.start_server(accepted, host="0.0.0.0", port=port)
            except OSError as error:
                raise ListenError(409, self._bind_error(error, port)) from None
            self._listeners[port] = listener
            asyncio.get_running_loop().call_later(ttl_s, self._expire, port, listener)
            return ListenProbeResult(port=port, listening=True, expires_at=listener.expires_at, accepted=0)

    async def close(self, port: int) -> ListenProbeResult:
        """Close the listener held on ``port`` before its time to live; :class:`ListenError` 404 if none is."""
        async with self._lock:
            listener = self._listeners.pop(port, None)
            if listener is None:
                raise ListenError(404, f"this agent holds no test listener on port {port} (never opened, or already expired)")
            listener.server.close()
            await listener.server.wait_closed()
            return ListenProbeResult(port=port, listening=False, expires_at=time.time(), accepted=listener.accepted)

    def close_all(self) -> None:
        """Close every listener (agent shutdown)."""
        for listener in self._listeners.values():
            listener.server.close()
        self._listeners.clear()

    def _expire(self, port: int, listener: _Listener) -> None:
        if self._listeners.get(port) is listener:
            del self._listeners[port]
        listener.server.close()

    def _bind_error(self, error: OSError, port: int) -> str:
        if error.errno == errno.EADDRINUSE:
            return (
                f"port {port} is already in use on node {self.node_name}: another process listens there, so torchrun "
                f"could not bind it either; find it with `ss -ltnp 'sport = :{port}'` or choose another rendezvous_port"
            )
        if error.errno == errno.EACCES:
            return f"port {port} needs privileges the agent on {self.node_name} lacks; use a port above 1023"
        return f"cannot listen on port {port} on node {self.node_name}: {_reason(error)}"


def _connect_error(error: OSError, address: str, port: int) -> str:
    if error.errno == errno.ECONNREFUSED:
        return f"connection refused by {address}:{port}: nothing listens there (or a firewall rejects it)"
    if error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return f"no route to {address}: check the interface and routes on this node"
    return f"cannot connect to {address}:{port}: {_reason(error)}"


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
