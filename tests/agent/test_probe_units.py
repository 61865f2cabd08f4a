"""Probes in-process: parsers on constructed sysfs/procfs files, the GPU probe on every fixture."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.fixtures import H100_SXM_8X, H100_SXM_8X_DEGRADED, RTX_4090_1X
from agent.probes import network
from agent.probes.gpu import GpuProbe
from agent.probes.gpu_fixture import FixtureError, FixtureNvml
from agent.probes.nvml import LiveNvml
from agent.reaper import find_run_processes
from agent.report import ReportCache
from agent.sampler import Sampler
from shared.models import NodeReport, SoftwareVersions

ROUTE_TABLE = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth1\t00000000\t0101A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0
eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth2\t00000000\t010200C0\t0002\t0\t0\t1\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


def test_default_route_prefers_the_lowest_metric_of_up_routes(tmp_path: Path) -> None:
    routes = tmp_path / "route"
    routes.write_text(ROUTE_TABLE)
    # eth2 has the lowest metric but its route is not RTF_UP.
    assert network.default_route_interface(route_file=str(routes)) == "eth0"
    routes.write_text(ROUTE_TABLE.splitlines()[0] + "\n")
    assert network.default_route_interface(route_file=str(routes)) is None
    assert network.default_route_interface(route_file=str(tmp_path / "absent")) is None


def make_hca(root: Path, device: str, port: int, *, state: str, phys: str, rate: str, link_layer: str, ndev: str | None) -> None:
    port_dir = root / device / "ports" / str(port)
    port_dir.mkdir(parents=True)
    (port_dir / "state").write_text(state + "\n")
    (port_dir / "phys_state").write_text(phys + "\n")
    (port_dir / "rate").write_text(rate + "\n")
    (port_dir / "link_layer").write_text(link_layer + "\n")
    if ndev:
        (port_dir / "gid_attrs" / "ndevs").mkdir(parents=True)
        (port_dir / "gid_attrs" / "ndevs" / "0").write_text(ndev + "\n")


def test_ib_ports_from_a_constructed_sysfs_tree(tmp_path: Path) -> None:
    """File formats as the kernel's drivers/infiniband/core/sysfs.c writes them (constructed, not recorded)."""
    make_hca(tmp_path, "mlx5_0", 1, state="4: ACTIVE", phys="5: LinkUp", rate="200 Gb/sec (4X HDR)", link_layer="InfiniBand", ndev=None)
    make_hca(tmp_path, "mlx5_1", 1, state="1: DOWN", phys="2: Polling", rate="100 Gb/sec (4X EDR)", link_layer="Ethernet", ndev="enp65s0f1")
    ports = network.ib_ports(sysfs_root=str(tmp_path))
    assert [(p.device, p.port, p.state, p.phys_state, p.link_layer, p.netdev) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp", "InfiniBand", None),
        ("mlx5_1", 1, "DOWN", "Polling", "Ethernet", "enp65s0f1"),
    ]
    assert ports[0].rate == "200 Gb/sec (4X HDR)"
    assert network.ib_ports(sysfs_root=str(tmp_path / "absent")) == []


def test_peermem_from_proc_modules(tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    modules.write_text("nvidia_uvm 1531904 0 - Live 0x0\nnvidia_peermem 16384 0 - Live 0x0\nnvidia 56795136 2 nvidia_uvm,nvidia_peermem, Live 0x0\n")
    assert network.peermem_loaded(modules_file=str(modules)) is True
    modules.write_text("nvidia 56795136 2 nvidia_peermem_x, Live 0x0\n")
    assert network.peermem_loaded(modules_file=str(modules)) is False
    assert network.peermem_loaded(modules_file=str(tmp_path / "absent")) is None


def test_live_nvml_on_this_gpu_less_machine() -> None:
    sample = GpuProbe(nvml=LiveNvml()).read()
    assert sample.gpus == [] and sample.source is None
    assert "NVML unavailable" in sample.nvml_error


def test_rtx4090_fixture_reports_unsupported_fields_as_absent() -> None:
    sample = GpuProbe(nvml=FixtureNvml(RTX_4090_1X)).read()
    (gpu,) = sample.gpus
    assert gpu.name == "NVIDIA GeForce RTX 4090" and gpu.compute_capability == "8.9"
    assert gpu.memory_total_bytes == 24564 * 1024**2 and gpu.power_limit_w == 450.0
    assert (gpu.pcie_gen_max, gpu.pcie_width_max) == (4, 16)
    # GeForce: NVML answers "not supported", which must read as "not reported", not as zero.
    assert gpu.nvlink_active_links is None and gpu.ecc_volatile_uncorrected is None
    assert gpu.remapped_rows_pending is None and gpu.retired_pages_pending is None
    assert gpu.topology == []
    assert "constructed" in sample.source and "not recorded" in sample.source


def test_degraded_fixture_shows_each_fault() -> None:
    gpus = GpuProbe(nvml=FixtureNvml(H100_SXM_8X_DEGRADED)).read().gpus
    assert gpus[2].throttle_reasons == ["SwThermalSlowdown", "HwThermalSlowdown"] and gpus[2].temperature_c == 89
    assert gpus[5].ecc_volatile_uncorrected == 1 and gpus[5].remapped_rows_pending and not gpus[5].remapped_rows_failure
    assert gpus[6].nvlink_active_links == 16
    assert (gpus[7].pcie_width_current, gpus[7].pcie_width_max) == (8, 16)
    assert gpus[0].throttle_reasons == ["GpuIdle"] and gpus[0].nvlink_active_links == 18


def test_fixture_topology_maps_nvml_levels(tmp_path: Path) -> None:
    data = json.loads(Path(H100_SXM_8X).read_text())
    for device in data["devices"]:
        del device["nvmlDeviceGetP2PStatus"]  # PCIe-only node: no NVLink P2P
    path = tmp_path / "pcie.json"
    path.write_text(json.dumps(data))
    topology = {link.peer_index: link.link for link in GpuProbe(nvml=FixtureNvml(path)).read().gpus[0].topology}
    assert topology == {1: "host_bridge", 2: "host_bridge", 3: "host_bridge", 4: "system", 5: "system", 6: "system", 7: "system"}


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "cannot be read as JSON"),
        ('{"kind": "other"}', "not an ftwiz NVML fixture"),
        ('{"kind": "ftwiz-nvml-fixture", "source": "", "devices": []}', '"source"'),
        ('{"kind": "ftwiz-nvml-fixture", "source": "constructed", "devices": {}}', '"devices"'),
    ],
)
def test_bad_fixtures_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "fixture.json"
    path.write_text(content)
    with pytest.raises(FixtureError, match=message):
        FixtureNvml(path)
    with pytest.raises(FixtureError, match="does not exist"):
        FixtureNvml(tmp_path / "absent.json")


def test_sampler_with_a_real_alternative_software_probe(tmp_path: Path) -> None:
    calls: list[str] = []

    def probe(python: str) -> SoftwareVersions:
        calls.append(python)
        return SoftwareVersions(python_executable=python, python="3.11.0", torch="2.4.0", probed_at=time.time())

    sampler = Sampler(nvml=FixtureNvml(H100_SXM_8X), interval_s=0.05, disk_paths=[str(tmp_path)], python="/opt/py", software_probe=probe)
    sampler.start()
    try:
        first = sampler.latest
        assert first is not None and len(first.gpu.gpus) == 8
        deadline = time.monotonic() + 10
        while (sampler.latest is first or sampler.software is None) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sampler.latest is not first, "the background thread keeps sampling"
        assert sampler.software.torch == "2.4.0" and calls == ["/opt/py"]
        cache = ReportCache(sampler, node_name="unit")
        report = NodeReport.model_validate_json(cache.report_json(now=1234.5))
        assert report.time_unix == 1234.5 and report.node_name == "unit" and len(report.gpus) == 8
        assert NodeReport.model_validate_json(cache.report_json(now=99.0)).time_unix == 99.0
    finally:
        sampler.stop()


def test_run_ids_are_validated_before_any_scan() -> None:
    for bad in ("", "a b", "x" * 65, "../../etc", "id\n"):
        with pytest.raises(ValueError):
            find_run_processes(bad)
    assert find_run_processes("no-such-run-" + str(time.time_ns())) == []


def test_refresh_software_reuses_a_fresh_probe() -> None:
    calls: list[str] = []

    def probe(python: str) -> SoftwareVersions:
        calls.append(python)
        return SoftwareVersions(python_executable=python, python=str(len(calls)))

    sampler = Sampler(nvml=FixtureNvml(RTX_4090_1X), python="/opt/py", software_probe=probe)
    first, ran = sampler.refresh_software()
    assert ran and first.python == "1"
    reused, ran = sampler.refresh_software(max_age_s=3600)
    assert not ran and reused is first and calls == ["/opt/py"]
    again, ran = sampler.refresh_software(max_age_s=0)
    assert ran and again.python == "2"


def test_committed_fixtures_match_their_generator() -> None:
    """The JSON files are exactly what agent/fixtures/make_fixtures.py writes (values traceable to it)."""
    from agent.fixtures import make_fixtures

    for path, data in (
        (H100_SXM_8X, make_fixtures.h100_node()),
        (H100_SXM_8X_DEGRADED, make_fixtures.h100_node(degraded=True)),
        (RTX_4090_1X, make_fixtures.rtx4090_workstation()),
    ):
        assert json.loads(Path(path).read_text()) == data, f"{path} differs: run python -m agent.fixtures.make_fixtures"
        assert "constructed from NVIDIA documentation, not recorded" in data["source"]


def test_the_version_probe_script_is_the_workloads_file_and_its_marker_matches(tmp_path: Path) -> None:
    """The agent reads back the line the script marks: both sides must use the same marker."""
    import subprocess
    import sys

    from agent.probes import software
    from agent.workloads import versions

    assert software._MARKER == versions.MARKER
    assert software.probe_script() == Path(versions.__file__).read_text(encoding="utf-8")
    # The text runs standalone (as the training interpreter runs it: -c, outside the repository).
    out = subprocess.run([sys.executable, "-I", "-c", software.probe_script()], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith(versions.MARKER))
    assert json.loads(line[len(versions.MARKER):])["python"] == ".".join(map(str, sys.version_info[:3]))
