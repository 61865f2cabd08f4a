"""``POST /v1/probe/compute`` over real HTTP: the training interpreter times a matmul, the agent caches it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from agent.probes.compute import _MARKER
from agent.workloads.matmul import MARKER
from shared.models import ComputeProbeResult
from tests.agent.conftest import AgentProcess


def probe(http: httpx.Client, **body) -> ComputeProbeResult:
    response = http.post("/v1/probe/compute", json=body, timeout=120.0)
    assert response.status_code == 200, response.text
    return ComputeProbeResult.model_validate(response.json())


def test_markers_agree() -> None:
    assert _MARKER == MARKER


def test_cpu_matmul_is_measured_once_then_read_from_the_cache(client: httpx.Client) -> None:
    first = probe(client, device="cpu", threads=1, budget_s=0.2)
    assert first.error is None and not first.cached
    assert first.dtype == "float32" and first.threads == 1
    (device,) = first.devices
    assert device.index is None and device.tflops > 0
    again = probe(client, device="cpu", threads=1, budget_s=0.2)
    assert again.cached and again.devices == first.devices and again.measured_at == first.measured_at
    fresh = probe(client, device="cpu", threads=1, budget_s=0.2, fresh=True)
    assert not fresh.cached and fresh.measured_at > first.measured_at
    other = probe(client, device="cpu", threads=2, budget_s=0.2)  # another thread count is another rank shape
    assert not other.cached and other.threads == 2


def test_cuda_without_a_device_is_an_answer_and_not_cached(client: httpx.Client) -> None:
    for _ in range(2):
        result = probe(client, device="cuda", gpus=[0], budget_s=0.1)
        assert result.devices == [] and not result.cached
        assert result.error and "no CUDA device" in result.error


def test_bad_input_and_no_token_are_refused(client: httpx.Client, agent: AgentProcess) -> None:
    assert client.post("/v1/probe/compute", json={"device": "tpu"}).status_code == 422
    assert client.post("/v1/probe/compute", json={"device": "cpu", "budget_s": 60}).status_code == 422
    assert client.post("/v1/probe/compute", json={"device": "cpu", "fresh": 0}).status_code == 422  # no coercion
    assert httpx.post(agent.url + "/v1/probe/compute", json={"device": "cpu"}, trust_env=False).status_code == 401


@pytest.fixture()
def slow_agent(agent_dir: Path) -> Iterator[AgentProcess]:
    """An agent whose training interpreter never answers (it sleeps)."""
    python = agent_dir / "slow-python"
    python.write_text("#!/bin/sh\nexec sleep 60\n")
    os.chmod(python, 0o700)
    process = AgentProcess(agent_dir, node_name="slow", extra_args=["--python", str(python)])
    yield process
    process.stop()


def test_the_timeout_ends_a_probe_that_hangs(slow_agent: AgentProcess) -> None:
    with slow_agent.client() as http:
        result = probe(http, device="cpu", threads=1, timeout_s=1)
    assert not result.devices and result.error and "within 1 s" in result.error
    assert result.seconds < 30  # the 60 s sleep was killed, not waited for
