"""The ``ftwiz`` Textual app: four steps run from one worker, a poller, and the config's save state.

The app owns what outlives a screen: the config (and whether it is saved), the cluster picture the
poller keeps up to date, the last checklist results and the launch session. The steps are installed
screens, so a step keeps its state when you leave it and come back.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.reactive import Reactive, reactive

from shared.config import ConfigError, FtwizConfig, NodeConfig
from tui.app import config_edit
from tui.app.checklist_state import ChecklistState
from tui.app.cluster_state import ClusterState
from tui.app.engines import new_run
from tui.app.launch_session import LaunchSession
from tui.app.messages import ClusterUpdated, ConfigChanged, RunEventArrived, RunUpdated
from tui.app.screens.checklist_screen import ChecklistScreen
from tui.app.screens.cluster_screen import ClusterScreen
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.help_screen import HelpScreen
from tui.app.screens.job_screen import JobScreen
from tui.app.screens.launch_screen import LaunchScreen
from tui.app.screens.step_screen import StepScreen
from tui.app.steps import STEPS
from tui.launch.events import LogLine, RunFinished

__all__ = ["FtwizApp"]

ClientFactory = Callable[[FtwizConfig], Any]
"""Builds the agent client for a config: ``poll()`` → ``{node: NodeStatus}``, ``aclose()``."""


def _default_client(config: FtwizConfig) -> Any:
    from tui.client import AgentClient

    return AgentClient(config)


class FtwizApp(App[int]):
    """The wizard. Collaborators are keyword arguments so tests pass real alternatives.

    ``client_factory`` builds the agent client (default :class:`tui.client.AgentClient`);
    ``poll_interval`` is the refresh period; ``poll_limit`` stops polling after that many polls
    (snapshot tests: one real poll, then a still picture); ``start_step`` is the first step shown.
    """

    CSS_PATH = "app.tcss"
    TITLE = "ftwiz"
    SCREENS: ClassVar[dict[str, Any]] = {
        "cluster": ClusterScreen, "job": JobScreen, "checklist": ChecklistScreen, "launch": LaunchScreen}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help"),
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        *(Binding(step.key, f"goto('{step.name}')", step.title, show=False) for step in STEPS),
    ]

    dirty: Reactive[bool] = reactive(False)
    """The config in memory differs from the file (or no file has been written yet)."""
    config_label: Reactive[str] = reactive("")
    """Where the config is saved, for the step bar."""

    def __init__(
        self,
        config: FtwizConfig,
        config_path: Optional[str | Path] = None,
        *,
        client_factory: Optional[ClientFactory] = None,
        poll_interval: float = 1.0,
        poll_limit: Optional[int] = None,
        start_step: str = "cluster",
        engines: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.config_path: Optional[Path] = Path(config_path) if config_path else None
        # The config as last read or written: the embedded default starts "saved" (nothing to lose).
        self._saved_dump = config.model_dump_json()
        self._client_factory = client_factory or _default_client
        self._client: Any = None
        self.poll_interval = poll_interval
        self.poll_limit = poll_limit
        self.start_step = start_step
        self.engines: dict[str, Any] = dict(engines or {})
        """Optional stand-ins for the engines, by name: ``run_checklist``, ``run_options``, ``save_config`` (tests, and
        the Slurm backend's wizard on an allocation)."""
        self.cluster = ClusterState((n.name, n.host) for n in config.nodes)
        """Every node's latest poll and utilisation history."""
        self.last_statuses: dict[str, Any] = {}
        """The client's last ``{node: NodeStatus}``."""
        self.poll_error: Optional[str] = None
        """Why the last poll failed as a whole (the client itself raised)."""
        self.checks = ChecklistState()
        """The last checklist run and the launch gate."""
        self.launch = LaunchSession()
        """The run the Launch step follows."""
        self._poll_wakeup = asyncio.Event()
        self._poll_task_done = False

    # ------------------------------------------------------------------ lifecycle

    def on_mount(self) -> None:
        self.dirty = self._is_dirty()
        self.config_label = self._label()
        self.run_wizard()
        self.poll_cluster()

    async def on_unmount(self) -> None:
        await self._close_client()

    @work(exclusive=True, group="wizard")
    async def run_wizard(self) -> None:
        """Show the steps: each one dismisses with the name of the step to show next."""
        step = self.start_step
        while True:
            result = await self.push_screen_wait(step)
            step = result or step

    def action_goto(self, step: str) -> None:
        """Jump to ``step`` (F2–F5) from whichever step is showing."""
        screen = self.screen
        if isinstance(screen, StepScreen):
            screen.goto(step)

    def action_help(self) -> None:
        """Show every key of the current step."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    # ------------------------------------------------------------------ polling

    @work(exclusive=True, group="poll")
    async def poll_cluster(self) -> None:
        """Poll every agent once per ``poll_interval`` (until ``poll_limit`` polls, if set)."""
        self._poll_task_done = False
        try:
            while True:
                await self.poll_once()
                if self.poll_limit is not None and self.cluster.polls >= self.poll_limit:
                    return
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._poll_wakeup.wait(), timeout=self.poll_interval)
                self._poll_wakeup.clear()
        finally:
            self._poll_task_done = True

    async def poll_once(self) -> None:
        """One poll of every node, then tell the visible steps to redraw."""
        if self._client is None:
            self._client = self._client_factory(self.config)
        try:
            statuses = await self._client.poll()
        except Exception as exc:  # the client reports node failures as states; this is a bug or a closed client
            self.poll_error = f"{type(exc).__name__}: {exc}"
            self.log.error(f"poll failed: {self.poll_error}")
            return
        self.poll_error = None
        self.last_statuses = dict(statuses)
        self.cluster.apply(statuses.values())
        self._broadcast(ClusterUpdated(self.cluster.polls))

    def poll_now(self) -> None:
        """Poll at once rather than at the next tick."""
        if self._poll_task_done:
            self.poll_cluster()
        else:
            self._poll_wakeup.set()

    @property
    def client(self) -> Any:
        """The agent client for the current config (created on first use)."""
        if self._client is None:
            self._client = self._client_factory(self.config)
        return self._client

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        await self._close(client)

    async def _close(self, client: Any) -> None:
        if client is not None and hasattr(client, "aclose"):
            try:
                await client.aclose()
            except Exception as exc:  # closing must never block quitting
                self.log.warning(f"closing the agent client: {exc}")

    def _broadcast(self, message: Any) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, StepScreen):
                screen.post_message(message)

    # ------------------------------------------------------------------ config

    def set_config(self, config: FtwizConfig, section: str) -> None:
        """Replace the config (already validated); nodes or agent settings rebuild the client."""
        old = self.config
        self.config = config
        self.dirty = self._is_dirty()
        if section in ("nodes", "cluster", "all"):
            self.cluster.set_nodes((n.name, n.host) for n in config.nodes)
            if old.nodes != config.nodes or old.cluster != config.cluster:
                # Detach the old client now, so the next poll builds one for the new config whichever
                # worker runs first; the old one closes in the background.
                client, self._client = self._client, None
                self.run_worker(self._close(client), group="client-close")
                self.poll_now()
        self._broadcast(ConfigChanged(section))

    def node_problem(self, node: NodeConfig, *, replacing: Optional[str]) -> Optional[str]:
        """Why ``node`` cannot go into the config (duplicate name, master), or None."""
        return config_edit.node_problem(self.config, node, replacing)

    def put_node(self, node: NodeConfig, *, replacing: Optional[str]) -> None:
        """Add ``node``, or replace the node called ``replacing``."""
        self.set_config(config_edit.with_node(self.config, node, replacing), "nodes")

    def remove_node(self, name: str) -> None:
        """Remove the node called ``name`` (a master that goes with it falls back to the first node)."""
        self.set_config(config_edit.without_node(self.config, name), "nodes")

    def _is_dirty(self) -> bool:
        return self.config.model_dump_json() != self._saved_dump

    def _label(self) -> str:
        return "embedded default" if self.config_path is None else _shown(self.config_path)

    @property
    def save_path(self) -> Path:
        """Where Ctrl+S writes: the loaded file, or ./ftwiz.toml for the embedded default."""
        return self.config_path or Path.cwd() / "ftwiz.toml"

    @work(exclusive=True, group="save", thread=True)
    def action_save(self) -> None:
        """Write the config atomically, keeping the file's comments."""
        self._save()

    def _save(self) -> bool:
        from tui.config_io import save_config

        path = self.save_path
        snapshot = self.config
        save = self.engines.get("save_config", save_config)  # the Slurm wizard saves only [job] (tui/slurm/wizard.py)
        try:
            save(snapshot, path)
        except ConfigError as exc:
            self.call_from_thread(self.notify, str(exc), title="Not saved", severity="error", timeout=10)
            return False
        self.call_from_thread(self._saved, snapshot, path)
        return True

    def _saved(self, snapshot: FtwizConfig, path: Path) -> None:
        self.config_path = path
        self._saved_dump = snapshot.model_dump_json()
        self.dirty = self._is_dirty()
        self.config_label = self._label()
        self.notify(f"Saved {path}")

    # ------------------------------------------------------------------ launching

    async def start_launch(self, *, resume: bool) -> None:
        """Start the job through the launcher (in a thread); its events land in ``self.launch``."""
        self._supervise(self.config, resume)

    @work(thread=True, exclusive=True, group="run")
    def _supervise(self, config: FtwizConfig, resume: bool) -> None:
        """Launch and supervise on this worker thread, as ``ftwiz --launch`` does on its main thread."""
        from tui.launch.run import LaunchError  # the launcher is loaded when a run starts, not with the app

        try:
            run = new_run(self, config, resume=resume)
        except Exception as exc:  # nothing started: say why on the Launch step
            self.call_from_thread(self._launch_refused, str(exc) if isinstance(exc, LaunchError) else f"{type(exc).__name__}: {exc}")
            return
        run.subscribe(self.run_event)
        self.call_from_thread(self._launch_started, run)
        try:
            run.launch()
        except LaunchError:
            return  # the run emitted RunFinished (launch_failed) with each node's problem
        except Exception as exc:
            self.call_from_thread(self._launch_refused, f"{type(exc).__name__}: {exc}")
            return
        try:
            run.supervise()
        except Exception as exc:  # the run stopped every node already; show why
            self.call_from_thread(self._launch_refused, f"supervisor error: {type(exc).__name__}: {exc}")

    def _launch_started(self, run: Any) -> None:
        self.launch.run = run
        self.launch.run_id = run.run_id
        self._broadcast(RunUpdated())

    def _launch_refused(self, message: str) -> None:
        self.launch.error = message
        self.launch.run = None
        self._broadcast(RunUpdated(finished=True))
        self.notify(message, title="Launch failed", severity="error", timeout=10)

    async def stop_launch(self) -> None:
        """Ask the supervisor to stop every rank on every node (it reports each step as events)."""
        run = self.launch.run
        if run is not None and self.launch.active:
            run.request_stop("stopped from the wizard")

    def run_event(self, event: Any) -> None:
        """Take one launcher event (any thread) onto the UI thread: ``post_message`` is Textual's thread-safe way."""
        try:
            self.post_message(RunEventArrived(event))
        except RuntimeError:  # the app's event loop closed as it quit; the run's own log still has the event
            pass

    def on_run_event_arrived(self, message: RunEventArrived) -> None:
        event = message.event
        try:
            self.launch.apply(event)
        except Exception as exc:  # a display bug must not lose the run's later events (or the app)
            self.log.error(f"launch event {type(event).__name__} not shown: {type(exc).__name__}: {exc}")
        if not isinstance(event, LogLine):
            self._broadcast(RunUpdated(finished=isinstance(event, RunFinished)))

    # ------------------------------------------------------------------ quitting

    async def action_quit(self) -> None:
        """Quit; with a run going or unsaved changes, ask first."""
        self._quit_after_asking()

    @work(exclusive=True, group="quit")
    async def _quit_after_asking(self) -> None:
        if isinstance(self.screen, ConfirmScreen):
            return
        if self.launch.active:
            answer = await self.push_screen_wait(ConfirmScreen(
                f"Run {self.launch.run_id} is going. Detach leaves it running (its logs stay on the nodes; "
                f"`ftwiz --attach {self.launch.run_id}` follows it again, `ftwiz --stop {self.launch.run_id}` ends it).",
                [("detach", "Detach and quit", "primary"), ("stop", "Stop all and quit", "error"), ("cancel", "Cancel", "default")],
                title="Quit ftwiz?"))
            if answer == "cancel":
                return
            run = self.launch.run
            if answer == "detach":
                run.detach()
            else:
                self.notify("Stopping every rank on every node before quitting…")
                run.request_stop("the operator quit the wizard")
                for _ in range(600):  # the stop sequence reports when it is done; bounded at 2 min
                    if self.launch.result is not None:
                        break
                    await asyncio.sleep(0.2)
        if self.dirty:
            answer = await self.push_screen_wait(ConfirmScreen(
                f"The config has unsaved changes ({_shown(self.save_path)}).",
                [("save", "Save and quit", "primary"), ("discard", "Quit without saving", "error"), ("cancel", "Cancel", "default")],
                title="Quit ftwiz?"))
            if answer == "cancel":
                return
            if answer == "save":
                saved = await asyncio.to_thread(self._save)
                if not saved:
                    return
        self.exit(0)


def _shown(path: Path) -> str:
    """``path`` as the operator reads it: relative to the working directory when it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
