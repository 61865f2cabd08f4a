"""The sink's fast path (agent.sinkpath) and its FastAPI route give the same answers."""

from __future__ import annotations

import json
import random
import socket

import httpx
import pytest

from agent.sinkpath import _BodyCounter
from shared.models import SinkResult

from .conftest import AgentProcess


def raw_exchange(agent: AgentProcess, request: bytes, *, read_all: bool = True) -> tuple[int, dict, bytes]:
    """Send raw bytes on a fresh connection; return (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", agent.port), timeout=20) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or (read_all and not _complete(data)):
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def post_head(agent: AgentProcess, extra: str, *, token: str | None = None) -> bytes:
    token = agent.token if token is None else token
    return f"POST /v1/sink HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{extra}\r\n".encode()


def test_chunked_body_with_odd_chunks_extensions_and_trailer(agent: AgentProcess) -> None:
    chunks = [b"a" * 1, b"b" * 4095, b"c" * 70000, b"d" * 3]
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\nX-Trailer: yes\r\n\r\n"
    status, headers, answer = raw_exchange(agent, post_head(agent, "Transfer-Encoding: chunked\r\n") + body)
    assert status == 200 and headers["content-type"] == "application/json"
    assert SinkResult.model_validate_json(answer).bytes_received == sum(map(len, chunks))


def test_content_length_body(agent: AgentProcess) -> None:
    status, _, answer = raw_exchange(agent, post_head(agent, "Content-Length: 123457\r\n") + b"z" * 123457)
    assert status == 200 and SinkResult.model_validate_json(answer).bytes_received == 123457


def test_expect_100_continue(agent: AgentProcess) -> None:
    with socket.create_connection(("127.0.0.1", agent.port), timeout=20) as sock:
        sock.sendall(post_head(agent, "Content-Length: 10\r\nExpect: 100-continue\r\n"))
        assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(b"0123456789")
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200") and b'"bytes_received": 10' in answer


def test_no_body_counts_zero(agent: AgentProcess) -> None:
    status, _, answer = raw_exchange(agent, post_head(agent, ""))
    assert status == 200 and SinkResult.model_validate_json(answer).bytes_received == 0


@pytest.mark.parametrize("authorization", ["", "Authorization: Bearer wrong-token-0123456789\r\n", "Authorization: Basic {token}\r\n"])
def test_fast_path_refuses_bad_tokens(agent: AgentProcess, authorization: str) -> None:
    request = f"POST /v1/sink HTTP/1.1\r\nHost: x\r\n{authorization.format(token=agent.token)}Content-Length: 5\r\n\r\nhello"
    status, headers, body = raw_exchange(agent, request.encode())
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert "--token-file" in json.loads(body)["detail"]


def test_malformed_chunks_are_400(agent: AgentProcess) -> None:
    status, _, body = raw_exchange(agent, post_head(agent, "Transfer-Encoding: chunked\r\n") + b"zz\r\nhello\r\n0\r\n\r\n")
    assert status == 400 and "chunk" in json.loads(body)["detail"]


def test_sink_later_on_a_keep_alive_connection_uses_the_route(agent: AgentProcess) -> None:
    """Only a connection's first request takes the fast path; the route answers the same."""
    with httpx.Client(base_url=agent.url, headers=agent.auth, trust_env=False, timeout=20) as client:
        assert client.get("/healthz").status_code == 200
        response = client.post("/v1/sink", content=b"q" * 5000)
        assert response.status_code == 200 and response.json()["bytes_received"] == 5000
        assert client.post("/v1/sink", headers={"Authorization": "Bearer nope-nope-nope-nope"}, content=b"x").status_code == 401


def test_other_requests_pass_through_untouched(agent: AgentProcess) -> None:
    """Requests that start like the sink but are not it go to uvicorn as they came."""
    status, _, _ = raw_exchange(agent, b"POST /v1/sinkhole HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert status == 404  # uvicorn and FastAPI routed it: no such route
    status, _, _ = raw_exchange(agent, f"GET /v1/report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {agent.token}\r\n\r\n".encode())
    assert status == 200
    # A request split into tiny writes before the decision point still reaches uvicorn intact.
    with socket.create_connection(("127.0.0.1", agent.port), timeout=20) as sock:
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n":
            sock.send(bytes([byte]))
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_body_counter_handles_any_split() -> None:
    rng = random.Random(7)
    chunks = [bytes(rng.randrange(1, 3000)) for _ in range(40)]
    stream = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    for _ in range(50):
        counter = _BodyCounter(chunked=True, length=0)
        buffer = bytearray(stream)
        position = 0
        while position < len(stream):
            step = rng.randrange(1, 700)
            counter.feed(buffer, position, min(len(stream), position + step))
            position += step
        assert counter.done and counter.received == sum(map(len, chunks))


def test_a_stalled_sink_client_is_cut_off() -> None:
    """In-process, with a 0.2 s cap: a client that sends half a body and stops gets a 413."""
    import asyncio

    from agent.sinkpath import sink_fast_path_protocol

    class Inner:  # stands in for uvicorn's protocol, which this connection never reaches
        def __init__(self, **kwargs) -> None: ...
        def connection_made(self, transport) -> None: ...
        def connection_lost(self, exc) -> None: ...

    class Transport:
        def __init__(self) -> None:
            self.written, self.closed = b"", False
        def write(self, data: bytes) -> None:
            self.written += data
        def close(self) -> None:
            self.closed = True

    async def scenario() -> Transport:
        protocol = sink_fast_path_protocol(token="t" * 20, inner=Inner, max_seconds=0.2, stall_grace_s=0.1)(config=None, server_state=None, app_state=None)
        transport = Transport()
        protocol.connection_made(transport)
        data = b"POST /v1/sink HTTP/1.1\r\nAuthorization: Bearer " + b"t" * 20 + b"\r\nContent-Length: 100\r\n\r\nhalf"
        buffer = protocol.get_buffer(-1)
        buffer[: len(data)] = data
        protocol.buffer_updated(len(data))
        for _ in range(100):
            await asyncio.sleep(0.1)
            if transport.closed:
                break
        return transport

    transport = asyncio.run(scenario())
    assert transport.closed and transport.written.startswith(b"HTTP/1.1 413")
