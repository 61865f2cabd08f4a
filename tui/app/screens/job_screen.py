"""Step 2, Job: the ``[job]`` form beside the memory fit per GPU and the routing advice."""

from __future__ import annotations

from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Static

from shared.config import FtwizConfig
from tui.app.engines import plan_job
from tui.app.messages import ClusterUpdated, ConfigChanged
from tui.app.render import Palette
from tui.app.screens.step_screen import StepScreen
from tui.app.widgets.common.step_bar import StepBar
from tui.app.widgets.job.advice_panel import AdvicePanel
from tui.app.widgets.job.fit_chart import FitChart
from tui.app.widgets.job.job_form import JobForm
from tui.app.widgets.job.sync_panel import SyncPanel, forecast_for

__all__ = ["JobScreen"]


class JobScreen(StepScreen):
    """Every valid edit goes into the config and re-runs the estimator and the routing rules."""

    STEP = "job"
    CSS_PATH = "job_screen.tcss"
    AUTO_FOCUS = "#job-form #job-workload"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+n", "goto_next", "Checklist ›"),
        Binding("ctrl+b", "goto_previous", "‹ Cluster"),
    ]

    def compose(self) -> ComposeResult:
        yield StepBar(self.STEP)
        with Horizontal(id="job-body"):
            yield JobForm(self.wizard.config.job, id="job-form")
            with Vertical(id="job-plan"):
                yield Static("", id="job-status")
                yield FitChart(id="fit-chart")
                yield SyncPanel(id="sync-panel")
                yield AdvicePanel(id="advice")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#job-form").border_title = "[job]"
        self.query_one("#fit-chart").border_title = "Memory per GPU"
        self.query_one("#advice").border_title = "Routing advice"
        self._status("")
        self.replan()

    def on_screen_resume(self) -> None:
        form = self.query_one(JobForm)
        if not form.errors:  # keep a half-typed invalid value on screen; otherwise show the config
            form.load(self.wizard.config.job)
        self.replan()

    @on(JobForm.Changed)
    def _job_changed(self, event: JobForm.Changed) -> None:
        config = self.wizard.config
        data = config.model_dump()
        data["job"] = event.job.model_dump(exclude_unset=True)  # what was never set stays unset (an undeclared model)
        self.wizard.set_config(FtwizConfig.model_validate(data), "job")
        self._status("")

    @on(JobForm.Invalid)
    def _job_invalid(self, event: JobForm.Invalid) -> None:
        fields = ", ".join(event.errors)
        self._status(f"Not applied: fix {fields} (the message is under the field).")

    def _status(self, text: str) -> None:
        status = self.query_one("#job-status", Static)
        status.update(text)
        status.display = bool(text)

    def on_config_changed(self, message: ConfigChanged) -> None:
        self.replan()

    def on_cluster_updated(self, message: ClusterUpdated) -> None:
        # Free memory moves with every poll; the estimate itself does not, so this is cheap.
        self.replan()

    @work(exclusive=True, group="plan", thread=True)
    def replan(self) -> None:
        """Estimate and advise for the current config (a thread: a local model's config.json is read)."""
        plan = plan_job(self.wizard.config, self.wizard.cluster)
        sync = forecast_for(self.wizard.config, self.wizard.cluster, getattr(self.wizard.checks, "mesh", None))
        self.app.call_from_thread(self.query_one(SyncPanel).show, sync, Palette.from_app(self.app))
        self.app.call_from_thread(self._show_plan, plan)

    plans_shown = 0
    """How many estimates have been drawn (tests wait on it)."""

    def _show_plan(self, plan) -> None:
        self.plans_shown += 1
        palette = Palette.from_app(self.app)
        chart = self.query_one(FitChart)
        # label 13 + free 8 + verdict 9 + a scrollbar's 2: the bar gets the rest.
        width = max(chart.scrollable_content_region.width - 32, 8)
        chart.show(plan.items, plan.rows, palette, note=plan.note, notes=plan.notes, bar_width=width)
        self.query_one(AdvicePanel).show(plan.advice, palette, note=plan.advice_note)
