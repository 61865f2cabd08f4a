"""One run inside a Slurm job, as ftwiz holds it: ``run.json``'s ``slurm`` block, the job watcher, the hand-over.

:class:`HeldRun` is what ``--launch``, ``--attach`` and the wizard share: it wires the srun transport and the
keepers into :class:`tui.launch.options.RunOptions`, records the job in ``run.json`` when the run exists,
watches the job while it is supervised (:class:`tui.slurm.watch.JobWatch`), and at the end hands a detached
run's job over to the run or says how Slurm ended it. :func:`stored_run` finds a run's job from its record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.config import FtwizConfig
from shared.nodewire import EXIT_FILE, LOG, parse_exit, run_file
from tui.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "HeldRun", "StoredRun", "cancel_job", "job_running", "stored_run"]


Say = Callable[[str], None]


class HeldRun:
    """One run in a Slurm job, as ``on_run`` sees it: ``run.json``'s ``slurm`` block and the job watcher."""

    def __init__(self, job_id: str, nodes: list[str], *, keeper: str | None, state_dir: str, keep: bool,
                 time_limit: str) -> None:
        self.job_id, self.nodes, self.time_limit = job_id, nodes, time_limit
        self.info: dict[str, Any] = {"job_id": job_id, "nodes": nodes, "keeper": keeper, "state_dir": state_dir,
                     "keep_allocation": keep, "time_limit": time_limit}
        self.run: Any = None
        self.watch: Any = None

    @classmethod
    def for_session(cls, session: Any) -> HeldRun:
        """The run about to start in ``session``'s allocation (:class:`tui.slurm.session.Session`)."""
        config = session.allocation.config
        return cls(session.allocation.job_id, session.allocation.nodes, keeper=session.keeper,
                   state_dir=str(session.state_dir), keep=session.keep, time_limit=config.slurm.time)

    @classmethod
    def for_record(cls, stored: StoredRun) -> HeldRun:
        """A stored run's job, as its ``run.json`` ``slurm`` block says."""
        info = stored.info
        return cls(stored.job, list(info.get("nodes") or []), keeper=info.get("keeper"), state_dir=info["state_dir"],
                   keep=bool(info.get("keep_allocation")), time_limit=str(info.get("time_limit") or ""))

    def wire(self, options: Any) -> Any:
        """``options`` with the srun transport of this job, the keepers, and :meth:`started` as ``on_run``."""
        from tui.slurm.link import srun_link_factory

        options.link_factory = srun_link_factory(self.job_id, self.info["keeper"])
        options.on_run = self.started
        return options

    def finish(self, session: Any, say: Say) -> None:
        """After supervision: stop watching; a detached run gets the job (it ends with the run); Slurm's word."""
        self.stop_watching()
        if self.detached:
            session.hand_over()
            say(f"run {self.run_id} goes on in job {self.job_id}: `ftwiz --attach {self.run_id}` follows it, "
                f"`ftwiz --stop {self.run_id}` stops it")
        self.report(say)

    def settle(self, timeout_s: float = 30.0) -> None:
        """Wait until a started run has a result (a detach or a stop finishing on the run's thread)."""
        deadline = time.monotonic() + timeout_s
        while self.run is not None and self.run.result is None and time.monotonic() < deadline:
            time.sleep(0.1)

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

    def report(self, say: Say) -> None:
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


class StoredRun:
    """A run launched on Slurm, from its ``run.json``: id, record, ``slurm`` block, job id, the allocation's config."""

    def __init__(self, run_id: str, record: dict[str, Any], info: dict[str, Any]) -> None:
        self.run_id, self.record, self.info = run_id, record, info
        self.job = str(info["job_id"])

    @property
    def config(self) -> FtwizConfig:
        """The allocation's concrete config the run was launched with (one ``[[nodes]]`` per allocated node)."""
        return FtwizConfig.model_validate(self.record["config"])


def stored_run(run_id: str | None, options: Any, say: Say) -> StoredRun | int:
    """The stored Slurm run ``run_id`` (default: the latest), or an exit code after saying what is wrong."""
    from tui.runs.index import RunNotFound, find_run
    from tui.runs.record import RunRecord, latest_run_id, runs_dir

    base = runs_dir(options.runs_dir)
    run_id = run_id or latest_run_id(base)
    if not run_id:
        say(f"ERROR: no run under {base}/; name one: ftwiz --attach RUN_ID")
        return EXIT_USAGE
    try:  # found from anywhere, read through the typed model (which refuses a job id that is not one)
        where = find_run(run_id, options.runs_dir)
        model = RunRecord.open(where.parent, run_id).model
    except RunNotFound as exc:
        say(f"ERROR: {exc}")
        return EXIT_USAGE
    options.runs_dir = where.parent
    record = model.model_dump(mode="json")
    info = record.get("slurm") or {}
    if not info.get("job_id") or not info.get("state_dir"):
        say(f"ERROR: run {run_id} was not launched on Slurm (its run.json has no slurm block); "
            'it is an SSH run: use a config with backend = "ssh"')
        return EXIT_USAGE
    return StoredRun(run_id, record, info)


def job_running(stored: StoredRun, say: Say) -> bool:
    """Whether the run's job still runs; otherwise say how it ended and how each node's torchrun ended."""
    from tui.slurm.watch import ended_verdict

    job, run_id, record = stored.job, stored.run_id, stored.record
    gone = ended_verdict(job)
    if gone is None:
        return True
    say(f"job {job} is over ({gone.state}), so run {run_id} is too; there is nothing to follow")
    for node, info in sorted((record.get("nodes") or {}).items()):
        rundir = (info or {}).get("rundir")
        exit_file = Path(rundir) / run_file(node, EXIT_FILE) if rundir else None
        code = parse_exit(exit_file.read_text()) if exit_file is not None and exit_file.is_file() else None
        say(f"  {node}: torchrun {'no exit code' if code is None else f'exit {code}'}; log {rundir}/{run_file(node, LOG)}")
    return False


def cancel_job(job: str) -> None:
    """``scancel JOB`` (quiet when it is gone)."""
    from tui.slurm import slurmctl

    slurmctl.cancel(job)
