"""Bad input gets 422 with field errors, big bodies get 413; never a 500."""

from __future__ import annotations

import socket

import httpx
import pytest

from agent.settings import MAX_JSON_BODY_BYTES

from .conftest import AgentProcess


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/v1/probe/connect", {"port": 80}, "host"),
        ("/v1/probe/connect", {"host": "127.0.0.1", "port": 0}, "port"),
        ("/v1/probe/connect", {"host": "127.0.0.1", "port": 65536}, "port"),
        ("/v1/probe/connect", {"host": "127.0.0.1", "port": "eighty"}, "port"),
        ("/v1/probe/connect", {"host": "127.0.0.1", "port": 80, "timeout_s": 11}, "timeout_s"),
        ("/v1/probe/connect", {"host": "", "port": 80}, "host"),
        ("/v1/probe/connect", {"host": "127.0.0.1", "port": 80, "surprise": 1}, "surprise"),
        ("/v1/probe/listen", {"port": 29500, "ttl_s": 121}, "ttl_s"),
        ("/v1/probe/listen", {"port": 29500, "ttl_s": True}, "ttl_s"),
        ("/v1/probe/listen", {"port": "29500"}, "port"),
        ("/v1/probe/connect", {"host": "127.0.0.1", "port": True}, "port"),
        ("/v1/probe/listen", {"port": -1}, "port"),
        ("/v1/probe/bandwidth", {"peer_url": "ftp://node2:8462"}, "peer_url"),
        ("/v1/probe/bandwidth", {"peer_url": "http://node2:8462", "seconds": 10.5}, "seconds"),
        ("/v1/probe/bandwidth", {"peer_url": "http://node2:8462", "seconds": 0}, "seconds"),
    ],
)
def test_bad_bodies_are_422_with_the_field(client: httpx.Client, path: str, body: dict, field: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(field in map(str, error["loc"]) for error in errors), errors


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"null", b"", b"\xff\xfe"])
def test_unparseable_bodies_are_422(client: httpx.Client, raw: bytes) -> None:
    response = client.post("/v1/probe/connect", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text


@pytest.mark.parametrize("run_id", ["has space", "a" * 65, "semi;colon", "$(reboot)", "ünïcode", "id%0A"])
def test_bad_run_ids_are_422(client: httpx.Client, run_id: str) -> None:
    response = client.post(f"/v1/runs/{run_id}/stop")
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["path", "run_id"]


def test_declared_big_body_is_413(client: httpx.Client) -> None:
    big = {"host": "x" * (MAX_JSON_BODY_BYTES + 1), "port": 80}
    response = client.post("/v1/probe/connect", json=big)
    assert response.status_code == 413
    assert str(MAX_JSON_BODY_BYTES) in response.json()["detail"]


def test_chunked_big_body_is_413(client: httpx.Client) -> None:
    def chunks():  # no Content-Length: the limit must hold while reading
        for _ in range(MAX_JSON_BODY_BYTES // 1024 + 2):
            yield b" " * 1024

    response = client.post("/v1/probe/connect", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413


def test_body_just_under_the_limit_is_read(client: httpx.Client, agent: AgentProcess) -> None:
    body = b'{"host": "127.0.0.1", "port": %d}' % agent.port
    padded = body + b" " * (MAX_JSON_BODY_BYTES - len(body))
    response = client.post("/v1/probe/connect", content=padded, headers={"Content-Type": "application/json"})
    assert response.status_code == 200 and response.json()["reachable"]


def test_big_body_is_refused_before_auth_reads_it(agent: AgentProcess) -> None:
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/probe/connect HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")


def test_unknown_route_and_method(client: httpx.Client) -> None:
    assert client.get("/v1/nothing-here").status_code == 404
    assert client.delete("/v1/report").status_code == 405


def test_non_utf8_body_is_422_not_400(client: httpx.Client) -> None:
    response = client.post("/v1/probe/listen", content=b"\x80\x81:\xc3", headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][0] == "body"
