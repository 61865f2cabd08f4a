"""Every route but /healthz needs the bearer token: no token, a wrong token, the right token."""

from __future__ import annotations

import httpx
import pytest

from .conftest import AgentProcess, free_port


# One request per route that would succeed with the right token; the matrix below checks the
# live OpenAPI document lists exactly these, so a new route cannot skip the auth test.
def route_requests(agent: AgentProcess) -> dict[tuple[str, str], dict]:
    held = free_port()
    return {
        ("GET", "/healthz"): {},
        ("GET", "/v1/report"): {},
        ("POST", "/v1/refresh"): {},
        ("GET", "/metrics"): {},
        ("POST", "/v1/probe/connect"): {"json": {"host": "127.0.0.1", "port": agent.port, "timeout_s": 2}},
        ("POST", "/v1/probe/connect-many"): {"json": {"targets": [{"host": "127.0.0.1", "port": agent.port}], "tries": 1}},
        ("POST", "/v1/probe/listen"): {"json": {"port": free_port(), "ttl_s": 1}},
        ("DELETE", "/v1/probe/listen/{port}"): {"path": f"/v1/probe/listen/{held}", "listen_first": held},
        ("POST", "/v1/probe/bandwidth"): {"json": {"peer_url": agent.url, "seconds": 0.2}},
        ("POST", "/v1/probe/compute"): {"json": {"device": "cuda", "gpus": []}},  # answered at once, no interpreter
        ("POST", "/v1/sink"): {"content": b"x" * 1000},
        ("POST", "/v1/runs/{run_id}/stop"): {"path": "/v1/runs/auth-matrix-no-such-run/stop"},
        ("GET", "/v1/kernel/oom/{pid}"): {"path": "/v1/kernel/oom/1"},
    }


def test_matrix_covers_every_route(agent: AgentProcess) -> None:
    schema = httpx.get(agent.url + "/openapi.json", trust_env=False, timeout=10).json()
    served = {(method.upper(), path) for path, operations in schema["paths"].items() for method in operations}
    assert served == set(route_requests(agent)), "add the new route to route_requests() so its auth is tested"


@pytest.mark.parametrize("credential", ["none", "wrong", "wrong-scheme", "right"])
def test_auth_matrix(agent: AgentProcess, credential: str) -> None:
    headers = {
        "none": {},
        "wrong": {"Authorization": "Bearer " + "x" * len(agent.token)},
        "wrong-scheme": {"Authorization": f"Basic {agent.token}"},
        "right": agent.auth,
    }[credential]
    with httpx.Client(base_url=agent.url, timeout=30, trust_env=False) as http:
        for (method, path), request in route_requests(agent).items():
            request = dict(request)
            url = request.pop("path", path)
            listen_first = request.pop("listen_first", None)
            if listen_first is not None:  # something to close, opened with the right token
                assert http.post("/v1/probe/listen", json={"port": listen_first, "ttl_s": 5}, headers=agent.auth).status_code == 200
            response = http.request(method, url, headers=headers, **request)
            if path == "/healthz" or credential == "right":
                assert response.status_code == 200, (method, path, response.status_code, response.text)
            else:
                assert response.status_code == 401, (method, path, response.status_code, response.text)
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert "--token-file" in response.json()["detail"]


def test_token_prefix_is_not_enough(agent: AgentProcess) -> None:
    for candidate in (agent.token[:-1], agent.token + "x", agent.token.upper() if agent.token != agent.token.upper() else agent.token.lower()):
        response = httpx.get(agent.url + "/v1/report", headers={"Authorization": f"Bearer {candidate}"}, trust_env=False, timeout=10)
        assert response.status_code == 401
