"""``GET /metrics``: parsed by prometheus_client and accepted by ``promtool check metrics``."""

from __future__ import annotations

import shutil
import subprocess

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .conftest import AgentProcess

PROMTOOL = "promtool"


def scrape(agent: AgentProcess) -> str:
    with agent.client() as http:
        response = http.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def samples(text: str) -> dict[str, list]:
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def promtool_check(text: str) -> None:
    # promtool is a required test tool (`make sysdeps` installs it): a missing one fails, not skips.
    promtool = shutil.which(PROMTOOL)
    assert promtool, "promtool not found: install the Debian package 'prometheus' (make sysdeps does)"
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert not result.stdout.strip() and not result.stderr.strip(), "promtool lint findings"


def test_metrics_gpu_less(agent: AgentProcess) -> None:
    text = scrape(agent)
    families = samples(text)
    assert families["ftwiz_nvml_up"][0].value == 0
    assert families["ftwiz_agent_info"][0].labels["node"] == "plain"
    assert families["ftwiz_node_memory_total_bytes"][0].value > 0
    assert 0 <= families["ftwiz_node_cpu_utilization_ratio"][0].value <= 1
    assert {s.labels["path"] for s in families["ftwiz_disk_free_bytes"]} == {str(agent.workdir), str(agent.workdir / "not-created-yet")}
    assert any(s.labels["nic"] == "lo" and s.value == 1 for s in families["ftwiz_nic_up"])
    assert families["process_resident_memory_bytes"][0].value > 0
    assert not any(name.startswith("ftwiz_gpu_") and fam for name, fam in families.items() if name != "ftwiz_gpu_info")
    promtool_check(text)


def test_metrics_gpu_branch(gpu_agent: AgentProcess) -> None:
    text = scrape(gpu_agent)
    families = samples(text)
    assert families["ftwiz_nvml_up"][0].value == 1
    used = {s.labels["gpu"]: s for s in families["ftwiz_gpu_memory_used_bytes"]}
    assert sorted(used) == [str(i) for i in range(8)]
    assert used["3"].labels["uuid"].startswith("GPU-") and used["3"].value == 72 * 1024**3 + 520 * 1024**2
    assert {s.value for s in families["ftwiz_gpu_memory_total_bytes"]} == {81559 * 1024**2}
    assert {s.value for s in families["ftwiz_gpu_power_limit_watts"]} == {700.0}
    assert all(0 < s.value < 700 for s in families["ftwiz_gpu_power_watts"])
    assert all(20 < s.value < 100 for s in families["ftwiz_gpu_temperature_celsius"])
    assert {s.value for s in families["ftwiz_gpu_nvlink_active_links"]} == {18}
    # prometheus_client's parser drops the _total suffix from the family name of a counter.
    assert {s.name for s in families["ftwiz_gpu_ecc_volatile_uncorrected_errors"]} == {"ftwiz_gpu_ecc_volatile_uncorrected_errors_total"}
    idle = {s.labels["gpu"] for s in families["ftwiz_gpu_throttle_reason"] if s.labels["reason"] == "GpuIdle"}
    assert idle == {str(i) for i in range(8)} - {"3"}
    names = {s.labels["name"] for s in families["ftwiz_gpu_info"]}
    assert names == {"NVIDIA H100 80GB HBM3"}
    promtool_check(text)


def test_promtool_rejects_what_it_should() -> None:
    """The promtool check is not a rubber stamp: a counter without _total and a bad unit fail."""
    promtool = shutil.which(PROMTOOL)
    assert promtool, "promtool not found: install the Debian package 'prometheus' (make sysdeps does)"
    bad = "# HELP x_milliseconds t\n# TYPE x_milliseconds counter\nx_milliseconds 1\n"
    result = subprocess.run([promtool, "check", "metrics"], input=bad.encode(), capture_output=True, timeout=30)
    assert result.returncode != 0


def test_metrics_needs_token(agent: AgentProcess) -> None:
    assert httpx.get(agent.url + "/metrics", trust_env=False, timeout=10).status_code == 401
