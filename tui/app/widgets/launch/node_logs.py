"""Logs per node in tabs, filterable by rank."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from rich.text import Text
from textual.widgets import RichLog, TabbedContent, TabPane

__all__ = ["NodeLogs", "parse_ranks"]

MAX_LINES = 5000
"""Lines kept on screen per node; everything is also in runs/<run-id>/<node>.log."""


def parse_ranks(text: str) -> Optional[set[int]]:
    """``"0, 2-3"`` → ``{0, 2, 3}``; blank → None (all ranks). Raises ValueError on anything else."""
    text = text.strip()
    if not text:
        return None
    ranks: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            try:
                first, last = int(low), int(high)
            except ValueError:
                raise ValueError(f"{part!r} is not a range like 2-3") from None
            if last < first:
                raise ValueError(f"{part}: the range runs backwards")
            ranks.update(range(first, last + 1))
        else:
            try:
                ranks.add(int(part))
            except ValueError:
                raise ValueError(f"{part!r} is not a rank number") from None
    return ranks


class NodeLogs(TabbedContent):
    """A ``TabPane`` with a ``RichLog`` per node; lines whose rank is filtered out are not shown."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._node_names: list[str] = []
        self.ranks: Optional[set[int]] = None
        """Ranks shown (None: all, including torchrun's own rank-less lines)."""

    def _pane_id(self, node: str) -> str:
        return f"log-{self._node_names.index(node)}"

    async def set_nodes(self, nodes: Sequence[str]) -> None:
        """One tab per node, in this order (existing tabs are replaced)."""
        if list(nodes) == self._node_names:
            return
        await self.clear_panes()
        self._node_names = list(nodes)
        for node in self._node_names:
            await self.add_pane(TabPane(node, RichLog(max_lines=MAX_LINES, wrap=False, markup=False, id=f"{self._pane_id(node)}-log"), id=self._pane_id(node)))
        if self._node_names:
            self.active = self._pane_id(self._node_names[0])

    def shows(self, rank: Optional[int]) -> bool:
        """Whether a line of ``rank`` passes the filter."""
        return self.ranks is None or (rank is not None and rank in self.ranks)

    def append(self, node: str, lines: Iterable[tuple[Optional[int], str]]) -> None:
        """Write ``(rank, text)`` lines to ``node``'s tab, skipping filtered ranks."""
        if node not in self._node_names:
            return
        log = self.query_one(f"#{self._pane_id(node)}-log", RichLog)
        for rank, text in lines:
            if self.shows(rank):
                log.write(Text(f"[{'-' if rank is None else rank}] {text}", no_wrap=True))

    def rewrite(self, node: str, lines: Iterable[tuple[Optional[int], str]]) -> None:
        """Clear ``node``'s tab and write ``lines`` again (after the filter changed)."""
        if node not in self._node_names:
            return
        self.query_one(f"#{self._pane_id(node)}-log", RichLog).clear()
        self.append(node, lines)
