"""``ftwiz --launch / --attach / --stop``: the headless front of :class:`tui.launch.run.Run`.

Each function returns the process exit code: 0 when the job succeeded (or was detached / stopped
cleanly), 1 when it failed or could not start, 2 for a usage problem (nothing to resume or attach
to, no terminal to confirm on), 130 when the operator stopped it. Log lines and progress go to
stdout, ftwiz's own messages to stderr. Ctrl-C / SIGTERM stop every node; SIGHUP (the terminal
closed) detaches and leaves the run going.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from dataclasses import replace
from typing import Any, Iterator, Optional, TextIO

from shared.config import FtwizConfig
from shared.logprefix import node_line
from shared.protocol import Error, Note, Started
from tui.codeship import discard_prebuilt, prebuild, resolve_code_dir
from tui.doctor.hook import WHY_PREFIX
from tui.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from tui.launch.events import Event, LogLine, NodeStateChanged, ProgressChanged, RunFinished, RunNote
from tui.launch.prepare import new_run, resume_from
from tui.launch.progress import ProgressSnapshot, format_progress
from tui.launch.run import LaunchError, Run, RunOptions
from tui.launch.trainer_output import BarCollapser
from tui.runs.index import RunNotFound, find_run
from tui.runs.record import RunRecord, RunRecordModel, latest_run_id, runs_dir
from tui.runs.status import ENDED, RunStatus

__all__ = ["HeadlessPrinter", "already_finished", "attach", "find_stored", "launch", "stop"]



def _err(message: str) -> None:
    print(f"ftwiz: {message}", file=sys.stderr, flush=True)


class HeadlessPrinter:
    """An observer that prints a run for a terminal or a log file.

    Worker and torchrun lines print as ``node/rank | text``; protocol lines are summarised as one
    compact progress line (``step 12/100 loss 2.31 ...``) instead of printed raw; notes and node
    states go to stderr; the end prints the status, the failed node/rank and its last lines.
    """

    def __init__(self, out: Optional[TextIO] = None, err: Optional[TextIO] = None, *, show_protocol: bool = False) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.show_protocol = show_protocol
        self._lock = threading.Lock()
        self._bars = BarCollapser()  # a tqdm bar prints once, not once per carriage return
        self._why = ""
        self._first_error = ""
        self._last_snapshot: Optional[ProgressSnapshot] = None
        """The progress last printed (its line is ``format_progress`` of it)."""

    def _checkpoint_only(self, snap: ProgressSnapshot) -> Optional[int]:
        """The step of a checkpoint that is the only news since the last line printed (then the line is not repeated)."""
        last = self._last_snapshot
        if last is None or snap.last_checkpoint_step in (None, last.last_checkpoint_step):
            return None
        unchanged = format_progress(replace(snap, last_checkpoint_step=last.last_checkpoint_step)) == format_progress(last)
        return snap.last_checkpoint_step if unchanged else None

    def __call__(self, event: Event) -> None:
        with self._lock:
            self._print(event)

    def _print(self, event: Event) -> None:
        if isinstance(event, LogLine):
            record = event.record
            if record is not None and not self.show_protocol:
                if isinstance(record, Started):
                    backend = f", {record.backend}" if record.backend else ""  # the user's code picks its own
                    print(f"{event.prefix} | started: rank {record.rank} of {record.world_size} (local {record.local_rank}, pid {record.pid}{backend})", file=self.out, flush=True)
                elif isinstance(record, Note):
                    print(f"{event.prefix} | note: {record.message}", file=self.out, flush=True)
                elif isinstance(record, Error):  # the node side's own words (a script not found, an exception): shown as they come
                    message = record.message or ""
                    print(f"{event.prefix} | ERROR: {message}", file=self.out, flush=True)
                    if not self._first_error:
                        self._first_error = f"{event.prefix}: {message}"
                # the rest is summarised as progress
                return
            for line in self._bars.feed(event.prefix, node_line(event.node, event.rank, event.text), event.text):
                print(line, file=self.out, flush=True)
        elif isinstance(event, ProgressChanged):
            snap = event.progress
            line = format_progress(snap)
            if snap.updated_at is None or (self._last_snapshot is not None and line == format_progress(self._last_snapshot)):
                return
            saved = self._checkpoint_only(snap)
            self._last_snapshot = snap
            print(f"progress | checkpoint saved at step {saved}" if saved is not None else f"progress | {line}",
                  file=self.out, flush=True)
        elif isinstance(event, NodeStateChanged):
            detail = f" ({event.detail})" if event.detail else ""
            print(f"ftwiz: {event.node}: {event.state.value}{detail}", file=self.err, flush=True)
        elif isinstance(event, RunNote) and event.text.startswith(WHY_PREFIX):
            self._why = event.text  # the failure doctor's first diagnosis: printed last, after the verdict
        elif isinstance(event, RunNote):
            mark = {"error": "ERROR: ", "warn": "warning: "}.get(event.level, "")
            print(f"ftwiz: {mark}{event.text}", file=self.err, flush=True)
        elif isinstance(event, RunFinished):
            for line in self._bars.flush():
                print(line, file=self.out, flush=True)
            self._finished(event)

    def _finished(self, event: RunFinished) -> None:
        r = event.result
        print(f"ftwiz: run {r.run_id} {r.status.upper()} (exit {r.exit_code}): {r.reason}", file=self.err, flush=True)
        if self._first_error and r.status != RunStatus.SUCCEEDED:
            print(f"ftwiz: first error from the nodes: {self._first_error}", file=self.err, flush=True)
        if r.failed_node or r.failed_rank is not None:
            rank = f" rank {r.failed_rank}" if r.failed_rank is not None else ""
            print(f"ftwiz: failed: node {r.failed_node or '?'}{rank}; its last lines:", file=self.err, flush=True)
            for line in r.last_lines:
                print(f"    {line}", file=self.err, flush=True)
        for node, pids in r.leftovers.items():
            print(f"ftwiz: ERROR: {node}: processes survived SIGKILL: {pids}", file=self.err, flush=True)
        if r.unreaped:
            print(f"ftwiz: ERROR: not reaped (unreachable): {', '.join(r.unreaped)}; run `ftwiz --stop {r.run_id}` when they are back", file=self.err, flush=True)
        if self._why:
            print(f"ftwiz: {self._why}\nftwiz: all diagnoses: ftwiz --why {r.run_id}", file=self.err, flush=True)


@contextlib.contextmanager
def _signals(run: Run) -> Iterator[None]:
    """Ctrl-C / SIGTERM → stop every node; SIGHUP → detach. Only from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def stop(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        _err(f"{name}: stopping every node (again to stop waiting for unreachable nodes)")
        run.request_stop(f"stopped by the operator ({name})")

    def hangup(signum: int, frame: Any) -> None:
        run.detach()

    for sig, handler in ((signal.SIGINT, stop), (signal.SIGTERM, stop), (signal.SIGHUP, hangup)):
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _checklist(config: FtwizConfig, force: bool) -> tuple[bool, dict[str, Any], Optional[float], Optional[Any]]:
    """Run the checklist; print what did not pass.

    Returns (may launch, reports per node, unix time until which the master's agent still holds the
    rendezvous port for the firewall test by the master's clock, the checklist run itself or None).
    """
    import asyncio

    from tui.checks.engine import run_checklist_full

    def progress(label: str, done: int, total: int) -> None:
        if ":" in label:
            _err(label)

    _err("running the checklist first")
    try:
        checked = asyncio.run(run_checklist_full(config, progress=progress))
    except Exception as exc:  # the checklist failing must not hide why; --force still launches
        _err(f"{'warning' if force else 'ERROR'}: the checklist could not run: {type(exc).__name__}: {exc}")
        return force, {}, None, None
    allowed, reports, until = _gate(checked, force)
    return allowed, reports, until, checked


def _gate(checked: Any, force: bool) -> tuple[bool, dict[str, Any], Optional[float]]:
    """What did not pass, printed; whether the launch may go on (no failed row, or ``force``); the reports per
    node; the unix time until which the master's agent still holds the rendezvous port's test listener."""
    from tui.client import reports_of

    reports = reports_of(checked.statuses)
    until = getattr(checked, "rendezvous_listener_until", None)
    shown = [r for r in checked.results if r.status in ("fail", "warn")]
    for row in shown:
        _err(f"  {row.status.upper()}  {row.id}  {row.node or '-'}  {row.detail}" + (f"\n        fix: {row.hint}" if row.hint else ""))
    fails = sum(1 for r in checked.results if r.status == "fail")
    if fails and not force:
        _err(f"ERROR: {fails} check(s) failed: not launching. Fix them (see `ftwiz --check`), or pass --force to launch anyway")
        return False, reports, until
    if fails:
        _err(f"warning: {fails} check(s) failed; launching anyway (--force)")
    else:
        _err(f"checklist passed ({len(checked.results)} rows, {len(shown)} warning(s))")
    return True, reports, until


def _poll_reports(config: FtwizConfig) -> dict[str, Any]:
    """The agents' reports without the checklist (GPU counts, cores and NICs for the plan)."""
    import asyncio

    from tui.client import AgentClient, reports_of

    async def poll() -> dict[str, Any]:
        async with AgentClient(config) as client:
            return await client.poll()

    try:
        statuses = asyncio.run(poll())
    except Exception as exc:
        _err(f"warning: could not ask the agents ({type(exc).__name__}: {exc}); planning without their reports")
        return {}
    return reports_of(statuses)


def _confirm(config: FtwizConfig, run: Run, yes: bool) -> bool:
    job = config.job
    what = f"{job.workload}" + (f" ({job.method} of {job.model})" if job.workload == "sft" else "")
    _err(f"about to launch run {run.run_id}: {what} on {len(config.nodes)} node(s): " + ", ".join(f"{n.name} ({n.host})" for n in config.nodes))
    if yes:
        return True
    if not sys.stdin or not sys.stdin.isatty():
        _err("ERROR: not launching: no terminal to confirm on; pass --yes to launch without asking")
        return False
    try:
        answer = input("Launch? [y/N] ").strip().lower()
    except EOFError:
        answer = ""
    return answer in ("y", "yes")


def launch(
    config: FtwizConfig,
    *,
    yes: bool,
    detach: bool,
    resume: bool,
    force: bool,
    options: Optional[RunOptions] = None,
    checklist: bool = True,
    checked: Optional[Any] = None,
    printer: Optional[HeadlessPrinter] = None,
) -> int:
    """Check, confirm, launch and (unless ``detach``) supervise the job of ``config``.

    ``resume`` continues from the latest checkpoint of the last run (same output_dir, spec
    ``resume = "auto"``). Without ``yes`` it asks on the terminal, and refuses without one. The
    checklist runs first, or ``checked`` is the one the caller just ran (Slurm's, with its allocation's rows):
    either way a failed check refuses the launch unless ``force``, and the run keeps its rows and sync forecast
    and launches with what it approved. ``checklist=False`` (tests) launches unchecked.
    """
    options = options or RunOptions()
    if resume:
        try:
            source = resume_from(config, options)
        except LaunchError as exc:
            _err(f"ERROR: {exc}")
            return EXIT_USAGE
        _err(f"resuming run {source.run_id}: continuing from the latest checkpoint in {source.output_dir}")
    listener_until = None
    if checked is not None:
        allowed, reports, listener_until = _gate(checked, force)
        if not allowed:
            return EXIT_FAILED
    elif checklist:
        if config.job.workload == "command" and config.job.code_dir:
            prebuild(resolve_code_dir(config.job.code_dir, None))  # the code's tar is made while the checklist runs
        allowed, reports, listener_until, checked = _checklist(config, force)
        if not allowed:
            discard_prebuilt()
            return EXIT_FAILED
    else:
        reports = _poll_reports(config)
    if not yes and (not sys.stdin or not sys.stdin.isatty()):
        _err("ERROR: not launching: no terminal to confirm on; pass --yes to launch without asking")
        return EXIT_USAGE
    try:
        run, note = new_run(config, options=options, reports=reports, resume=resume, listener_until=listener_until, checked=checked)
    except LaunchError as exc:
        _err(f"ERROR: {exc}")
        return EXIT_USAGE
    if note:
        _err(f"warning: {note}")
    if not _confirm(config, run, yes):
        run.record.update(status=RunStatus.CANCELLED)
        return EXIT_USAGE
    run.subscribe(printer or HeadlessPrinter())
    with _signals(run):
        try:
            run.launch()
        except LaunchError as exc:
            _err(f"ERROR: {exc}")
            return EXIT_FAILED
        if detach:
            run.detach()
        result = run.supervise()
    if detach:
        _err(f"run {run.run_id} goes on detached; logs on each node under <workdir>/runs/{run.run_id}/")
    return result.exit_code


def find_stored(run_id: str, options: RunOptions, config: FtwizConfig) -> tuple[RunRecord, FtwizConfig]:
    """The record of ``run_id`` wherever it is (:func:`tui.runs.index.find_run`) and the cluster it names.

    Sets ``options.runs_dir`` to the runs directory that holds it. The cluster is the record's config snapshot;
    ``config`` (the one loaded here) only for a record without one, and only when it names the same cluster.
    Raises :class:`RunNotFound` saying where it looked, or why the record cannot be acted on.
    """
    where = find_run(run_id, options.runs_dir)
    record = RunRecord.open(where.parent, run_id)
    options.runs_dir = where.parent
    snapshot = record.model.config
    if snapshot is None:
        if record.model.cluster not in (None, config.cluster.name):
            raise RunNotFound(run_id, [str(record.path)], f"{record.path} holds no config snapshot and names cluster "
                              f"{record.model.cluster!r}, not {config.cluster.name!r}: run from that cluster's ftwiz.toml (--config)")
        return record, config
    try:
        return record, FtwizConfig.model_validate(snapshot)
    except ValueError as exc:
        raise RunNotFound(run_id, [str(record.path)], f"{record.path}: its config snapshot does not load ({' '.join(str(exc).split())[:300]})") from None


def already_finished(model: RunRecordModel) -> bool:
    """A final record with nothing left behind (no unreaped node, no leftovers): ``--stop`` signals nothing."""
    return model.status in ENDED and not (model.unreaped or model.leftovers)


def attach(config: FtwizConfig, run_id: Optional[str], *, options: Optional[RunOptions] = None, printer: Optional[HeadlessPrinter] = None) -> int:
    """Re-attach to ``run_id`` (default: the latest run under the runs directory): replay the node logs and supervise again.

    A named run is found from anywhere and followed on the cluster its record names.
    """
    options = options or RunOptions()
    base = runs_dir(options.runs_dir)
    run_id = run_id or latest_run_id(base)
    if run_id is None:
        _err(f"ERROR: no run to attach to under {base}/; name one: ftwiz --attach RUN_ID")
        return EXIT_USAGE
    try:
        record, config = find_stored(run_id, options, config)
    except RunNotFound as exc:
        _err(f"ERROR: {exc}")
        return EXIT_USAGE
    if record.model.status in ENDED:
        return _report_ended(record)
    try:
        run = Run.attach(config, run_id, options=options)
    except LaunchError as exc:
        _err(f"ERROR: {exc}")
        return EXIT_FAILED
    run.subscribe(printer or HeadlessPrinter())
    with _signals(run):
        result = run.supervise()
    return result.exit_code


def _report_ended(record: RunRecord) -> int:
    """``--attach`` of a run whose record is final: nothing is followed or supervised and ``run.json`` is not written;
    each node's end and log are named. Exit 0 for a run that succeeded, 1 otherwise."""
    model = record.model
    _err(f"run {model.run_id} already finished ({model.status.value}): nothing to attach to; {record.path} is unchanged")
    for name, node in model.nodes.items():
        ended = node.exit_description or node.exit or node.state or "no exit recorded"
        _err(f"  {name}: {ended}; log {record.dir / f'{name}.log'}")
    if model.status is not RunStatus.SUCCEEDED:
        _err(f"why it ended: ftwiz --why {model.run_id}")
    return EXIT_OK if model.status is RunStatus.SUCCEEDED else EXIT_FAILED


def stop(config: FtwizConfig, run_id: str, *, options: Optional[RunOptions] = None) -> int:
    """Stop ``run_id`` on every node of the cluster its record names; report what was killed where.

    The record is found from anywhere (:func:`find_stored`); a run that is not found exits 2 saying where
    ftwiz looked, and gets no record. A run whose record is final is not signalled: "already finished".
    """
    options = options or RunOptions()
    if not run_id:
        _err("ERROR: name the run to stop: ftwiz --stop RUN_ID")
        return EXIT_USAGE
    try:
        record, config = find_stored(run_id, options, config)
    except RunNotFound as exc:
        _err(f"ERROR: {exc}")
        return EXIT_USAGE
    model = record.model
    if already_finished(model):
        _err(f"run {run_id} already finished ({model.status.value}); nothing was signalled and {record.path} is unchanged")
        return EXIT_OK
    _err(f"stopping run {run_id} on {len(config.nodes)} node(s) (record {record.path})")
    result = Run.stop_detached(config, run_id, options=options)
    try:
        nodes = RunRecord.open(runs_dir(options.runs_dir), run_id).model.nodes
    except RunNotFound:
        nodes = {}
    for name in (n.name for n in config.nodes):
        info = nodes.get(name)
        killed = (info.killed if info is not None else None) or []
        if name in result.unreaped:
            _err(f"  {name}: not reached; run `ftwiz --stop {run_id}` again when it answers")
        elif killed:
            _err(f"  {name}: stopped {len(killed)} process(es): " + ", ".join(str(k.get('pid')) for k in killed))
        else:
            _err(f"  {name}: nothing of run {run_id} was running")
    for name, pids in result.leftovers.items():
        _err(f"  ERROR: {name}: still running after SIGKILL: {pids}")
    return result.exit_code
