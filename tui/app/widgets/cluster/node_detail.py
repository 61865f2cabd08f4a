"""The selected node in full: GPUs and their processes, NICs and IB ports, software, disks, host."""

from __future__ import annotations

from typing import Optional

from rich.console import Group
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from shared.models import GpuInfo, NodeReport
from tui.app.cluster_state import HISTORY_SECONDS, NodeView
from tui.app.render import Palette, fmt_bytes, fmt_gib, hbar, sparkline
from tui.app.widgets.cluster.node_table import short_gpu_name

__all__ = ["NodeDetail"]


class NodeDetail(VerticalScroll):
    """A scrollable pane; ``show(view)`` redraws it for the node under the table's cursor."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._view: Optional[NodeView] = None
        self._palette = Palette()
        self._height: Optional[tuple[int, int]] = None  # (width, lines) of the last drawing

    def compose(self):
        yield Static(id="detail-body")

    def show(self, view: Optional[NodeView], palette: Palette) -> None:
        """Redraw for ``view`` (None: no node selected)."""
        self._view, self._palette = view, palette
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        body = self.query_one("#detail-body", Static)
        view = self._view
        if view is None:
            self._height = None
            body.update(Text("Select a node (↑/↓) to see its GPUs, network, software and disks.", style=self._palette.muted))
            return
        title = f"{view.name} · {view.host}"
        if self.border_title != title:
            self.border_title = title
        width = max(self.scrollable_content_region.width, 40)
        lines = _sections(view, self._palette, width)
        # A refresh usually changes values, not the number of lines: then repaint without a layout pass
        # of the whole screen (most of a 64-node refresh's cost otherwise).
        height = (width, sum(1 if line.no_wrap else len(line.wrap(self.app.console, width)) for line in lines))
        body.update(Group(*lines), layout=height != self._height)
        self._height = height


def _sections(view: NodeView, palette: Palette, width: int) -> list[Text]:
    lines: list[Text] = []
    report = view.report
    if view.state != "up":
        lines.append(Text(f"{view.state.upper()}: {view.error or 'no answer yet'}", style=f"bold {palette.bad}" if view.state != "pending" else palette.muted))
        if report is not None:
            lines.append(Text("Last values reported before it stopped answering:", style=palette.muted))
    if report is None:
        return lines
    lines += _gpu_section(report, view, palette, width)
    lines += _network_section(report, palette)
    lines += _software_section(report, palette)
    lines += _disk_section(report, palette)
    lines += _host_section(report, palette)
    return lines


def _heading(title: str, palette: Palette, extra: str = "") -> Text:
    text = Text(title, style=f"bold {palette.accent}")
    if extra:
        text.append(f"  {extra}", style=palette.muted)
    return text


def _gpu_section(report: NodeReport, view: NodeView, palette: Palette, width: int) -> list[Text]:
    facts = []
    if report.driver_version:
        facts.append(f"driver {report.driver_version}")
    if report.cuda_driver_version:
        facts.append(f"CUDA {report.cuda_driver_version}")
    lines = [_heading("GPUs", palette, " · ".join(facts))]
    if report.gpu_source:
        lines.append(Text(f" values {report.gpu_source}", style=palette.muted, no_wrap=True, overflow="ellipsis"))
    if not report.gpus:
        lines.append(Text(f" no GPU ({report.nvml_error or 'none reported'})", style=palette.warn))
        return lines
    for gpu in report.gpus:
        lines.append(_gpu_line(gpu, view, palette, width))
        for process in gpu.compute_processes:
            lines.append(Text(f"     pid {process.pid} {process.name or '?'} {fmt_bytes(process.used_memory_bytes)}", style=palette.muted))
        problems = _gpu_problems(gpu)
        if problems:
            # Stated, not judged: the Checklist's gpu.* checks decide what is a problem.
            lines.append(Text(f"     {problems}", style=palette.muted, no_wrap=True, overflow="ellipsis"))
    return lines


def _gpu_line(gpu: GpuInfo, view: NodeView, palette: Palette, width: int) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f" {gpu.index:>2} {short_gpu_name(gpu.name)[:14]:<14} ")
    fraction = None
    if gpu.memory_total_bytes and gpu.memory_used_bytes is not None:
        fraction = gpu.memory_used_bytes / gpu.memory_total_bytes
    line.append_text(hbar(fraction, 10, palette))
    line.append(f" {fmt_gib(gpu.memory_used_bytes)}/{fmt_gib(gpu.memory_total_bytes)}G ")
    tail = Text(no_wrap=True)
    util = gpu.utilization_percent
    tail.append(f" {util:3.0f}%" if util is not None else "   —")
    tail.append(f" {gpu.temperature_c:3.0f}°C" if gpu.temperature_c is not None else "    —")
    if gpu.power_draw_w is not None:
        limit = f"/{gpu.power_limit_w:.0f}" if gpu.power_limit_w else ""
        tail.append(f" {gpu.power_draw_w:.0f}{limit}W")
    # Leave room for a vertical scrollbar, so the line never wraps.
    spark_width = max(min(width - len(line) - len(tail) - 3, HISTORY_SECONDS), 0)
    if spark_width >= 5:
        history = list(view.gpu_util.get(gpu.index, []))
        line.append_text(sparkline(history, spark_width, window=HISTORY_SECONDS, style=palette.accent))
    line.append_text(tail)
    return line


def _gpu_problems(gpu: GpuInfo) -> str:
    problems = []
    if gpu.throttle_reasons:
        problems.append("clock reasons: " + ", ".join(gpu.throttle_reasons))
    if gpu.ecc_volatile_uncorrected:
        problems.append(f"{gpu.ecc_volatile_uncorrected} uncorrected ECC errors")
    if gpu.retired_pages_pending or gpu.remapped_rows_pending:
        problems.append("page retirement / row remap pending (reset the GPU)")
    if gpu.remapped_rows_failure:
        problems.append("row remap failed: the GPU needs service")
    return "; ".join(problems)


def _network_section(report: NodeReport, palette: Palette) -> list[Text]:
    lines = [_heading("Network", palette, "nvidia_peermem loaded" if report.nvidia_peermem_loaded else "")]
    name_width = max([10] + [len(nic.name) for nic in report.nics])
    for nic in report.nics:
        addresses = " ".join(f"{a.address}/{a.prefixlen}" if a.prefixlen is not None else a.address for a in nic.addresses if a.family == "ipv4")
        flags = []
        if nic.mtu:
            flags.append(f"mtu {nic.mtu}")
        if nic.speed_mbps:
            flags.append(f"{nic.speed_mbps} Mb/s")
        flags.append("up" if nic.is_up else "down" if nic.is_up is False else "?")
        if nic.default_route:
            flags.append("default route")
        if nic.is_loopback:
            flags.append("loopback")
        lines.append(Text(f" {nic.name:<{name_width}} {addresses or '—':<20} {' · '.join(flags)}", no_wrap=True, overflow="ellipsis",
                          style=palette.muted if nic.is_loopback or nic.is_up is False else ""))
    if not report.nics:
        lines.append(Text(" no interfaces reported", style=palette.muted))
    for port in report.ib_ports:
        active = (port.state or "").upper().endswith("ACTIVE")
        lines.append(Text(
            f" IB {port.device}:{port.port} {port.state or '?'} {port.phys_state or ''} {port.rate or ''} {port.link_layer or ''}"
            + (f" ({port.netdev})" if port.netdev else ""),
            style="" if active else palette.warn, no_wrap=True, overflow="ellipsis"))
    return lines


def _software_section(report: NodeReport, palette: Palette) -> list[Text]:
    software = report.software
    if software is None:
        return [_heading("Software", palette), Text(" not probed yet", style=palette.muted)]
    lines = [_heading("Software", palette, software.python_executable)]
    if software.error:
        lines.append(Text(f" {software.error}", style=palette.bad))
    parts = []
    for label, value in (("python", software.python), ("torch", software.torch), ("CUDA", software.torch_cuda),
                         ("NCCL", software.nccl), ("transformers", software.transformers), ("peft", software.peft),
                         ("bitsandbytes", software.bitsandbytes), ("accelerate", software.accelerate)):
        if value is not None:
            parts.append(f"{label} {value}")
    if parts:
        lines.append(Text(" " + " · ".join(parts)))
    if software.cuda_available is False and software.torch:
        lines.append(Text(" torch sees no CUDA device", style=palette.muted))
    return lines


def _disk_section(report: NodeReport, palette: Palette) -> list[Text]:
    lines = [_heading("Disks", palette)]
    for disk in report.disks:
        if disk.error or not disk.exists:
            lines.append(Text(f" {disk.path}: {disk.error or 'not found'}", style=palette.warn))
            continue
        lines.append(Text(f" {disk.path}: {fmt_bytes(disk.free_bytes)} free of {fmt_bytes(disk.total_bytes)}"))
    if not report.disks:
        lines.append(Text(" none reported", style=palette.muted))
    return lines


def _host_section(report: NodeReport, palette: Palette) -> list[Text]:
    host = report.host
    parts = [p for p in (host.os, f"kernel {host.kernel}" if host.kernel else None,
                         f"{host.cpu_cores} CPUs" if host.cpu_cores else None,
                         f"load {host.load_avg[0]:.2f}" if host.load_avg else None,
                         f"memory {fmt_bytes(host.memory_available_bytes)} free of {fmt_bytes(host.memory_total_bytes)}" if host.memory_total_bytes else None)
             if p]
    return [_heading("Host", palette, f"{report.hostname} · agent {report.agent_version}"), Text(" " + " · ".join(parts) if parts else " —")]
