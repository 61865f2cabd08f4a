"""One allocation session: submit, wait (with reasons), agents as a step, the allocation's config; then clean up.

Used by ``--check`` and ``--launch`` alike. On leaving (normally, on error or Ctrl-C) the agent step is stopped
and the job cancelled, unless ``keep`` (``[slurm] keep_allocation``) or :meth:`Session.hand_over` (a detached
run: the keepers end the job when the run ends).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.config import FtwizConfig
from tui.slurm.agents import AgentStep, write_token
from tui.slurm.allocation import Allocation
from tui.slurm.keeper import batch_script, keeper_dir, release_file

__all__ = ["Session", "allocation_session", "workdir_abs"]


def workdir_abs(config: FtwizConfig) -> str:
    """``[slurm] workdir`` resolved here (the same path on every node: a shared filesystem)."""
    return os.path.abspath(os.path.expanduser(config.slurm.workdir))


@dataclass
class Session:
    """What an allocation session holds."""

    allocation: Allocation
    step: AgentStep
    config: FtwizConfig
    """The allocation's config: one ``[[nodes]]`` per allocated node, the agents' ports and token."""
    state_dir: Path
    """``<workdir>/.ftwiz-slurm``: per-job token, keeper requests, the batch step's output."""
    keep: bool = False
    """Leave the job running on exit (``keep_allocation``, or handed over to a detached run)."""
    handed_over: bool = False

    @property
    def keeper(self) -> str:
        """The keepers' request directory (:func:`tui.slurm.keeper.keeper_dir`)."""
        return keeper_dir(self.state_dir, self.allocation.job_id)

    def hand_over(self) -> None:
        """A run goes on detached: the job is not cancelled, and (unless kept) ends when the run ends."""
        self.handed_over = True
        if not self.keep:
            release_file(self.state_dir, self.allocation.job_id).touch()


@contextlib.contextmanager
def allocation_session(config: FtwizConfig, *, say: Callable[[str], None], job_name: str,
                       keep: bool = False, ready_timeout_s: float = 180.0) -> Iterator[Session]:
    """Allocate ``[slurm]``'s nodes and start the agents; yields a :class:`Session`.

    Raises :class:`tui.slurm.allocation.AllocationError` or :class:`tui.slurm.agents.AgentStepError`.
    """
    workdir = workdir_abs(config)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    state = Path(workdir) / ".ftwiz-slurm"
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    output = f"{state}/job-%j.out" if not any(c.isspace() for c in str(state)) else "/dev/null"
    allocation = Allocation.submit(config, job_name=job_name, output=output,
                                   script=batch_script(state, config.slurm.python))
    say(f"submitted job {allocation.job_id} ({config.slurm.nodes} node(s)"
        f"{', partition ' + config.slurm.partition if config.slurm.partition else ''}); waiting for it to run")
    step: AgentStep | None = None
    session: Session | None = None
    try:
        allocation.wait_running(say=say)
        token = write_token(state / allocation.job_id)
        step = AgentStep(config, allocation.job_id, allocation.nodes, allocation.addresses,
                         token_file=token, workdir_abs=workdir).start()
        step.wait_ready(ready_timeout_s)
        say(f"agents up as a step of job {allocation.job_id}: "
            + ", ".join(f"{n}:{step.ports[n]}" for n in allocation.nodes))
        session = Session(allocation, step, step.cluster_config(), state, keep=keep)
        yield session
    finally:
        handed_over = session is not None and session.handed_over
        if not handed_over and not keep:
            # the job first, then the agents' step: ended in that order the job is CANCELLED, as said below; the other
            # way the batch step could end on its own between the two (a CI run saw the job FAILED, exit 137, 60 ms
            # before the scancel)
            allocation.cancel()
        if step is not None:
            step.stop()
        if handed_over and not keep:
            say(f"job {allocation.job_id} goes on with the run and ends when it ends; "
                f"`ftwiz --stop RUN` or `scancel {allocation.job_id}` ends it sooner")
        elif keep:
            say(f"job {allocation.job_id} kept ([slurm] keep_allocation = true); `scancel {allocation.job_id}` ends it")
        else:
            say(f"job {allocation.job_id} cancelled")
