"""``ftwiz``: the command line entry point.

``ftwiz`` alone opens the Textual wizard; ``ftwiz --check`` runs the pre-launch checklist headless;
``--launch`` / ``--attach`` / ``--stop`` drive runs. Imports are lazy so ``ftwiz --help`` starts fast and
never imports torch, textual, paramiko or httpx.

Exit codes: 0 nothing failed (warnings allowed), 1 a check (or the action) failed, 2 a config or usage
error.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, NoReturn, Optional, Sequence

if TYPE_CHECKING:
    from tui.local_agent import LocalAgent

from tui.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE

__all__ = ["main", "entry", "exit_now", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE"]

_DESCRIPTION = """\
Fine-tuning cluster wizard. Checks a handful of GPU machines before launch (agents, SSH, GPUs, software
parity, memory fit, disk, clocks, network, rendezvous port, data) and launches torchrun on every node.

Config: --config PATH, else ./ftwiz.toml, else ~/.config/ftwiz/ftwiz.toml; with none, this machine is
a one-node cluster (a local agent is started and stopped for you).
"""

_EPILOG = """\
exit codes: 0 = nothing failed (warnings allowed), 1 = a check failed, 2 = config or usage error.
--json prints {"ok": bool, "cluster": {...}, "checks": [{"id","title","status","node","detail","hint"}]}, plus
"mesh" (the pair matrix) and "sync" (the gradient-sync forecast) when measured.
--why / --why-log exit 0 when they printed a diagnosis or found none, 2 for a missing run or unreadable file;
--json with them prints {"diagnoses": [{"cause","node","rank","evidence","explanation","fix"}]}.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (stdlib only)."""
    parser = argparse.ArgumentParser(prog="ftwiz", description=_DESCRIPTION, epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="PATH", help="ftwiz.toml to use (default: ./ftwiz.toml, then ~/.config/ftwiz/ftwiz.toml)")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--check", action="store_true", help="run the pre-launch checklist headless and exit")
    actions.add_argument("--launch", action="store_true", help="run the checklist, then launch the job on every node")
    actions.add_argument("--attach", nargs="?", const="", metavar="RUN_ID", help="follow a running job (default: the latest run)")
    actions.add_argument("--stop", metavar="RUN_ID", help="stop every process of a run on every node")
    actions.add_argument("--export-sbatch", metavar="FILE",
                         help="write a self-contained sbatch script of the job ([slurm] section) to FILE ('-' for stdout)")
    actions.add_argument("--why", nargs="?", const="", metavar="RUN_ID", help="diagnose why a run failed (default: the latest run)")
    actions.add_argument("--why-log", nargs="+", metavar="FILE", help="diagnose log files (a file named NODE.log is that node's log)")
    parser.add_argument("--json", action="store_true", help="with --check, --why or --why-log: print JSON on stdout")
    parser.add_argument("--no-ssh", action="store_true", help="with --check: skip the SSH logins (and the checks that need them)")
    parser.add_argument("--mesh", action="store_true",
                        help="with --check: measure every pair's bandwidth now (default: a quick pass against the cached full mesh)")
    parser.add_argument("--yes", "-y", action="store_true", help="with --launch: do not ask for confirmation")
    parser.add_argument("--detach", action="store_true", help="with --launch: start the run and return")
    parser.add_argument("--resume", action="store_true", help="with --launch: resume from the latest checkpoint")
    parser.add_argument("--force", action="store_true", help="with --launch: launch even if checks warn or fail")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def _without_httpx_cli() -> None:
    """httpx's own command line (``httpx._main``, which httpx's ``__init__`` imports when it can) pulls in click, rich and
    pygments: ~30 ms of CPU on every start, for nothing ftwiz runs. A ``None`` entry makes that one import fail, which
    httpx allows for (its ``main`` then only says the CLI extras are missing); rich is still imported where a table is
    drawn."""
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def _err(message: str) -> None:
    print(f"ftwiz: {message}", file=sys.stderr, flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``ftwiz`` console script; returns the exit code."""
    _without_httpx_cli()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from shared.version import __version__

        print(f"ftwiz {__version__}")
        return EXIT_OK
    launch_only = [flag for flag, value in (("--yes", args.yes), ("--detach", args.detach), ("--resume", args.resume),
                                            ("--force", args.force)) if value]
    if launch_only and not args.launch:
        parser.error(f"{', '.join(launch_only)} only go with --launch")
    why = args.why is not None or args.why_log is not None
    if args.json and not (args.check or why):
        parser.error("--json only goes with --check, --why or --why-log")
    if args.no_ssh and not args.check:
        parser.error("--no-ssh only goes with --check")
    if args.mesh and not args.check:
        parser.error("--mesh only goes with --check")
    if why:
        from tui.doctor.cli import why_main

        return why_main(run_id=args.why, files=args.why_log, json_output=args.json, config_path=args.config)

    from shared.config import ConfigError
    from tui.config_io import load_config

    try:
        loaded = load_config(args.config)
    except ConfigError as exc:
        _err(f"config error: {exc}")
        return EXIT_USAGE
    runs_code = args.check or args.launch or args.attach is not None or args.stop
    if args.export_sbatch is not None:
        from tui.slurm.commands import export_sbatch

        return export_sbatch(loaded.config, args.export_sbatch)
    if args.stop or args.attach:
        _anchor_code_dir(loaded)
        return _named_run(args, loaded)
    if loaded.config.cluster.backend == "slurm" and not args.check:
        if runs_code:
            _anchor_code_dir(loaded)
        return _slurm(args, loaded)
    try:
        with _local_agent(loaded.config):  # first: the agent starts while this process imports what comes next
            if runs_code:
                _anchor_code_dir(loaded)
            if args.check:
                return _check(loaded, json_output=args.json, ssh=not args.no_ssh, full_mesh=args.mesh)
            if args.launch or args.attach is not None or args.stop:
                return _delegate(args, loaded)
            return _app(loaded)
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


def _anchor_code_dir(loaded: Any) -> None:
    """``[job].code_dir`` is relative to ftwiz.toml, not to the current directory."""
    from tui.codeship import anchor_code_dir

    anchor_code_dir(loaded.config.job, loaded.path)


# --------------------------------------------------------------------------- local agent


class _local_agent:
    """Start the local agent for ``local = true`` nodes; failures become a warning (the check shows the node down)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.agent: Optional[LocalAgent] = None

    def __enter__(self) -> "_local_agent":
        if not any(n.local for n in self.config.nodes):
            return self
        from tui.local_agent import LocalAgent, LocalAgentError

        self.agent = LocalAgent(self.config)
        try:
            self.agent.spawn()
            self._preload()  # this process's imports overlap the agent's start-up (both take about a second)
            self.agent.wait_ready()
        except LocalAgentError as exc:
            _err(f"warning: {exc}")
        else:
            if self.agent.started:
                _err(f"started a local agent on {self.agent.url} (stopped on exit; log: {self.agent.log_path})")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.agent is not None:
            self.agent.stop()

    @staticmethod
    def _preload() -> None:
        """Import what a check or launch uses next, while the agent starts."""
        import tui.checks.engine
        import tui.checks.ssh_checks
        import tui.client
        import tui.launch.commands  # noqa: F401


# --------------------------------------------------------------------------- --check


def _check(loaded: Any, *, json_output: bool, ssh: bool, full_mesh: bool = False) -> int:
    import asyncio

    from tui.checks.engine import run_checklist_full

    if loaded.config.cluster.backend == "slurm":
        from tui.slurm.commands import check_on_allocation

        return check_on_allocation(loaded, show=lambda shown, run: _show(shown, run, json_output=json_output))
    progress = _Progress(sys.stderr)
    options = {"mesh": "full"} if full_mesh else None
    run = asyncio.run(run_checklist_full(loaded.config, progress=progress, ssh=ssh, options=options))
    progress.finish(run)
    return _show(loaded, run, json_output=json_output)


def _show(loaded: Any, run: Any, *, json_output: bool) -> int:
    """Print a checklist run (JSON, table or plain lines) and return the exit code."""
    if json_output:
        import json

        print(json.dumps(checklist_json(loaded, run), indent=2))
    elif sys.stdout.isatty():
        _print_table(run.results)
        _print_mesh(run, table=True)
    else:
        _print_plain(run.results)
        _print_mesh(run, table=False)
    return EXIT_OK if run.ok else EXIT_FAILED


def checklist_json(loaded: Any, run: Any) -> dict[str, Any]:
    """The ``--json`` document: ``{"ok", "cluster", "checks"}`` (documented in the README)."""
    config = loaded.config
    return {
        "ok": run.ok,
        "cluster": {
            "name": config.cluster.name,
            "config": str(loaded.path) if loaded.path else None,
            "master": config.master.name,
            "nodes": [
                {
                    "name": n.name,
                    "host": n.host,
                    "state": run.statuses[n.name].state.value if n.name in run.statuses else "unknown",
                    "message": run.statuses[n.name].message if n.name in run.statuses else "",
                }
                for n in config.nodes
            ],
        },
        "checks": [r.model_dump(mode="json") for r in run.results],
        "seconds": round(run.seconds, 3),
        **_network_json(run),
    }


def _network_json(run: Any) -> dict[str, Any]:
    """``mesh`` (the matrix) and ``sync`` (the forecast) when the checklist measured them."""
    from tui.checks.meshtext import mesh_json, sync_json

    extra: dict[str, Any] = {}
    if getattr(run, "mesh", None) is not None:
        extra["mesh"] = mesh_json(run.mesh, getattr(run, "mesh_run", None))
    if getattr(run, "sync", None) is not None:
        extra["sync"] = sync_json(run.sync)
    return extra


def _print_mesh(run: Any, *, table: bool) -> None:
    """The mesh matrix after the checklist: a rich table on a terminal, aligned lines otherwise."""
    if getattr(run, "mesh", None) is None:
        return
    from tui.checks.meshtext import mesh_plain, mesh_table

    if table:
        from rich.console import Console

        Console().print(mesh_table(run.mesh))
    else:
        print("\n".join(mesh_plain(run.mesh)))


class _Progress:
    """Progress on stderr: one rewritten line on a terminal, a line per phase otherwise."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = stream.isatty()

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.tty:
            self.stream.write(f"\r\x1b[2Kchecking [{done}/{total}] {label}")
            self.stream.flush()
        elif ":" in label:  # phases (agents, ssh), not every single check
            print(f"ftwiz: {label}", file=self.stream, flush=True)

    def finish(self, run: Any) -> None:
        counts = {s: sum(1 for r in run.results if r.status == s) for s in ("pass", "warn", "fail", "skip")}
        summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        if self.tty:
            self.stream.write("\r\x1b[2K")
        print(f"ftwiz: checklist done in {run.seconds:.2f} s: {summary}", file=self.stream, flush=True)


_MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "SKIP"}


def _print_plain(results: Sequence[Any]) -> None:
    for r in results:
        node = r.node or "-"
        print(f"{_MARK[r.status]}  {r.id}  {node}  {r.detail}")
        if r.hint and r.status != "pass":
            print(f"      fix: {r.hint}")


def _print_table(results: Sequence[Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    style = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
    table = Table(show_header=True, header_style="bold", expand=True)
    table.add_column("", width=4, no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("node", no_wrap=True)
    table.add_column("detail / fix", ratio=1)
    for r in results:
        cell = Text(r.detail)
        if r.hint and r.status != "pass":
            cell.append("\n→ " + r.hint, style="cyan")
        table.add_row(Text(_MARK[r.status], style=style[r.status]), r.id, r.node or "", cell)
    Console().print(table)


# --------------------------------------------------------------------------- delegated actions


def _delegate(args: argparse.Namespace, loaded: Any) -> int:
    from tui.launch import commands

    if args.launch:
        return int(commands.launch(loaded.config, yes=args.yes, detach=args.detach, resume=args.resume, force=args.force))
    if args.attach is not None:
        return int(commands.attach(loaded.config, args.attach or None))
    return int(commands.stop(loaded.config, args.stop))


def _named_run(args: argparse.Namespace, loaded: Any) -> int:
    """``--stop RUN_ID`` / ``--attach RUN_ID`` from any directory: the record is found (``FTWIZ_RUNS_DIR``, the
    per-user index, ``./runs``) and the run acted on where its record says (its Slurm job, or the cluster of its
    config snapshot), never on whatever config loads here."""
    from tui.launch.commands import find_stored
    from tui.launch.options import RunOptions
    from tui.runs.index import RunNotFound

    run_id = args.stop or args.attach
    options = RunOptions()
    try:
        record, config = find_stored(run_id, options, loaded.config)
    except RunNotFound as exc:
        _err(f"ERROR: {exc}")
        return EXIT_USAGE
    if record.model.slurm:
        from tui.slurm.detached import attach_on_allocation, stop_on_allocation

        return stop_on_allocation(loaded, run_id, options=options) if args.stop else attach_on_allocation(loaded, run_id, options=options)
    from tui.launch import commands

    if args.stop and commands.already_finished(record.model):
        return int(commands.stop(config, run_id, options=options))  # says so; no agent needed, nothing signalled
    with _local_agent(config):
        if args.stop:
            return int(commands.stop(config, run_id, options=options))
        return int(commands.attach(config, run_id, options=options))


def _slurm(args: argparse.Namespace, loaded: Any) -> int:
    """``--launch``, ``--attach``, ``--stop`` and the wizard on a Slurm allocation."""
    if args.launch:
        from tui.slurm.commands import launch_on_allocation

        return launch_on_allocation(loaded, yes=args.yes, detach=args.detach, resume=args.resume, force=args.force)
    if args.attach is not None or args.stop:
        from tui.slurm.detached import attach_on_allocation, stop_on_allocation

        return attach_on_allocation(loaded, args.attach or None) if args.attach is not None else stop_on_allocation(loaded, args.stop)
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        _err("the wizard needs a terminal; for scripts use `ftwiz --check` or `ftwiz --launch --yes`")
        return EXIT_USAGE
    from tui.slurm.wizard import wizard_on_allocation

    return wizard_on_allocation(loaded)


def _app(loaded: Any) -> int:
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        _err("the wizard needs a terminal; for scripts use `ftwiz --check` (add --json for machine-readable output)")
        return EXIT_USAGE
    from tui.app import main as app_main

    return int(app_main(loaded.config, loaded.path))


def entry() -> NoReturn:
    """The ``ftwiz`` console script: :func:`main`, then :func:`exit_now`."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """Leave the process with ``code`` once the work is done, without the interpreter's finalisation.

    Freeing every module and object of a process that is about to end costs ~0.1 s of wall and CPU time on each
    ``ftwiz`` run. What finalisation would do that matters is done here: the ``atexit`` handlers run (temporary code
    tars, logging) and stdout/stderr are flushed. While a non-daemon thread runs, the normal exit (which waits for it)
    is taken instead; daemon threads end here as they would there.
    """
    import threading

    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
