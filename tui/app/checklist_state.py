"""The checklist as the wizard keeps it: last results, progress of a run, and the launch gate.

The checks themselves are :mod:`tui.checks` (the engine ``ftwiz --check`` runs); this class calls
the engine, keeps its results for the screen, and answers "may we launch?" from them the same way
``ftwiz --launch`` does: no failed check, unless the user explicitly overrode.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Optional

from rich.text import Text

from shared.config import FtwizConfig
from tui.app.render import Palette

__all__ = ["ChecklistEngine", "ChecklistState"]

ChecklistEngine = Callable[[FtwizConfig, Optional[str], Callable[[int, int, list[str]], None]], Awaitable[Any]]
"""``engine(config, only, progress)`` → a ``ChecklistRun``; ``progress(done, total, still_running_ids)``
(the wizard passes :func:`tui.app.engines.run_checks` bound to the app)."""


class ChecklistState:
    """Results of the last checklist run and the override flag."""

    def __init__(self) -> None:
        self.results: list[Any] = []
        """``CheckResult``s of the last run, in the engine's order."""
        self.running: list[str] = []
        """Check ids started and not finished yet."""
        self.total = 0
        """Checks in the current run."""
        self.done = 0
        """Checks finished in the current run."""
        self.in_progress = False
        """A run is going."""
        self.error: Optional[str] = None
        """Why the engine could not run at all."""
        self.runs = 0
        self.sync: Optional[Any] = None
        """The gradient-sync forecast (``shared.syncplan.SyncForecast``) of the last run that made one."""
        self.results_run: Optional[Any] = None
        """The last checklist run (its rows and forecast go into the record of a launch that follows it)."""
        self.mesh: Optional[Any] = None
        """The full mesh (``shared.meshplan.MeshMatrix``) of the last run that measured it."""
        self.mesh_run: Optional[Any] = None
        """What that run measured (``shared.meshplan.MeshRun``: quick pass or full mesh, the matrix's age)."""
        self.mesh_since: Optional[float] = None
        """Monotonic time ``mesh_run`` arrived (its age grows from there)."""
        self.mesh_refreshing = False
        """The full mesh is being measured in the background."""
        """Runs finished (full or one check), for anyone waiting on the next one."""
        self.override = False
        """The user allowed a launch despite failed checks (reset by every full run)."""
        self.config_dump: Optional[str] = None
        """The config the results were computed for (a changed config makes them stale)."""
        self.statuses: dict[str, Any] = {}
        """Per node: the agent poll the checks ran on (the launcher plans from these reports)."""
        self.listener_until: Optional[float] = None
        """Unix time until which the master's agent holds the rendezvous port (the firewall test)."""

    @property
    def failed(self) -> list[Any]:
        """Results with status fail."""
        return [r for r in self.results if r.status == "fail"]

    def counts(self) -> dict[str, int]:
        """Results per status."""
        counts = {"pass": 0, "warn": 0, "fail": 0, "skip": 0}
        for result in self.results:
            counts[result.status] = counts.get(result.status, 0) + 1
        return counts

    def stale(self, config: FtwizConfig) -> bool:
        """The config changed since the checks ran."""
        return self.config_dump is not None and self.config_dump != config.model_dump_json()

    def launch_blocker(self, config: FtwizConfig) -> Optional[str]:
        """Why a launch must not start now, or None when it may."""
        if self.in_progress:
            return "The checklist is still running: wait for it to finish."
        if self.config_dump is None:
            return "Run the checklist first: F4, then r."
        if self.stale(config):
            return "The config changed since the checks ran: run them again (F4, then r)."
        failed = self.failed
        if failed and not self.override:
            names = ", ".join(sorted({r.id for r in failed}))
            return f"{len(failed)} check(s) failed ({names}). Fix them, or override on the Checklist (F4, then o)."
        return None

    def summary(self, config: FtwizConfig, palette: Palette) -> Text:
        """The one-line status above the table."""
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.in_progress:
            text.append(f"Running checks: {self.done}/{self.total} done ", style="bold")
            return text
        if self.config_dump is None:
            text.append("Not run yet: press r to run every check.", style="bold")
            return text
        counts = self.counts()
        text.append(f"{counts['pass']} pass", style=f"bold {palette.ok}")
        text.append(f" · {counts['warn']} warn", style=f"bold {palette.warn}" if counts["warn"] else "")
        text.append(f" · {counts['fail']} fail", style=f"bold {palette.bad}" if counts["fail"] else "")
        text.append(f" · {counts['skip']} skip")
        if self.stale(config):
            text.append("  config changed since: r re-runs", style=palette.warn)
        elif counts["fail"]:
            text.append("  launch overridden" if self.override else "  launch blocked (o overrides)", style=f"bold {palette.bad}")
        else:
            text.append("  ready to launch (l)", style=f"bold {palette.ok}")
        return text

    def mesh_age_s(self) -> Optional[float]:
        """Seconds since the shown full matrix was measured (None without one)."""
        if self.mesh_run is None or self.mesh_since is None:
            return None
        return float(self.mesh_run.age_s) + time.monotonic() - self.mesh_since

    def wants_full_mesh(self) -> bool:
        """The last run reported the cached matrix after a quick pass: measure the full mesh in the background."""
        return self.mesh_run is not None and self.mesh_run.mode == "quick" and not self.mesh_refreshing

    async def refresh_mesh(self, config: FtwizConfig, engine: Callable[[FtwizConfig], Awaitable[Any]],
                           on_change: Callable[[], None]) -> None:
        """Measure every pair now (``engine`` runs ``net.mesh`` with ``mesh="full"``); keep the rows, update the matrix."""
        self.mesh_refreshing = True
        on_change()
        try:
            checked = await engine(config)
        except Exception:  # a failed background mesh leaves the shown (cached) one in place
            return
        finally:
            self.mesh_refreshing = False
            on_change()
        if getattr(checked, "mesh", None) is not None and getattr(checked, "mesh_run", None) is not None:
            self.mesh, self.mesh_run, self.mesh_since = checked.mesh, checked.mesh_run, time.monotonic()
            on_change()

    async def run(self, config: FtwizConfig, engine: ChecklistEngine, *, only: Optional[str],
                  on_change: Callable[[], None]) -> None:
        """Run every check (or just ``only``) over ``config`` through ``engine``; ``on_change`` redraws as they finish."""
        self.in_progress, self.error = True, None
        self.done, self.total = 0, 0
        previous = list(self.results)
        if only is None:
            self.results = []
            self.override = False

        def progress(done: int, total: int, running: list[str]) -> None:
            self.done, self.total, self.running = done, total, list(running)
            on_change()

        on_change()
        try:
            checked = await engine(config, only, progress)
        except Exception as exc:  # the engine failed as a whole: say so, keep the old results
            self.error = f"{type(exc).__name__}: {exc}"
            self.results = previous
            return
        finally:
            self.in_progress, self.running = False, []
            self.runs += 1
        results = checked.results
        self.statuses = dict(checked.statuses) or self.statuses
        self.listener_until = getattr(checked, "rendezvous_listener_until", None) or self.listener_until
        self.mesh = getattr(checked, "mesh", None) or self.mesh
        if getattr(checked, "mesh_run", None) is not None:
            self.mesh_run, self.mesh_since = checked.mesh_run, time.monotonic()
        self.sync = getattr(checked, "sync", None) or self.sync
        self.results_run = checked
        if only is None:
            self.results = list(results)
            self.config_dump = config.model_dump_json()
        else:
            fresh = [r for r in results if r.id == only] or list(results)
            merged, inserted = [], False
            for result in previous:
                if result.id == only:
                    if not inserted:
                        merged.extend(fresh)
                        inserted = True
                    continue
                merged.append(result)
            if not inserted:
                merged.extend(fresh)
            self.results = merged
            if self.config_dump is None:
                self.config_dump = config.model_dump_json()
