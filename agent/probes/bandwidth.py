"""Throughput between two agents: stream bytes to the peer's ``POST /v1/sink`` and time it.

The sender streams one preallocated 1 MiB buffer over and over (no per-chunk allocation) with
an httpx streaming upload from a worker thread; the sink counts what ``request.stream()`` yields and discards it.
Both sides are bounded in bytes and in time.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Iterator, Sequence

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


class SinkLimitExceeded(Exception):
    """The body exceeded the sink's bytes or time cap."""


async def stream_to_peer(
    peer_url: str, seconds: float, *, token: str, allow: Sequence[IpNetwork] = (), max_bytes: int = SEND_MAX_BYTES
) -> BandwidthProbeResult:
    """Stream to ``peer_url``'s sink for ``seconds``; failures are reported in ``error``.

    The upload runs on a worker thread with httpx's blocking client: measured here, it costs
    about a third of the CPU per byte of the asyncio client (0.4-0.5 s/GB against 1.4-1.9 s/GB),
    and the event loop stays free for other requests meanwhile.
    """
    try:
        url = _sink_url(peer_url)
    except ValueError as error:
        return _failed(peer_url, str(error))
    refusal = target_refusal(url.host, allow)
    if refusal:
        return _failed(peer_url, refusal)
    return await asyncio.to_thread(_upload, url, peer_url, seconds, token, max_bytes)


def _sink_url(peer_url: str):
    import httpx  # imported on first use: it pulls in ~10 MB the idle agent does not need

    try:
        url = httpx.URL(peer_url.rstrip("/") + "/v1/sink")
    except (httpx.InvalidURL, ValueError, TypeError) as error:
        raise ValueError(f"peer_url is not a valid URL: {error}") from None
    if not url.host or url.scheme not in ("http", "https"):
        raise ValueError("peer_url must look like http://ADDRESS:8462")
    return url


def _upload(url, peer_url: str, seconds: float, token: str, max_bytes: int) -> BandwidthProbeResult:
    import httpx

    sent = 0

    def body() -> Iterator[memoryview]:
        nonlocal sent
        stop_at = time.monotonic() + seconds
        while sent < max_bytes and time.monotonic() < stop_at:
            sent += CHUNK_BYTES
            yield _BUFFER

    timeout = httpx.Timeout(connect=min(5.0, seconds + 2), read=seconds + 10, write=10.0, pool=5.0)
    started = time.monotonic()
    try:
        # trust_env=False: a proxy from the environment must never carry the token or the stream.
        with httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False) as client:
            response = client.post(
                url,
                content=body(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"},
            )
    except httpx.HTTPError as error:
        return _failed(peer_url, f"streaming to {url} failed: {type(error).__name__}: {error}", sent=sent)
    elapsed = time.monotonic() - started
    if response.status_code == 401:
        return _failed(peer_url, "the peer refused this agent's token: every agent of a cluster must use the same token file", sent=sent)
    if response.status_code != 200:
        return _failed(peer_url, f"the peer's sink answered HTTP {response.status_code}: {response.text[:200]}", sent=sent)
    try:
        received = SinkResult.model_validate_json(response.content).bytes_received
    except ValueError:
        return _failed(peer_url, f"{url} did not answer like an ftwiz agent sink", sent=sent)
    return BandwidthProbeResult(
        peer_url=peer_url,
        bytes_sent=received,
        seconds=round(elapsed, 4),
        gbit_per_s=round(received * 8 / elapsed / 1e9, 4) if elapsed > 0 else 0.0,
        error=None if received == sent else f"sent {sent} bytes but the peer counted {received}",
    )


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

