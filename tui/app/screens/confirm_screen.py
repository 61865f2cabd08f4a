"""A yes/no (or several-choice) question in a modal dialog."""

from __future__ import annotations

from typing import ClassVar, Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

__all__ = ["ConfirmScreen"]


class ConfirmScreen(ModalScreen[str]):
    """Ask ``question``; dismiss with the id of the chosen button (Escape picks ``cancel``)."""

    CSS_PATH = "modal.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "choose('cancel')", "Cancel")]

    def __init__(self, question: str, choices: Sequence[tuple[str, str, str]], *, title: str = "Confirm") -> None:
        """``choices`` are ``(id, label, variant)``; the first one has the focus."""
        super().__init__()
        self._question = question
        self._choices = list(choices)
        self._title = title

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = self._title
            yield Static(self._question, id="question")
            with Horizontal(id="buttons"):
                for choice_id, label, variant in self._choices:
                    yield Button(label, id=choice_id, variant=variant)  # type: ignore[arg-type]

    def on_mount(self) -> None:
        self.query_one("#buttons Button").focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        """Dismiss with ``choice``."""
        self.dismiss(choice)
