"""While a run is supervised on Slurm: what only Slurm knows, told to the run.

A thread polls the job (``squeue``; ``scontrol`` once it leaves RUNNING) and its nodes (``scontrol show node``)
every ``poll_s``. A node drained or set down mid-run is a warning note (a drained node keeps running the job;
Slurm only stops giving it new ones). When Slurm ends the job (time limit, node failure, preemption, a cancel
from outside), every process of the run is already gone: the watcher writes the evidence line to
``runs/<id>/_slurm.log`` (the doctor reads it), keeps the verdict, and posts
:class:`tui.launch.messages.AllocationEnded`, so the supervisor stops at once with Slurm's reason instead of
waiting for silent nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tui.launch.messages import AllocationEnded, BackendNote, RunnerMessage
from tui.slurm import slurmctl
from tui.slurm.endings import SlurmVerdict, evidence_line, verdict

__all__ = ["JobWatch", "ended_verdict"]

_OUT_STATES = ("DRAIN", "DOWN", "FAIL", "NOT_RESPONDING")


def ended_verdict(job_id: str, *, time_limit: str = "") -> SlurmVerdict | None:
    """The verdict when Slurm has ended (or is ending) the job, None while it runs."""
    info = slurmctl.job_info(job_id)
    if info.state == "RUNNING":
        return None
    detail = slurmctl.job_detail(job_id)
    state = detail.get("JobState") or info.state
    if state in ("RUNNING", "COMPLETING"):
        return None
    return verdict(job_id, state, detail.get("Reason") or info.reason, time_limit=time_limit)


class JobWatch:
    """The watcher thread of one supervised run (see the module docstring)."""

    def __init__(self, job_id: str, nodes: list[str], post: Callable[[RunnerMessage], None], run_dir: Path, *,
                 time_limit: str = "", batch_output: Path | None = None, poll_s: float = 2.0) -> None:
        self.job_id = job_id
        self.nodes = nodes
        self.post = post
        self.run_dir = run_dir
        self.time_limit = time_limit
        self.poll_s = poll_s
        self.batch_output = batch_output
        #: Slurm's verdict once it ended the job.
        self.ended: SlurmVerdict | None = None
        self._seen: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"ftwiz-slurm-watch-{job_id}", daemon=True)

    def start(self) -> JobWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before ftwiz itself cancels the job)."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        warned = False
        while not self._stop.wait(self.poll_s):
            try:
                if self._check():
                    return
                warned = False
            except slurmctl.SlurmError as exc:
                if not warned:  # once per outage, not every poll
                    self.post(BackendNote("warn", f"could not ask Slurm about job {self.job_id}: {exc}"))
                warned = True

    def _check(self) -> bool:
        ended = ended_verdict(self.job_id, time_limit=self.time_limit)
        if ended is not None and not self._stop.is_set():
            self.ended = ended
            detail = slurmctl.job_detail(self.job_id)
            stamp = detail.get("EndTime", "")
            line = evidence_line(ended) + (f" EndTime={stamp}" if stamp and stamp != "Unknown" else "")
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / "_slurm.log", "a", encoding="utf-8") as handle:
                handle.write(line + "\n" + ended.text + "\n" + self._batch_words())
            self.post(AllocationEnded(ended.text))
            return True
        return self._nodes()

    def _batch_words(self) -> str:
        """What srun and slurmstepd said in the batch step's output (``*** JOB ... DUE TO TIME LIMIT ***``)."""
        try:
            text = self.batch_output.read_text(errors="replace") if self.batch_output is not None else ""
        except OSError:
            return ""
        return "".join(line + "\n" for line in text.splitlines()[-40:])

    def _nodes(self) -> bool:
        for node, (state, reason) in slurmctl.node_states(self.nodes).items():
            out = any(word in state for word in _OUT_STATES)
            if out and self._seen.get(node) != state:
                self.post(BackendNote("warn", f"{node} is {state} in Slurm ({reason or 'no reason given'}): "
                                      + ("the run goes on there; Slurm gives the node no new jobs, so launch elsewhere "
                                         "next time (sbatch_args = [\"--exclude=" + node + "\"])" if "DRAIN" in state
                                         and "DOWN" not in state else "Slurm will end the job")))
            self._seen[node] = state if out else ""
        return False
