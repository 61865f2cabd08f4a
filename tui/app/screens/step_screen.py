"""Base of the four wizard steps: a ``Screen[str]`` that dismisses with the step to show next."""

from __future__ import annotations

from typing import ClassVar, cast

from textual.binding import Binding, BindingType
from textual.screen import Screen

from tui.app.steps import next_step, previous_step
from tui.app.wizard import Wizard

__all__ = ["StepScreen"]


class StepScreen(Screen[str]):
    """A wizard step. The app's wizard worker pushes it and waits for the next step's name."""

    STEP: ClassVar[str] = ""
    """This step's name in :data:`tui.app.steps.STEPS`."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+n", "goto_next", "Next step", show=False),
        Binding("ctrl+b", "goto_previous", "Previous step", show=False),
    ]

    @property
    def wizard(self) -> Wizard:
        """The app, as the steps may use it (:class:`tui.app.wizard.Wizard`)."""
        return cast(Wizard, self.app)

    def goto(self, step: str) -> None:
        """Leave this step for ``step`` (the wizard worker pushes it)."""
        if step != self.STEP and self.is_active:
            self.dismiss(step)

    def action_goto_next(self) -> None:
        """Go to the following step."""
        self.goto(next_step(self.STEP))

    def action_goto_previous(self) -> None:
        """Go to the step before."""
        self.goto(previous_step(self.STEP))
