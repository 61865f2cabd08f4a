"""The line at the top of every step: where you are, how to jump, and whether the config is saved."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import Reactive, reactive
from textual.widget import Widget

from tui.app.render import Palette
from tui.app.steps import STEPS

__all__ = ["StepBar"]


class StepBar(Widget):
    """``F2 Cluster › F3 Job › F4 Checklist › F5 Launch  ● unsaved  ftwiz.toml``."""

    DEFAULT_CSS = """
    StepBar { height: 1; background: $panel; color: $text; }
    """

    current: Reactive[str] = reactive("cluster")
    """Name of the step being shown."""
    dirty: Reactive[bool] = reactive(False)
    """The config differs from the file on disk."""
    source: Reactive[str] = reactive("")
    """Where the config lives (path, or the embedded default)."""

    def __init__(self, current: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.set_reactive(StepBar.current, current)

    def on_mount(self) -> None:
        # The app owns the saved/unsaved flag; mirror it so every step shows the same marker.
        self.watch(self.app, "dirty", self._follow_dirty, init=True)
        self.watch(self.app, "config_label", self._follow_source, init=True)

    def _follow_dirty(self, dirty: bool) -> None:
        self.dirty = dirty

    def _follow_source(self, label: str) -> None:
        self.source = label

    def render(self) -> Text:
        palette = Palette.from_app(self.app)
        text = Text(no_wrap=True, overflow="ellipsis")
        for number, step in enumerate(STEPS):
            if number:
                text.append("›")
            style = f"bold reverse {palette.accent}" if step.name == self.current else ""
            text.append(f" {step.key.upper()} {step.title} ", style=style)
        if self.dirty:  # before the path, so a long path never pushes it off a narrow screen
            text.append("  ● unsaved", style=f"bold {palette.warn}")
        text.append("  ")
        text.append(self.source, style="dim")
        return text
