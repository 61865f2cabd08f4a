"""``GET /v1/report`` from a real agent: this GPU-less machine, and the constructed H100 node."""

from __future__ import annotations

import importlib.metadata
import sys
import time
from pathlib import Path

import httpx

from shared.models import SCHEMA_VERSION, Health, NodeReport, RefreshResult

from .conftest import AgentProcess, wait_for


def get_report(http: httpx.Client) -> NodeReport:
    response = http.get("/v1/report")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return NodeReport.model_validate_json(response.content)


def test_healthz_needs_no_token(agent: AgentProcess) -> None:
    health = Health.model_validate_json(httpx.get(agent.url + "/healthz", trust_env=False, timeout=10).content)
    assert health.node_name == "plain" and health.status == "ok" and health.schema_version == SCHEMA_VERSION


def test_report_shows_this_machine_gpu_less(client: httpx.Client, agent: AgentProcess) -> None:
    before = time.time()
    report = get_report(client)
    assert report.schema_version == SCHEMA_VERSION
    assert report.node_name == "plain"
    assert before - 1 <= report.time_unix <= time.time() + 1
    assert report.sampled_at is not None and report.sampled_at <= report.time_unix
    # No NVIDIA driver here: no GPUs, and the reason, not a crash.
    assert report.gpus == []
    assert report.nvml_error and "NVML" in report.nvml_error
    assert report.gpu_source is None and report.driver_version is None
    assert report.host.cpu_cores and report.host.memory_total_bytes and report.host.kernel
    assert report.host.memory_available_bytes <= report.host.memory_total_bytes
    # one per running kernel: nodes that share this host report the same one and split its cores
    assert report.host.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_report_disks(client: httpx.Client, agent: AgentProcess) -> None:
    disks = {disk.path: disk for disk in get_report(client).disks}
    present, missing = disks[str(agent.workdir)], disks[str(agent.workdir / "not-created-yet")]
    assert present.exists and present.free_bytes and present.total_bytes >= present.free_bytes
    # A workdir not created yet is measured on its parent's filesystem.
    assert not missing.exists and missing.free_bytes and missing.error is None


def test_report_network(client: httpx.Client) -> None:
    report = get_report(client)
    nics = {nic.name: nic for nic in report.nics}
    assert nics["lo"].is_loopback and nics["lo"].is_up
    assert any(address.address == "127.0.0.1" and address.prefixlen == 8 for address in nics["lo"].addresses)
    with open("/proc/net/route") as routes:
        default = [line.split()[0] for line in routes if line.split()[1:2] == ["00000000"]]
    assert [nic.name for nic in report.nics if nic.default_route] == default[:1]
    assert report.ib_ports == []  # no HCA on this machine


def test_report_timestamps_advance_between_requests(client: httpx.Client) -> None:
    first, second = get_report(client), get_report(client)
    assert second.time_unix >= first.time_unix


def test_software_versions_come_from_the_training_interpreter(client: httpx.Client) -> None:
    report = wait_for(lambda: (r := get_report(client)).software and r, timeout_s=120, what="the first software probe")
    software = report.software
    assert software.error is None, software.error
    assert software.python_executable == sys.executable
    assert software.python == ".".join(map(str, sys.version_info[:3]))
    assert software.torch == importlib.metadata.version("torch")
    assert software.torch_cuda is None and software.cuda_available is False  # the CPU wheel
    assert software.transformers == importlib.metadata.version("transformers")
    assert software.peft == importlib.metadata.version("peft")


def test_refresh_returns_software(client: httpx.Client) -> None:
    wait_for(lambda: get_report(client).software, timeout_s=120, what="the first software probe")
    response = client.post("/v1/refresh")
    assert response.status_code == 200
    result = RefreshResult.model_validate_json(response.content)
    assert isinstance(result.refreshed, bool) and result.software.torch
    assert get_report(client).software == result.software


def test_software_probe_of_a_missing_interpreter(agent_dir) -> None:
    other = AgentProcess(agent_dir, node_name="nopython", extra_args=["--python", "/nonexistent/bin/python3"])
    try:
        with other.client() as http:
            software = wait_for(lambda: get_report(http).software, timeout_s=30, what="the software probe")
        assert software.torch is None
        assert "/nonexistent/bin/python3" in software.error and "--python" in software.error
    finally:
        other.stop()


def test_gpu_branch_from_the_constructed_h100_fixture(gpu_agent: AgentProcess) -> None:
    with gpu_agent.client() as http:
        report = get_report(http)
    assert "constructed" in report.gpu_source and "not recorded" in report.gpu_source
    assert report.nvml_error is None
    assert report.driver_version == "550.54.15" and report.cuda_driver_version == "12.4"
    assert [gpu.index for gpu in report.gpus] == list(range(8))
    for gpu in report.gpus:
        assert gpu.name == "NVIDIA H100 80GB HBM3"
        assert gpu.memory_total_bytes == 81559 * 1024 * 1024
        assert gpu.memory_used_bytes + gpu.memory_free_bytes == gpu.memory_total_bytes
        assert gpu.power_limit_w == 700.0 and 0 < gpu.power_draw_w < gpu.power_limit_w
        assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
        assert gpu.nvlink_active_links == 18
        assert gpu.compute_capability == "9.0"
        assert gpu.ecc_volatile_uncorrected == 0 and gpu.remapped_rows_pending is False
        assert gpu.retired_pages_pending is None  # Hopper remaps rows instead of retiring pages
        assert sorted(link.peer_index for link in gpu.topology) == [i for i in range(8) if i != gpu.index]
        assert {link.link for link in gpu.topology} == {"nvlink"}
    leftover = report.gpus[3].compute_processes
    assert [(p.pid, p.name, p.used_memory_bytes) for p in leftover] == [(4242, "python3", 72 * 1024**3)]
    assert report.gpus[0].throttle_reasons == ["GpuIdle"]

