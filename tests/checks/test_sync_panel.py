"""The Job step's sync forecast panel, from a constructed forecast (no cluster): what it says and when it hides."""

from __future__ import annotations

import types

from shared import catalog, syncplan
from shared.config import ClusterConfig, FtwizConfig, JobConfig, NodeConfig
from tests.checks.conftest import tiny_llama_config
from tests.checks.test_mesh_heatmap import fixture_mesh
from tui.app.render import Palette
from tui.app.widgets.job.sync_panel import SyncPanel, forecast_for, render_forecast


def test_panel_states_sync_share_speedup_and_levers():
    arch = catalog.arch_from_hf_config(tiny_llama_config())
    forecast = syncplan.forecast(arch, JobConfig(method="full", sharding="ddp", grad_accum_steps=2), ranks=3, nodes=3,
                                 gbit_per_s=0.1, link="node2 → node0", compute_s=0.02,
                                 without_slowest=("node2", 2, 3.0, 0.2))
    lines = render_forecast(forecast, Palette()).plain.splitlines()
    assert lines[0].startswith(f"Gradient sync {forecast.sync_s:.2f} s/step") and "over node2 → node0 (0.10 Gbit/s)" in lines[0]
    assert lines[1].startswith(f"{forecast.share:.0%} of each step; 3 nodes ≈ {forecast.speedup:.1f}x one node")
    assert [line.split(":")[0] for line in lines[2:]] == ["• grad_accum_steps = 4", '• method = "lora"', "• leave out node2"]


def test_no_mesh_no_panel():
    config = FtwizConfig(cluster=ClusterConfig(), nodes=[NodeConfig(name=n, host=f"10.0.0.{i}") for i, n in enumerate(["a", "b"])])
    assert forecast_for(config, types.SimpleNamespace(nodes={}), None) is None
    panel = SyncPanel()
    panel.show(None, Palette())
    assert panel.display is False


def test_forecast_for_an_unknown_model_is_none_not_an_error():
    nodes = [NodeConfig(name=n, host=f"10.0.0.{i + 1}") for i, n in enumerate(["node0", "node1", "node2", "node3"])]
    config = FtwizConfig(cluster=ClusterConfig(), nodes=nodes, job=JobConfig(model="/nonexistent/model"))
    assert forecast_for(config, types.SimpleNamespace(nodes={}), fixture_mesh()) is None
