"""Throughput between two agents: stream bytes to the peer's ``POST /v1/sink`` and time it.

The sender streams one preallocated 1 MiB buffer over and over (no per-chunk allocation) as a
chunked HTTP/1.1 POST from a worker thread. The sink counts the body and discards it: on a
connection of its own in :mod:`agent.sinkpath` (``recv_into`` one buffer), otherwise through
``request.stream()`` in the FastAPI route.
Both sides are bounded in bytes and in time.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import AsyncIterator, Optional, Sequence

from shared.models import BandwidthProbeResult, SinkResult

from ..settings import IpNetwork
from .tcp import target_refusal

__all__ = ["stream_to_peer", "drain", "SinkLimitExceeded", "CHUNK_BYTES", "SEND_MAX_BYTES", "SINK_MAX_BYTES", "SINK_MAX_SECONDS"]

CHUNK_BYTES = 1 << 20
"""Bytes per write: large enough that per-chunk Python work is noise next to the copy."""
SEND_MAX_BYTES = 60 << 30
"""The sender stops after this many bytes even if time is left (10 s at 48 Gbit/s)."""
SINK_MAX_BYTES = 64 << 30
"""The sink refuses bodies beyond this; above the sender's cap so a real probe never hits it."""
SINK_MAX_SECONDS = 15.0
"""The sink stops reading after this long; above the sender's 10 s limit."""

_BUFFER = memoryview(bytearray(CHUNK_BYTES))
_CHUNK_HEAD = b"%x\r\n" % CHUNK_BYTES


class SinkLimitExceeded(Exception):
    """The body exceeded the sink's bytes or time cap."""


async def stream_to_peer(
    peer_url: str, seconds: float, *, token: str, allow: Sequence[IpNetwork] = (), max_bytes: int = SEND_MAX_BYTES,
    tls_only: bool = False, ca_file: Optional[str] = None,
) -> BandwidthProbeResult:
    """Stream to ``peer_url``'s sink for ``seconds``; failures are reported in ``error``.

    The upload is a plain HTTP/1.1 chunked POST written on a blocking socket in a worker thread,
    one ``sendmsg`` (header, the 1 MiB buffer, CRLF) per chunk: no copy in user space. Measured
    here, httpx's clients spent 0.4-1.9 CPU seconds per GB joining each chunk into a new bytes
    object; this loop spends about what iperf3 does.
    """
    try:
        target = _parse_peer(peer_url)
    except ValueError as error:
        return _failed(peer_url, str(error))
    if tls_only and target.scheme != "https":
        # This agent serves HTTPS: so do its peers, and the token must not cross the network in clear.
        return _failed(peer_url, "this agent serves TLS (--tls-cert): the peer must be https://, the token is never sent over plain HTTP; "
                                 "set [cluster] agent_tls = true")
    refusal = target_refusal(target.host, allow)
    if refusal:
        return _failed(peer_url, refusal)
    return await asyncio.to_thread(_upload, target, peer_url, seconds, token, max_bytes, ca_file)


@dataclass(frozen=True)
class _Peer:
    scheme: str
    host: str
    port: int
    path: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def _parse_peer(peer_url: str) -> _Peer:
    try:
        parts = urllib.parse.urlsplit(peer_url.strip())
        port = parts.port
    except ValueError as error:
        raise ValueError(f"peer_url is not a valid URL: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise ValueError("peer_url must look like http://ADDRESS:8462")
    host = parts.hostname
    if any(ord(char) < 33 or ord(char) > 126 for char in host + parts.path):
        raise ValueError("peer_url must be plain ASCII without spaces or control characters")
    return _Peer(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), parts.path.rstrip("/") + "/v1/sink")


def _upload(peer: _Peer, peer_url: str, seconds: float, token: str, max_bytes: int, ca_file: Optional[str] = None) -> BandwidthProbeResult:
    sent = 0
    started = time.monotonic()
    try:
        with _connect(peer, timeout=min(5.0, seconds + 2), ca_file=ca_file) as sock:
            host = f"[{peer.host}]" if ":" in peer.host else peer.host
            sock.sendall(
                f"POST {peer.path} HTTP/1.1\r\nHost: {host}:{peer.port}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
            )
            sock.settimeout(10.0)  # a peer that stops reading fails the probe instead of hanging it
            stop_at = time.monotonic() + seconds
            try:
                while sent < max_bytes and time.monotonic() < stop_at:
                    _send_parts(sock, [_CHUNK_HEAD, _BUFFER, b"\r\n"])
                    sent += CHUNK_BYTES
                sock.sendall(b"0\r\n\r\n")
            except OSError as error:
                # The sink may have answered (401, 413) and closed: its answer says more than EPIPE.
                status, body = _read_response(sock, timeout=1.0)
                if status is None:
                    return _failed(peer_url, f"streaming to {peer.url} failed: {_reason(error)}", sent=sent)
            else:
                status, body = _read_response(sock, timeout=seconds + 10)
    except OSError as error:
        return _failed(peer_url, f"cannot connect to {peer.url}: {_reason(error)}", sent=sent)
    elapsed = time.monotonic() - started
    if status is None:
        return _failed(peer_url, f"{peer.url} closed the connection without an HTTP answer", sent=sent)
    if status == 401:
        return _failed(peer_url, "the peer refused this agent's token: every agent of a cluster must use the same token file", sent=sent)
    if status != 200:
        return _failed(peer_url, f"the peer's sink answered HTTP {status}: {body[:200].decode('utf-8', 'replace')}", sent=sent)
    try:
        received = SinkResult.model_validate_json(body).bytes_received
    except ValueError:
        return _failed(peer_url, f"{peer.url} did not answer like an ftwiz agent sink", sent=sent)
    return BandwidthProbeResult(
        peer_url=peer_url,
        bytes_sent=received,
        seconds=round(elapsed, 4),
        gbit_per_s=round(received * 8 / elapsed / 1e9, 4) if elapsed > 0 else 0.0,
        error=None if received == sent else f"sent {sent} bytes but the peer counted {received}",
    )


def _connect(peer: _Peer, *, timeout: float, ca_file: Optional[str] = None) -> socket.socket:
    sock = socket.create_connection((peer.host, peer.port), timeout=timeout)
    if peer.scheme == "https":
        sock = ssl.create_default_context(cafile=ca_file).wrap_socket(sock, server_hostname=peer.host)
    return sock


def _send_parts(sock: socket.socket, parts: list) -> None:
    """Send every part, resuming after partial writes without copying (sendall per part on TLS)."""
    if isinstance(sock, ssl.SSLSocket):
        for part in parts:
            sock.sendall(part)
        return
    views = [memoryview(part) for part in parts]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


def _read_response(sock: socket.socket, *, timeout: float) -> tuple[Optional[int], bytes]:
    """Status and body of one HTTP/1.1 response (Content-Length or until close)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
            if len(data) > 65536:
                break
        head, _, body = data.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].split()
        if len(status_line) < 2 or not status_line[1].isdigit():
            return None, b""
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                length = int(value.strip())
        while length is None or len(body) < length:
            piece = sock.recv(65536)
            if not piece:
                break
            body += piece
        return int(status_line[1]), body if length is None else body[:length]
    except OSError:
        return None, b""


def _reason(error: OSError) -> str:
    if isinstance(error, socket.timeout):
        return "timed out (the peer stopped reading)"
    return error.strerror or str(error) or type(error).__name__


async def drain(chunks: AsyncIterator[bytes], *, max_bytes: int = SINK_MAX_BYTES, max_seconds: float = SINK_MAX_SECONDS) -> SinkResult:
    """Count and discard a streamed body; raise :class:`SinkLimitExceeded` past either cap."""
    started = time.monotonic()
    deadline = started + max_seconds
    received = 0
    async for chunk in chunks:
        received += len(chunk)
        if received > max_bytes:
            raise SinkLimitExceeded(f"body exceeds the sink's cap of {max_bytes} bytes")
        if time.monotonic() > deadline:
            raise SinkLimitExceeded(f"body still streaming after the sink's cap of {max_seconds:g} s")
    return SinkResult(bytes_received=received, seconds=round(time.monotonic() - started, 4))


def _failed(peer_url: str, error: str, *, sent: int = 0) -> BandwidthProbeResult:
    return BandwidthProbeResult(peer_url=peer_url, bytes_sent=sent, seconds=0.0, gbit_per_s=0.0, error=error)

