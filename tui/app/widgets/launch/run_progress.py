"""Step progress with ETA, from the launcher's progress snapshot."""

from __future__ import annotations

from typing import Any, Optional

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import ProgressBar, Static

__all__ = ["RunProgress", "fmt_duration"]


def fmt_duration(seconds: Optional[float]) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``—`` when unknown."""
    if seconds is None:
        return "—"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class RunProgress(Horizontal):
    """``[████░░░] step 12/100 · ETA 3m05s`` (the ETA is the launcher's, from its recent step rate)."""

    def compose(self) -> ComposeResult:
        yield ProgressBar(id="run-bar", show_eta=False, show_percentage=True)
        yield Static("no run yet", id="run-step")

    def show(self, snapshot: Optional[Any], *, finished: bool = False, allreduce_sizes: Optional[int] = None) -> None:
        """Draw ``snapshot`` (a ``ProgressSnapshot``; None before the first line).

        ``allreduce_sizes`` is how many message sizes the all-reduce check sweeps (its progress unit);
        ``finished`` stills the bar (no indeterminate animation after the run).
        """
        bar = self.query_one("#run-bar", ProgressBar)
        label = self.query_one("#run-step", Static)
        if snapshot is None:
            bar.update(total=1, progress=0)  # a still bar: nothing is known yet
            label.update("no progress yet")
            return
        from tui.launch.progress import format_progress  # the headless line, so both modes read the same

        if snapshot.total_steps:
            bar.update(total=snapshot.total_steps, progress=snapshot.step or 0)
            label.update(format_progress(snapshot))
        elif snapshot.step is not None:  # a plain loop without a total: step and loss, as the headless line says
            bar.update(total=None if not finished else 1, progress=1 if finished else 0)
            label.update(format_progress(snapshot))
        elif allreduce_sizes:
            measured = len({row.get("size_bytes") for row in snapshot.allreduce})
            bar.update(total=allreduce_sizes, progress=min(measured, allreduce_sizes))
            label.update(f"all-reduce: {measured}/{allreduce_sizes} sizes measured")
        elif finished:
            bar.update(total=1, progress=1)
            label.update("finished")
        else:
            bar.update(total=None)
            started = f"{snapshot.ranks_started}/{snapshot.world_size}" if snapshot.world_size else str(snapshot.ranks_started)
            label.update(f"waiting for the first step · ranks started {started}")
