"""The Slurm backend's entry points for ``tui/cli.py``: ``--export-sbatch``, and ``--check``, ``--launch``,
``--attach`` and ``--stop`` on an allocation."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from shared.config import FtwizConfig

__all__ = ["HeldRun", "attach_on_allocation", "check_on_allocation", "export_sbatch", "launch_on_allocation",
           "stop_on_allocation"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def export_sbatch(config: FtwizConfig, path: str, *, stderr: TextIO = sys.stderr) -> int:
    """Write the sbatch script of the configured job to ``path`` (``-`` for stdout); returns the exit code.

    The run directory is created under ``[slurm] workdir`` (resolved here: it must be the same path on every
    node, a shared filesystem), so the script's ``#SBATCH --output`` can be written there.
    """
    from tui.launch.record import new_run_id
    from tui.launch.support import workload_files
    from tui.slurm.export import ExportError, export_script

    run_id = new_run_id()
    workdir_abs = os.path.abspath(os.path.expanduser(config.slurm.workdir))
    try:
        script = export_script(config, run_id, workdir_abs=workdir_abs, workloads=workload_files())
    except (ExportError, RuntimeError) as exc:
        print(f"ftwiz: cannot export the sbatch script: {exc}", file=stderr)
        return EXIT_USAGE
    rundir = Path(workdir_abs) / "runs" / run_id
    try:
        rundir.mkdir(parents=True, exist_ok=True)
        if path == "-":
            sys.stdout.write(script)
        else:
            target = Path(path)
            tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
            tmp.write_text(script)
            tmp.chmod(0o755)
            os.replace(tmp, target)
    except OSError as exc:
        print(f"ftwiz: cannot write {exc.filename or path}: {exc.strerror or exc}", file=stderr)
        return EXIT_FAILED
    where = "stdout" if path == "-" else path
    print(f"ftwiz: wrote the sbatch script of run {run_id} to {where}; submit it with `sbatch {where}` "
          f"(logs in {rundir})", file=stderr)
    return EXIT_OK




def check_on_allocation(loaded: Any, *, show: Callable[[Any, Any], int], stderr: TextIO = sys.stderr) -> int:
    """``ftwiz --check`` with ``backend = "slurm"``: allocate, start the agents as a step, run the checklist.

    ``show(loaded_like, run)`` prints the rows the way ``--check`` does and returns the exit code; it gets the
    allocation's concrete config. The job is cancelled at the end (and on Ctrl-C or any error).
    """
    from types import SimpleNamespace

    from tui.slurm.agents import AgentStepError
    from tui.slurm.allocation import AllocationError
    from tui.slurm.session import allocation_session

    say = _say(stderr)
    try:
        with allocation_session(loaded.config, say=say, job_name="ftwiz-check") as session:
            run = _checklist(session, stderr)
            return show(SimpleNamespace(config=session.config, path=loaded.path), run)
    except (AllocationError, AgentStepError) as exc:
        say(str(exc))
        return EXIT_FAILED


def launch_on_allocation(loaded: Any, *, yes: bool, detach: bool, resume: bool, force: bool,
                         stderr: TextIO = sys.stderr, options: Any = None) -> int:
    """``ftwiz --launch`` with ``backend = "slurm"``: allocate, check, then run the job through job steps.

    The supervisor is the SSH backend's (progress, logs, run.json, stall detection, stop-all); only the node
    transport differs (:mod:`tui.slurm.link`), and the run is started by the allocation's keepers
    (:mod:`tui.slurm.keeper`), so it goes on when ftwiz detaches. The job is cancelled when the run ends,
    unless ``[slurm] keep_allocation`` or the run was detached (the job then ends with the run).
    """
    from tui.launch import commands
    from tui.launch.options import RunOptions
    from tui.slurm.agents import AgentStepError
    from tui.slurm.allocation import AllocationError
    from tui.slurm.link import srun_link_factory
    from tui.slurm.session import allocation_session

    say = _say(stderr)
    config = loaded.config
    try:
        with allocation_session(config, say=say, job_name="ftwiz-run", keep=config.slurm.keep_allocation) as session:
            run = _checklist(session, stderr)
            for row in run.results:
                if row.status in ("fail", "warn"):
                    say(f"  {row.status.upper()}  {row.id}  {row.node or '-'}  {row.detail}"
                        + (f"\n        fix: {row.hint}" if row.hint else ""))
            fails = sum(1 for r in run.results if r.status == "fail")
            if fails and not force:
                say(f"ERROR: {fails} check(s) failed: not launching. Fix them, or pass --force to launch anyway")
                return EXIT_FAILED
            _wait_for_listener(run.rendezvous_listener_until)
            run_options = options or RunOptions()
            job = session.allocation.job_id
            run_options.link_factory = srun_link_factory(job, session.keeper)
            held = HeldRun(job, session.allocation.nodes, keeper=session.keeper, state_dir=str(session.state_dir),
                           keep=session.keep, time_limit=config.slurm.time)
            run_options.on_run = held.started
            try:
                code = int(commands.launch(session.config, yes=yes, detach=detach, resume=resume, force=force,
                                           options=run_options, checklist=False))
            finally:
                held.stop_watching()
            if held.detached:
                session.hand_over()
                say(f"run {held.run_id} goes on in job {job}: `ftwiz --attach {held.run_id}` follows it, "
                    f"`ftwiz --stop {held.run_id}` stops it")
            held.report(say)
            return code
    except (AllocationError, AgentStepError) as exc:
        say(str(exc))
        return EXIT_FAILED


def attach_on_allocation(loaded: Any, run_id: str | None, *, stderr: TextIO = sys.stderr, options: Any = None) -> int:
    """``ftwiz --attach`` of a run living in a Slurm job: follow it through job steps (the job must still run)."""
    from tui.launch import commands
    from tui.launch.options import RunOptions
    from tui.slurm.keeper import release_file
    from tui.slurm.link import srun_link_factory

    say = _say(stderr)
    run_options = options or RunOptions()
    found = _slurm_run(run_id, run_options, say)
    if isinstance(found, int):
        return found
    run_id, record, info = found
    job = str(info["job_id"])
    if not _job_running(job, say, run_id, record):
        return EXIT_FAILED
    config = FtwizConfig.model_validate(record["config"])
    keep = bool(info.get("keep_allocation"))
    release = release_file(info["state_dir"], job)
    release.unlink(missing_ok=True)  # supervised again: this ftwiz ends the job when the run ends
    run_options.link_factory = srun_link_factory(job, info.get("keeper"))
    held = HeldRun(job, list(info.get("nodes") or []), keeper=info.get("keeper"), state_dir=info["state_dir"],
                   keep=keep, time_limit=str(info.get("time_limit") or ""))
    run_options.on_run = held.started
    try:
        code = int(commands.attach(config, run_id, options=run_options))
    finally:
        held.stop_watching()
    if held.detached or held.run is None or held.run.result is None:  # detached again, or the attach failed
        if not keep:
            release.touch()
        say(f"run {run_id} goes on in job {job}")
    elif not keep:
        slurmctl_cancel(job)
        say(f"job {job} cancelled")
    held.report(say)
    return code


def stop_on_allocation(loaded: Any, run_id: str, *, stderr: TextIO = sys.stderr, options: Any = None) -> int:
    """``ftwiz --stop RUN`` of a run living in a Slurm job: stop its processes on every node, then ``scancel``."""
    from tui.launch import commands
    from tui.launch.options import RunOptions
    from tui.slurm.link import srun_link_factory

    say = _say(stderr)
    run_options = options or RunOptions()
    found = _slurm_run(run_id, run_options, say)
    if isinstance(found, int):
        return found
    run_id, record, info = found
    job = str(info["job_id"])
    from tui.slurm.watch import ended_verdict

    gone = ended_verdict(job)
    if gone is not None:
        say(f"job {job} is already over ({gone.state}): Slurm ended every process of run {run_id}")
        return EXIT_OK
    config = FtwizConfig.model_validate(record["config"])
    run_options.link_factory = srun_link_factory(job, info.get("keeper"))
    code = int(commands.stop(config, run_id, options=run_options))
    if not info.get("keep_allocation"):
        slurmctl_cancel(job)
        say(f"job {job} cancelled (`scancel {job}`)")
    return code


class HeldRun:
    """One run in a Slurm job, as ``on_run`` sees it: ``run.json``'s ``slurm`` block and the job watcher."""

    def __init__(self, job_id: str, nodes: list[str], *, keeper: str | None, state_dir: str, keep: bool,
                 time_limit: str) -> None:
        self.job_id, self.nodes, self.time_limit = job_id, nodes, time_limit
        self.info: dict[str, Any] = {"job_id": job_id, "nodes": nodes, "keeper": keeper, "state_dir": state_dir,
                     "keep_allocation": keep, "time_limit": time_limit}
        self.run: Any = None
        self.watch: Any = None

    @property
    def run_id(self) -> str | None:
        return None if self.run is None else str(self.run.run_id)

    @property
    def detached(self) -> bool:
        result = None if self.run is None else self.run.result
        return result is not None and str(getattr(result.status, "value", result.status)) == "detached"

    def started(self, run: Any) -> None:
        """``RunOptions.on_run``: record the job, start watching it."""
        from tui.slurm.watch import JobWatch

        self.run = run
        stored = dict(run.record.model.slurm or {})
        stored.update(self.info)
        if stored != run.record.model.slurm:  # an attach finds it stored already, and must not write the record
            run.record.update(slurm=stored)
        batch = Path(self.info["state_dir"]) / f"job-{self.job_id}.out"
        self.watch = JobWatch(self.job_id, list(self.nodes), run.post, run.record.dir, time_limit=self.time_limit,
                              batch_output=batch).start()

    def stop_watching(self) -> None:
        if self.watch is not None:
            self.watch.stop()

    def report(self, say: Callable[[str], None]) -> None:
        """Say (and record) Slurm's verdict when Slurm ended the job."""
        ended = None if self.watch is None else self.watch.ended
        if ended is None or self.run is None:
            return
        result = self.run.result
        if result is None or ended.text not in (result.reason or ""):
            say(ended.text)
        stored = dict(self.run.record.model.slurm or {})
        stored["ended"] = ended.as_dict()
        self.run.record.update(slurm=stored)


def _slurm_run(run_id: str | None, options: Any, say: Callable[[str], None]) -> Any:
    """(run id, stored run.json, its ``slurm`` block), or an exit code after saying what is wrong."""
    from tui.launch.record import latest_run_id, load_record, runs_dir

    base = runs_dir(options.runs_dir)
    run_id = run_id or latest_run_id(base)
    if not run_id:
        say(f"ERROR: no run under {base}/; name one: ftwiz --attach RUN_ID")
        return EXIT_USAGE
    try:
        record = load_record(base, run_id)
    except (OSError, ValueError) as exc:
        say(f"ERROR: no readable record of run {run_id} under {base}/ ({exc})")
        return EXIT_USAGE
    info = record.get("slurm") or {}
    if not info.get("job_id") or not info.get("state_dir"):
        say(f"ERROR: run {run_id} was not launched on Slurm (its run.json has no slurm block); "
            'it is an SSH run: use a config with backend = "ssh"')
        return EXIT_USAGE
    return run_id, record, info


def _job_running(job: str, say: Callable[[str], None], run_id: str, record: dict[str, Any]) -> bool:
    """Whether job ``job`` still runs; otherwise say how it ended and how each node's torchrun ended."""
    from tui.slurm.watch import ended_verdict

    gone = ended_verdict(job)
    if gone is None:
        return True
    say(f"job {job} is over ({gone.state}), so run {run_id} is too; there is nothing to follow")
    for node, info in sorted((record.get("nodes") or {}).items()):
        rundir = (info or {}).get("rundir")
        exit_file = Path(rundir) / f"{node}.exit" if rundir else None
        code = exit_file.read_text().strip() if exit_file is not None and exit_file.is_file() else "no exit code"
        say(f"  {node}: torchrun {('exit ' + code) if code.lstrip('-').isdigit() else code}; log {rundir}/{node}.log")
    return False


def slurmctl_cancel(job: str) -> None:
    """``scancel JOB`` (quiet when it is gone)."""
    from tui.slurm import slurmctl

    slurmctl.cancel(job)


def _checklist(session: Any, stderr: TextIO) -> Any:
    """The checklist against the session's agents, with the Slurm rows (:mod:`tui.slurm.checks`)."""
    import asyncio

    from tui.checks.engine import run_checklist_full
    from tui.slurm.checks import slurm_rows

    run = asyncio.run(run_checklist_full(session.config, ssh=False, progress=_progress(stderr)))
    run.results = slurm_rows(session.allocation, session.step, run.results)
    return run


def _wait_for_listener(until: float | None) -> None:
    """torchrun must not start before the master's agent closed its rendezvous-port test listener."""
    import time

    from tui.launch.prepare import listener_deadline

    deadline = listener_deadline(until)
    while deadline is not None and time.time() < deadline:
        time.sleep(0.1)


def _say(stderr: TextIO) -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"ftwiz: {message}", file=stderr, flush=True)

    return say


def _progress(stderr: TextIO) -> Callable[[str, int, int], None]:
    def report(label: str, done: int, total: int) -> None:
        if ":" in label:
            print(f"ftwiz: {label}", file=stderr, flush=True)

    return report
