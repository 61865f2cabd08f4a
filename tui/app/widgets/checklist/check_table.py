"""One row per check result: status, title, node, detail; running checks show as pending rows."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from rich.text import Text
from textual.widgets import DataTable

from tui.app.engines import check_title
from tui.app.render import Palette

__all__ = ["CheckTable", "STATUS_GLYPH", "row_key"]

STATUS_GLYPH = {"pass": "✔ pass", "warn": "▲ warn", "fail": "✖ fail", "skip": "– skip", "running": "⋯ run"}
"""How each status reads in the first column (text, not only colour)."""


def row_key(result: Any) -> str:
    """A stable key for a result row: check id plus node (one check gives a row per node)."""
    return f"{result.id}@{result.node or '*'}"


class CheckTable(DataTable):
    """The checklist's results in the engine's order."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row")
        self._keys: list[str] = []
        self._results: dict[str, Any] = {}

    def on_mount(self) -> None:
        title, detail = self._widths()
        self.add_column("Status", key="status", width=7)
        self.add_column("Check", key="title", width=title)
        self.add_column("Node", key="node", width=8)
        self.add_column("Detail", key="detail", width=detail)

    def _widths(self) -> tuple[int, int]:
        # Titles get 30 cells on a wide terminal, 22 on 80 columns; the detail takes the rest
        # (cell padding 2 per column, a scrollbar 2).
        width = self.size.width or 80
        title = 30 if width >= 110 else 22
        return title, max(width - (7 + title + 8) - 8 - 2, 20)

    def on_resize(self) -> None:
        title, detail = self._widths()
        changed = False
        for key, value in (("title", title), ("detail", detail)):
            column = self.columns.get(key)  # type: ignore[call-overload]
            if column is not None and column.width != value:
                column.width = value
                changed = True
        if changed:
            self._require_update_dimensions = True
            self.refresh()

    def show(self, results: Sequence[Any], palette: Palette, *, running: Sequence[str] = ()) -> None:
        """Draw ``results`` (CheckResult-like) and, as pending rows, the check ids in ``running``."""
        selected = self.selected_key
        self.clear()
        self._keys, self._results = [], {}
        for result in results:
            key = row_key(result)
            if key in self._results:
                continue
            self._results[key] = result
            self._keys.append(key)
            self.add_row(*self._cells(result, palette), key=key)
        for check_id in running:
            key = f"{check_id}@running"
            self._keys.append(key)
            self.add_row(Text(STATUS_GLYPH["running"], style=palette.muted), Text(check_title(check_id), style=palette.muted, no_wrap=True, overflow="ellipsis"),
                         Text(""), Text(f"running… [{check_id}]", style=palette.muted), key=key)
        if selected in self._keys:
            self.move_cursor(row=self._keys.index(selected), animate=False)

    @property
    def selected_key(self) -> Optional[str]:
        """The row under the cursor."""
        if not self._keys or not 0 <= self.cursor_row < len(self._keys):
            return None
        return self._keys[self.cursor_row]

    @property
    def selected_result(self) -> Optional[Any]:
        """The result under the cursor (None for a running row)."""
        key = self.selected_key
        return self._results.get(key) if key else None

    def _cells(self, result: Any, palette: Palette) -> list[Text]:
        colour = {"pass": palette.ok, "warn": palette.warn, "fail": palette.bad, "skip": palette.muted}.get(result.status, "")
        strong = "bold " if result.status == "fail" else ""
        return [
            Text(STATUS_GLYPH.get(result.status, result.status), style=f"{strong}{colour}", no_wrap=True),
            Text(result.title, no_wrap=True, overflow="ellipsis"),
            Text(result.node or "all", no_wrap=True, overflow="ellipsis", style=palette.muted if not result.node else ""),
            Text(result.detail.replace("\n", " "), no_wrap=True, overflow="ellipsis"),
        ]
