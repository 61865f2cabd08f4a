"""Add or edit one ``[[nodes]]`` entry; the config's own pydantic models validate it."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional

from pydantic import ValidationError
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from shared.config import NodeConfig

__all__ = ["NODE_FIELDS", "NodeFormScreen", "parse_gpus"]

NODE_FIELDS: list[tuple[str, str, str]] = [
    ("name", "Name", "node0"),
    ("host", "Host", "192.168.1.100"),
    ("ssh_user", "SSH user", "default: ~/.ssh/config, then $USER"),
    ("ssh_port", "SSH port", "default: ~/.ssh/config, then 22"),
    ("ssh_key", "SSH key", "default: ssh-agent and ~/.ssh/config"),
    ("gpus", "GPUs", 'all, a count, or indices like 0,1'),
    ("python", "Python", "python3"),
    ("workdir", "Workdir", "~/ftwiz"),
    ("agent_port", "Agent port", "default: [cluster] agent_port"),
]
"""``(field, label, placeholder)`` in form order."""


def parse_gpus(text: str) -> Any:
    """``all`` / ``4`` / ``0,1`` as the config's ``gpus`` value (left as text when it is none of these)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "," in text:
        try:
            return [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            return text
    return text


def _field_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class NodeFormScreen(ModalScreen[Optional[NodeConfig]]):
    """A form over :class:`NodeConfig`; dismisses with the validated node, or None when cancelled.

    ``check`` validates the node against the whole config (unique names, master) and returns an
    error message or None.
    """

    CSS_PATH = "modal.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "submit", "Save node", priority=True),
    ]

    def __init__(self, node: Optional[NodeConfig], check: Callable[[NodeConfig], Optional[str]]) -> None:
        super().__init__()
        self._node = node
        self._check = check

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = f"Edit node {self._node.name}" if self._node else "Add node"
            with VerticalScroll(id="node-fields"):
                for field, label, placeholder in NODE_FIELDS:
                    value = getattr(self._node, field) if self._node else None
                    with Horizontal(classes="field-row"):
                        yield Label(label)
                        yield Input(_field_text(value), placeholder=placeholder, id=f"node-{field}", compact=True)
                    yield Static("", id=f"error-{field}", classes="field-error")
            yield Static("", id="error-form", classes="field-error")
            with Horizontal(id="buttons"):
                yield Button("Save node", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#node-name", Input).focus()

    def values(self) -> dict[str, Any]:
        """The form as config values: empty fields are left out so their defaults apply."""
        data: dict[str, Any] = {}
        for field, _, _ in NODE_FIELDS:
            text = self.query_one(f"#node-{field}", Input).value.strip()
            if not text:
                continue
            data[field] = parse_gpus(text) if field == "gpus" else text
        if self._node is not None and self._node.local:
            data["local"] = True  # the form has no switch for it; keep the embedded node local
        return data

    def validate(self) -> Optional[NodeConfig]:
        """Validate the form; show each error under its field and return None if any."""
        for field, _, _ in NODE_FIELDS:
            self._error(f"#error-{field}", "")
        self._error("#error-form", "")
        try:
            node = NodeConfig.model_validate(self.values())
        except ValidationError as exc:
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else "form"
                message = error["msg"].removeprefix("Value error, ")
                if error["type"] == "missing":
                    message = "required"
                target = f"#error-{field}" if field in {f for f, _, _ in NODE_FIELDS} else "#error-form"
                self._error(target, f"{field}: {message}")
            return None
        problem = self._check(node)
        if problem:
            self._error("#error-form", problem)
            return None
        return node

    def _error(self, selector: str, message: str) -> None:
        error = self.query_one(selector, Static)
        error.update(message)
        error.set_class(bool(message), "-shown")

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        self.action_submit()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_submit()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.action_cancel()

    def action_submit(self) -> None:
        """Validate and, if clean, dismiss with the node."""
        node = self.validate()
        if node is not None:
            self.dismiss(node)

    def action_cancel(self) -> None:
        """Close without changes."""
        self.dismiss(None)
