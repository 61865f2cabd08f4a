"""Step 3, Checklist: every pre-launch check with visible progress, re-runs, and the launch gate."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import DataTable, Footer, ProgressBar, Static

from shared.config import FtwizConfig
from tui.app import engines
from tui.app.messages import ConfigChanged
from tui.app.render import Palette
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.step_screen import StepScreen
from tui.app.widgets.checklist.check_detail import CheckDetail
from tui.app.widgets.checklist.check_table import CheckTable
from tui.app.widgets.checklist.mesh_heatmap import MeshHeatmap
from tui.app.widgets.common.step_bar import StepBar

__all__ = ["ChecklistScreen"]


class ChecklistScreen(StepScreen):
    """Runs the checklist engine (the one ``ftwiz --check`` runs) and shows its results."""

    STEP = "checklist"
    CSS_PATH = "checklist_screen.tcss"
    AUTO_FOCUS = "#check-table"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "run_all", "Run all"),
        Binding("space", "run_selected", "Re-run check"),
        Binding("o", "override", "Override fails"),
        Binding("l", "launch", "Launch ›"),
    ]

    def compose(self) -> ComposeResult:
        yield StepBar(self.STEP)
        with Horizontal(id="check-status-row"):
            yield Static("", id="check-summary")
            yield ProgressBar(id="check-progress", show_eta=False)
        yield CheckTable(id="check-table")
        yield CheckDetail(id="check-detail")
        yield MeshHeatmap(id="mesh-heatmap")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()

    def on_config_changed(self, message: ConfigChanged) -> None:
        self.redraw()

    # ------------------------------------------------------------------ drawing

    def redraw(self) -> None:
        """Table, detail and the summary line from the app's checklist state."""
        try:
            table = self.query_one(CheckTable)
        except NoMatches:  # the background mesh refresh ends (cancelled) after the screen's widgets are gone
            return
        checks = self.wizard.checks
        palette = Palette.from_app(self.app)
        table.show(checks.results, palette, running=checks.running)
        self._show_detail()
        self.query_one(MeshHeatmap).show(getattr(checks, "mesh", None), palette, age_s=checks.mesh_age_s(),
                                         refreshing=checks.mesh_refreshing)
        self.query_one("#check-summary", Static).update(checks.summary(self.wizard.config, palette))
        bar = self.query_one("#check-progress", ProgressBar)
        bar.update(total=max(checks.total, 1), progress=checks.done if checks.total else 0)
        bar.display = checks.in_progress

    def _show_detail(self) -> None:
        self.query_one(CheckDetail).show(self.query_one(CheckTable).selected_result, Palette.from_app(self.app))

    @on(DataTable.RowHighlighted, "#check-table")
    def _highlighted(self) -> None:
        self._show_detail()

    @on(DataTable.RowSelected, "#check-table")
    def _selected(self) -> None:
        self.action_run_selected()  # Enter on a row re-runs that check, like Space

    # ------------------------------------------------------------------ actions

    def action_run_all(self) -> None:
        """Run every check again."""
        self.run_checks(None)

    def action_run_selected(self) -> None:
        """Run the check under the cursor again (its other rows stay)."""
        result = self.query_one(CheckTable).selected_result
        if result is None:
            self.run_checks(None)
        else:
            self.run_checks(result.id)

    @work(exclusive=True, group="checklist")
    async def run_checks(self, only: str | None) -> None:
        """Run the engine in this worker; rows appear as checks finish."""
        wizard = self.wizard

        async def engine(config: FtwizConfig, only: str | None, progress: Callable[[int, int, list[str]], None]) -> Any:
            return await engines.run_checks(wizard, config, only=only, progress=progress)

        await wizard.checks.run(wizard.config, engine, only=only, on_change=self.redraw)
        self.redraw()
        if only is None and wizard.checks.wants_full_mesh():
            self.refresh_mesh()
        if self.wizard.checks.error:
            self.notify(self.wizard.checks.error, title="Checklist could not run", severity="error", timeout=10)

    @work(exclusive=True, group="mesh")
    async def refresh_mesh(self) -> None:
        """After a quick pass, measure the full mesh in the background; the heatmap shows its age meanwhile."""
        wizard = self.wizard

        async def engine(config: FtwizConfig) -> Any:
            return await engines.run_full_mesh(wizard, config)

        await wizard.checks.refresh_mesh(wizard.config, engine, on_change=self.redraw)

    @work(exclusive=True, group="override")
    async def action_override(self) -> None:
        """Allow a launch despite failed checks, after an explicit confirmation."""
        checks = self.wizard.checks
        failed = checks.failed
        if not failed:
            self.notify("No check failed: nothing to override.")
            return
        if checks.override:
            checks.override = False
            self.notify("Override withdrawn: launch is blocked again while checks fail.")
            self.redraw()
            return
        names = ", ".join(sorted({f"{r.id}{'@' + r.node if r.node else ''}" for r in failed})[:6])
        answer = await self.app.push_screen_wait(ConfirmScreen(
            f"{len(failed)} check(s) failed ({names}). A launch will probably hang or crash.\n"
            "Allow the launch anyway?",
            [("override", "Launch anyway", "error"), ("cancel", "Keep blocked", "primary")], title="Override failed checks"))
        if answer == "override":
            checks.override = True
            self.redraw()

    def action_launch(self) -> None:
        """Go to the Launch step (it refuses to start while a check fails, unless overridden)."""
        self.goto("launch")
