"""How the run ended: the failed node/rank with its last lines and the offer to resume, or the result."""

from __future__ import annotations

from typing import Any, Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static

from tui.app.render import Palette

__all__ = ["RunOutcome"]


class RunOutcome(VerticalScroll):
    """Hidden while a run goes; after it ends, the verdict (and a Resume button after a failure)."""

    def compose(self) -> ComposeResult:
        yield Static(id="outcome-body")
        with Horizontal(id="outcome-buttons"):
            yield Button("Resume from the last checkpoint (u)", id="resume", variant="warning", compact=True)

    def show(self, result: Optional[Any], snapshot: Optional[Any], palette: Palette, *, can_resume: bool, why: str = "") -> None:
        """Draw a ``RunResult`` (None hides the panel); ``why``: the failure doctor's first diagnosis."""
        self.display = result is not None
        if result is None:
            return
        body: list[Any] = []
        ok = result.status == "succeeded"
        colour = palette.ok if ok else palette.warn if result.status in ("stopped", "detached") else palette.bad
        head = Text(f"Run {result.run_id}: {result.status}", style=f"bold {colour}")
        if result.reason:
            head.append(f" — {result.reason}", style="")
        body.append(head)
        if result.failed_node or result.failed_rank is not None:
            rank = f" rank {result.failed_rank}" if result.failed_rank is not None else ""
            body.append(Text(f"Failed: {result.failed_node or '?'}{rank}", style=f"bold {palette.bad}"))
        shown_lines = 8
        if why and not ok:
            # The cause and its fix, two lines (the evidence and the rest: ftwiz --why RUN_ID); two fewer last lines.
            parts = why.splitlines()
            body.append(Text(parts[0], style=f"bold {palette.bad}", no_wrap=True, overflow="ellipsis"))
            fix = next((p.strip() for p in parts[1:] if p.strip().startswith("fix:")), "")
            body.append(Text(f"  {fix}  (all: ftwiz --why {result.run_id})".replace("    ", "  "), no_wrap=True, overflow="ellipsis"))
            shown_lines = 6
        if result.last_lines:
            body.append(Text("Last lines:", style=palette.muted))
            body.extend(Text("  " + line, no_wrap=True, overflow="ellipsis") for line in result.last_lines[-shown_lines:])
        if result.leftovers:
            left = ", ".join(f"{node}: {pids}" for node, pids in result.leftovers.items())
            body.append(Text(f"Processes that survived the stop: {left}", style=palette.bad))
        if result.unreaped:
            body.append(Text(f"Not reaped yet (unreachable): {', '.join(result.unreaped)} — they are reaped when they answer again", style=palette.warn))
        if snapshot is not None and snapshot.allreduce:
            body.append(_allreduce_table(snapshot.allreduce))
        self.query_one("#outcome-body", Static).update(Group(*body))
        self.query_one("#outcome-buttons").display = can_resume and not ok


def _allreduce_table(rows: tuple[dict, ...]) -> Table:
    table = Table(box=None, padding=(0, 2), title="all-reduce (busbw = algbw × 2(n−1)/n)", title_justify="left")
    table.add_column("size", justify="right")
    table.add_column("algbw GB/s", justify="right")
    table.add_column("busbw GB/s", justify="right")
    table.add_column("correct")
    for row in rows:
        size = row.get("size_bytes") or 0
        table.add_row(f"{size / 2**20:g} MiB", _num(row.get("algbw_gbps")), _num(row.get("busbw_gbps")), "yes" if row.get("correct") else "NO")
    return table


def _num(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "—"
