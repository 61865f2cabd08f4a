"""F1: every key binding of the step underneath, the app's own, and the step keys."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from tui.app.steps import STEPS

__all__ = ["HelpScreen"]


class HelpScreen(ModalScreen[None]):
    """A modal list of keys; Escape, F1 or q closes it."""

    CSS_PATH = "modal.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q", "dismiss", "Close help"),
    ]

    def __init__(self, under: Screen) -> None:
        super().__init__()
        self._under = under

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog", classes="help") as scroll:
            scroll.border_title = "Keys"
            yield Static(self._table(), id="help-keys")
            yield Static("Tab / Shift+Tab move between fields and panes; arrows move in tables and tabs; "
                         "Ctrl+P opens the command palette (themes). Escape closes this.", id="help-hint")

    def _table(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        table.add_column(style="dim")
        step_name = getattr(self._under, "STEP", "") or "this"
        rows: list[tuple[str, str, str]] = [(step.key.upper(), f"Go to the {step.title} step", "everywhere") for step in STEPS]
        rows.append(("Ctrl+N / Ctrl+B", "Next / previous step", "everywhere"))
        own: list[tuple[str, str, str]] = []
        seen: set[str] = set()
        for active in self._under.active_bindings.values():
            binding = active.binding
            if binding.system or not binding.description or binding.action.startswith("goto"):
                continue
            if active.node is not self.app and active.node is not self._under:
                continue  # widgets' own keys (arrows in tables and tabs) are summed up below the table
            if any(word in binding.action for word in ("copy", "focus_next", "focus_previous", "command_palette")):
                continue  # Textual's own keys, summed up below the table too
            key = self.app.get_key_display(binding)
            if key in seen:
                continue
            seen.add(key)
            if active.node is self.app:
                rows.append((key, binding.description, "everywhere"))
            else:
                own.append((key, binding.description, f"{step_name} step"))
        for key, description, where in rows + own:
            table.add_row(Text(key), description, where)
        return table
