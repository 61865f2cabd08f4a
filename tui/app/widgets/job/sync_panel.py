"""The gradient-sync forecast beside the memory bars: bytes per step, seconds over the slowest link, the
share of the step, and the levers in numbers. Hidden until the checklist has measured the mesh."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from shared.syncplan import DOMINATES, SyncForecast
from tui.app.render import Palette

__all__ = ["SyncPanel", "forecast_for", "render_forecast"]


def forecast_for(config: Any, cluster: Any, mesh: Any) -> SyncForecast | None:
    """The forecast for ``config``'s job over ``mesh`` with the reports ``cluster`` holds; None without a mesh."""
    if mesh is None or config.job.workload != "sft" or len(config.nodes) < 2:
        return None
    from tui.checks.resources import resolve_arch
    from tui.checks.sync import sync_forecast

    arch = resolve_arch(config).arch
    if arch is None:
        return None
    reports = {name: view.report for name, view in cluster.nodes.items() if view.report is not None}
    try:
        return sync_forecast(config, reports, mesh, arch)
    except ValueError:  # a node renamed since the mesh was measured, a link without bandwidth
        return None


def render_forecast(forecast: SyncForecast, palette: Palette) -> Text:
    """Three to five lines: the sync per step, the share and speedup, the levers."""
    text = Text()
    text.append("Gradient sync ", style="bold")
    text.append(f"{forecast.sync_s:.2f} s/step", style=f"bold {palette.accent}")
    text.append(f"  {forecast.bytes_per_step / 1e6:.1f} MB over {forecast.link} ({forecast.gbit_per_s:.2f} Gbit/s)\n",
                style=palette.muted)
    if forecast.share is not None:
        colour = palette.bad if forecast.share > DOMINATES else palette.ok
        text.append(f"{forecast.share:.0%} of each step", style=f"bold {colour}")
        if forecast.speedup is not None:
            text.append(f"; {forecast.nodes} nodes ≈ {forecast.speedup:.1f}x one node", style=palette.text)
        text.append("\n")
    else:
        text.append("share unknown: no compute estimate for these GPUs\n", style=palette.muted)
    for lever in forecast.levers:
        text.append(f"• {lever.change}: ", style=f"bold {palette.accent}")
        text.append(f"{lever.effect}\n", style=palette.muted)
    text.rstrip()
    return text


class SyncPanel(Static):
    """The forecast, or nothing (hidden) before the mesh is measured."""

    DEFAULT_CSS = """
    SyncPanel {
        height: auto;
        padding: 0 1;
    }
    """

    def on_mount(self) -> None:
        self.display = False  # until a forecast arrives: the Job step looks as before the mesh

    def show(self, forecast: SyncForecast | None, palette: Palette) -> None:
        """Draw ``forecast``; None hides the panel."""
        self.display = forecast is not None
        if forecast is not None:
            self.update(render_forecast(forecast, palette))
