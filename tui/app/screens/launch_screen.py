"""Step 4, Launch: start the job on every node, follow logs and progress, stop everything, resume."""

from __future__ import annotations

from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Button, Footer, Input, Label, Static

from tui.app.messages import RunUpdated
from tui.app.render import Palette
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.step_screen import StepScreen
from tui.app.widgets.common.step_bar import StepBar
from tui.app.widgets.launch.metric_plot import MetricPlot
from tui.app.widgets.launch.node_logs import NodeLogs, parse_ranks
from tui.app.widgets.launch.run_outcome import RunOutcome
from tui.app.widgets.launch.run_progress import RunProgress
from tui.doctor.hook import why_note

__all__ = ["LaunchScreen"]

_STATE_STYLE = {"running": "ok", "exited": "ok", "stopped": "warn", "stopping": "warn", "reconnecting": "warn",
                "unreachable": "bad", "failed": "bad"}


class LaunchScreen(StepScreen):
    """Drives the launcher (the same one ``ftwiz --launch`` uses) and shows what it reports."""

    STEP = "launch"
    CSS_PATH = "launch_screen.tcss"
    AUTO_FOCUS = "#launch-logs Tabs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "launch", "Launch"),
        Binding("s", "stop", "Stop all"),
        Binding("u", "resume", "Resume"),
        Binding("slash", "focus_filter", "Filter ranks"),
    ]

    _blocked = ""
    """Why the last launch attempt was refused (shown in the title line until the next attempt)."""

    def compose(self) -> ComposeResult:
        yield StepBar(self.STEP)
        with Horizontal(id="launch-head"):
            yield Static("", id="run-title")
            yield Button("Launch", id="launch", variant="success", compact=True)
            yield Button("Stop all", id="stop", variant="error", compact=True)
        yield RunProgress(id="run-progress")
        with Horizontal(id="metrics"):
            yield MetricPlot("loss", lambda v: f"{v:.4f}", id="loss-plot")
            yield MetricPlot("tok/s", lambda v: f"{v:,.0f}", id="tokens-plot")
        with Horizontal(id="filter-row"):
            yield Label("Ranks ", id="filter-label")
            yield Input(placeholder="all — e.g. 0,2-3 then Enter", compact=True, id="rank-filter")
            yield Static("", id="filter-error")
        yield NodeLogs(id="launch-logs")
        yield RunOutcome(id="run-outcome")
        yield Footer()

    async def on_mount(self) -> None:
        session = self.wizard.launch
        if not session.lines:
            session.reset([n.name for n in self.wizard.config.nodes])
        await self.query_one(NodeLogs).set_nodes(list(session.lines))
        self._rewrite_logs()
        self.redraw()
        # Log lines arrive in bursts from the launcher's threads; draw them ten times a second.
        self.set_interval(0.1, self._flush_lines)

    async def on_screen_resume(self) -> None:
        self.redraw()

    # ------------------------------------------------------------------ drawing

    def redraw(self) -> None:
        """Everything but the log text from the launch session."""
        session = self.wizard.launch
        palette = Palette.from_app(self.app)
        self.query_one("#run-title", Static).update(self._title(palette))
        job = self.wizard.config.job
        self.query_one(RunProgress).show(session.snapshot, finished=session.result is not None,
                                         allreduce_sizes=len(job.sizes_mb) if job.workload == "allreduce" else None)
        self.query_one("#metrics").display = job.workload == "sft"  # the all-reduce check has no loss
        self.query_one("#loss-plot", MetricPlot).show(session.losses)
        self.query_one("#tokens-plot", MetricPlot).show(session.tokens_per_s)
        self.query_one(RunOutcome).show(session.result, session.snapshot, palette, can_resume=self.wizard.config.job.workload == "sft",
                                        why=why_note(session.notes))
        self.query_one("#launch", Button).disabled = session.active
        self.query_one("#stop", Button).disabled = not session.active

    def _title(self, palette: Palette):
        from rich.text import Text

        session = self.wizard.launch
        job = self.wizard.config.job
        text = Text(no_wrap=True, overflow="ellipsis")
        if self._blocked and not session.active:
            text.append(self._blocked, style=f"bold {palette.bad}")
            return text
        if session.error:
            text.append(session.error, style=f"bold {palette.bad}")
            return text
        what = _describe_job(job)
        text.append(f"{session.run_id or 'not started'} · {what} ", style="bold")
        for node, (state, _) in session.node_states.items():
            style = getattr(palette, _STATE_STYLE.get(state, "muted"), palette.muted)
            text.append(f" {node}:{state}", style=style)
        if session.notes:
            level, note = session.notes[-1]
            text.append(f"  {note}", style=palette.bad if level == "error" else palette.warn if level == "warn" else palette.muted)
        return text

    def _flush_lines(self) -> None:
        found = self.query(NodeLogs)
        if not found:  # the timer fired while the screen is not (or no longer) composed: the lines wait for it
            return
        logs = found.first()
        for node, lines in self.wizard.launch.take_unseen().items():
            logs.append(node, lines)

    def _rewrite_logs(self) -> None:
        logs = self.query_one(NodeLogs)
        session = self.wizard.launch
        session.take_unseen()
        for node, lines in session.lines.items():
            logs.rewrite(node, lines)

    def on_run_updated(self, message: RunUpdated) -> None:
        self.redraw()

    # ------------------------------------------------------------------ filter

    @on(Input.Submitted, "#rank-filter")
    def _filter(self, event: Input.Submitted) -> None:
        error = self.query_one("#filter-error", Static)
        try:
            ranks = parse_ranks(event.value)
        except ValueError as exc:
            error.update(f"Rank filter {event.value!r}: {exc}. Use e.g. 0,2-3; blank shows all.")
            return
        error.update("")
        self.query_one(NodeLogs).ranks = ranks
        self._rewrite_logs()
        self.query_one("#launch-logs").focus()

    def action_focus_filter(self) -> None:
        """Put the cursor in the rank filter."""
        self.query_one("#rank-filter", Input).focus()

    # ------------------------------------------------------------------ run control

    @on(Button.Pressed, "#launch")
    def _launch_pressed(self) -> None:
        self.action_launch()

    @on(Button.Pressed, "#stop")
    def _stop_pressed(self) -> None:
        self.action_stop()

    @on(Button.Pressed, "#resume")
    def _resume_pressed(self) -> None:
        self.action_resume()

    def action_launch(self) -> None:
        """Start the job, unless a check failed (and was not overridden) or one is running."""
        self._start(resume=False)

    def action_resume(self) -> None:
        """Start again from the latest checkpoint of the last run."""
        session = self.wizard.launch
        if session.result is None or session.result.status == "succeeded":
            self.notify("Resume is offered after a run that failed or was stopped.", severity="warning")
            return
        self._start(resume=True)

    def _start(self, *, resume: bool) -> None:
        session = self.wizard.launch
        if session.active:
            self.notify("A run is going: stop it first (s).", severity="warning")
            return
        blocked = self.wizard.checks.launch_blocker(self.wizard.config)
        self._blocked = f"Launch blocked: {blocked}" if blocked else ""
        self.redraw()
        if blocked:
            self.notify(blocked, title="Launch blocked", severity="error", timeout=10)
            return
        self.start_run(resume)

    @work(exclusive=True, group="launch-start")
    async def start_run(self, resume: bool) -> None:
        """Hand the config to the launcher; events then flow in through the session."""
        session = self.wizard.launch
        session.reset([n.name for n in self.wizard.config.nodes])
        await self.query_one(NodeLogs).set_nodes(list(session.lines))
        self._rewrite_logs()
        self.redraw()
        await self.wizard.start_launch(resume=resume)
        self.redraw()

    @work(exclusive=True, group="launch-stop")
    async def action_stop(self) -> None:
        """Ask, then stop every rank on every node (SIGTERM, grace, SIGKILL, verify)."""
        session = self.wizard.launch
        if not session.active:
            self.notify("No run is going.")
            return
        answer = await self.app.push_screen_wait(ConfirmScreen(
            f"Stop run {session.run_id or ''} on every node? Every rank gets SIGTERM, then SIGKILL after the grace period.",
            [("stop", "Stop every rank", "error"), ("cancel", "Keep running", "primary")], title="Stop all"))
        if answer != "stop":
            return
        self.notify("Stopping every rank on every node…")
        await self.wizard.stop_launch()
        self.redraw()


def _describe_job(job) -> str:
    """What the header says runs: the all-reduce check, your command (as typed), or the recipe's fine-tune."""
    if job.workload == "allreduce":
        return "all-reduce check"
    if job.workload == "command":
        import shlex

        return f"your code: {shlex.join(job.command)}"
    return f"{job.method} fine-tune of {job.model}"
