"""A fast path for ``POST /v1/sink``, in front of uvicorn's own HTTP protocol.

Why: through uvicorn and Starlette a streamed body costs 1-2.5 CPU seconds per GB (parser
buffers, one message per read), about ten times what iperf3 spends, so a bandwidth probe would
measure the agent's CPU instead of the network. This protocol reads straight into one
preallocated buffer (``recv_into``) and only walks the chunk framing.

Scope, kept small on purpose: a connection whose *first* bytes are ``POST /v1/sink `` is served
here, once, and closed; every other connection is handed, byte for byte, to uvicorn's protocol
for its whole life. The contract is the route's (:mod:`agent.routers.sink`): same token check
(constant time), same caps, same JSON bodies and status codes. The FastAPI route still serves
sink requests that are not first on their connection.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any, Optional, cast

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from shared.models import SinkResult

from .probes.bandwidth import SINK_MAX_BYTES, SINK_MAX_SECONDS

__all__ = ["sink_fast_path_protocol", "UNAUTHORIZED_DETAIL"]

UNAUTHORIZED_DETAIL = (
    "missing or wrong agent token: send 'Authorization: Bearer <token>' with the token from the agent's --token-file"
)
_PREFIX = b"POST /v1/sink "
_MAX_HEAD = 16 * 1024
_SNIFF_BUFFER = 64 * 1024
_SINK_BUFFER = 1 << 20


def sink_fast_path_protocol(
    *,
    token: str,
    inner: type = AutoHTTPProtocol,
    max_bytes: int = SINK_MAX_BYTES,
    max_seconds: float = SINK_MAX_SECONDS,
    stall_grace_s: float = 5.0,
) -> type[asyncio.BufferedProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` bound to this agent's token and caps.

    A request still incomplete ``max_seconds + stall_grace_s`` after its first byte is cut off.
    """
    return type(
        "SinkFastPathProtocol",
        (_SinkFastPath,),
        {
            "_token": token.encode("utf-8"),
            "_inner_class": inner,
            "_max_bytes": max_bytes,
            "_max_seconds": max_seconds,
            "_stall_grace_s": stall_grace_s,
        },
    )


class _SinkFastPath(asyncio.BufferedProtocol):
    _token: bytes
    _inner_class: type
    _max_bytes: int
    _max_seconds: float
    _stall_grace_s: float

    def __init__(self, config: Any, server_state: Any, app_state: Any, _loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self._inner = self._inner_class(config=config, server_state=server_state, app_state=app_state, _loop=_loop)
        self._transport: asyncio.Transport  # set by connection_made, before any data arrives
        self._mode = "sniff"  # sniff -> inner (uvicorn) | head -> body -> done
        self._head = bytearray()
        self._buffer = bytearray(_SNIFF_BUFFER)
        self._body: Optional[_BodyCounter] = None
        self._deadline: Optional[asyncio.TimerHandle] = None

    # -- asyncio protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a TCP connection's transport
        self._inner.connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buffer)

    def buffer_updated(self, nbytes: int) -> None:
        if self._mode == "body":
            self._feed_body(0, nbytes)
        elif self._mode == "inner":
            self._inner.data_received(bytes(memoryview(self._buffer)[:nbytes]))
        elif self._mode in ("sniff", "head"):
            self._head += self._buffer[:nbytes]
            self._on_head_bytes()

    def eof_received(self) -> Optional[bool]:
        if self._mode == "inner":
            return self._inner.eof_received()
        if self._mode in ("head", "body"):
            self._mode = "done"  # the client gave up mid-request: nothing to answer
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._mode == "inner":
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._mode == "inner":
            self._inner.resume_writing()

    # -- request head -------------------------------------------------------------------------------

    def _on_head_bytes(self) -> None:
        if self._mode == "sniff":
            if len(self._head) < len(_PREFIX) and _PREFIX.startswith(bytes(self._head)):
                return  # not enough bytes to decide yet
            if not self._head.startswith(_PREFIX):
                self._mode = "inner"
                data, self._head = bytes(self._head), bytearray()
                self._inner.data_received(data)
                return
            self._mode = "head"
            # A client that stops sending (head or body) must not hold the connection forever.
            self._deadline = asyncio.get_running_loop().call_later(self._max_seconds + self._stall_grace_s, self._on_deadline)
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > _MAX_HEAD:
                self._respond(431, {"detail": f"request head larger than {_MAX_HEAD} bytes"})
            return
        head, rest = bytes(self._head[:end]), bytes(self._head[end + 4 :])
        self._head = bytearray()
        self._start_body(head, rest)

    def _start_body(self, head: bytes, rest: bytes) -> None:
        headers: dict[bytes, bytes] = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        scheme, _, presented = headers.get(b"authorization", b"").partition(b" ")
        # Evaluate the digest even for a wrong scheme so timing does not tell which part failed.
        token_ok = hmac.compare_digest(presented.strip(), self._token)
        if not (token_ok and scheme.lower() == b"bearer"):
            self._respond(401, {"detail": UNAUTHORIZED_DETAIL}, extra=b'www-authenticate: Bearer realm="ftwiz-agent"\r\n')
            return
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        length = headers.get(b"content-length")
        if chunked and length is not None:
            self._respond(400, {"detail": "both Transfer-Encoding and Content-Length given"})
            return
        if length is not None:
            if not length.isdigit():
                self._respond(400, {"detail": "Content-Length is not a number"})
                return
            if int(length) > self._max_bytes:
                self._respond(413, {"detail": f"body exceeds the sink's cap of {self._max_bytes} bytes"})
                return
        if headers.get(b"expect", b"").lower() == b"100-continue":
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self._body = _BodyCounter(chunked=chunked, length=int(length) if length is not None else 0)
        self._mode = "body"
        self._buffer = bytearray(_SINK_BUFFER)
        if rest:
            self._buffer[: len(rest)] = rest
            self._feed_body(0, len(rest))
        elif body.done:
            self._finish()

    def _on_deadline(self) -> None:
        if self._mode == "body":
            self._respond(413, {"detail": f"body still streaming after the sink's cap of {self._max_seconds:g} s"})
        elif self._mode == "head":
            self._mode = "done"
            self._transport.close()

    # -- body -------------------------------------------------------------------------------------

    def _feed_body(self, start: int, end: int) -> None:
        body = self._body
        assert body is not None, "the head parser sets the body counter before any body byte"
        try:
            body.feed(self._buffer, start, end)
        except ValueError as error:
            self._respond(400, {"detail": f"malformed chunked body: {error}"})
            return
        if body.received > self._max_bytes:
            self._respond(413, {"detail": f"body exceeds the sink's cap of {self._max_bytes} bytes"})
        elif time.monotonic() - body.started > self._max_seconds:
            self._respond(413, {"detail": f"body still streaming after the sink's cap of {self._max_seconds:g} s"})
        elif body.done:
            self._finish()

    def _finish(self) -> None:
        body = self._body
        assert body is not None, "the head parser sets the body counter before the body ends"
        result = SinkResult(bytes_received=body.received, seconds=round(time.monotonic() - body.started, 4))
        self._respond(200, result.model_dump())

    def _respond(self, status: int, payload: dict, *, extra: bytes = b"") -> None:
        if self._mode == "done":
            return
        self._mode = "done"
        if self._deadline is not None:
            self._deadline.cancel()
        content = json.dumps(payload).encode()
        reason = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 413: b"Content Too Large", 431: b"Request Header Fields Too Large"}
        self._transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n%s\r\n"
            % (status, reason.get(status, b""), len(content), extra)
            + content
        )
        self._transport.close()


class _BodyCounter:
    """Counts the payload bytes of a Content-Length or chunked body without copying it."""

    def __init__(self, *, chunked: bool, length: int) -> None:
        self.chunked = chunked
        self.received = 0
        self.started = time.monotonic()
        self.done = not chunked and length == 0
        self._remaining = length  # bytes left in the body (Content-Length) or in the current chunk
        self._state = "size" if chunked else "data"
        self._line = bytearray()

    def feed(self, buffer: bytearray, start: int, end: int) -> None:
        """Account for ``buffer[start:end]``; raises ValueError on broken chunk framing."""
        position = start
        while position < end and not self.done:
            if self._state == "data":
                take = min(self._remaining, end - position)
                self.received += take
                self._remaining -= take
                position += take
                if self._remaining == 0:
                    if self.chunked:
                        self._state = "crlf"
                    else:
                        self.done = True
            elif self._state in ("size", "crlf", "trailer"):
                newline = buffer.find(b"\n", position, end)
                stop = end if newline < 0 else newline + 1
                self._line += buffer[position:stop]
                position = stop
                if len(self._line) > 4096:
                    raise ValueError("chunk header line too long")
                if newline >= 0:
                    self._line_done(bytes(self._line).rstrip(b"\r\n"))
                    self._line = bytearray()

    def _line_done(self, line: bytes) -> None:
        if self._state == "crlf":
            if line:
                raise ValueError("chunk data longer than its declared size")
            self._state = "size"
        elif self._state == "size":
            size = line.split(b";", 1)[0].strip()  # chunk extensions are ignored
            try:
                self._remaining = int(size, 16)
            except ValueError:
                raise ValueError(f"bad chunk size {size[:20]!r}") from None
            if self._remaining < 0:
                raise ValueError("negative chunk size")
            self._state = "data" if self._remaining else "trailer"
        elif self._state == "trailer" and not line:
            self.done = True
