"""Which processes belong to a run, and what each is doing: one /proc reader for every reaper.

Used by the node helper (:mod:`nodeside.helper`) and by the agent daemon's reaper (:mod:`agent.reaper`), so it is
standard library only and runs on Python 3.8+. One rule for membership: a process belongs to run R on node N
when its environment holds ``FTWIZ_RUN_ID=R`` and ``FTWIZ_NODE=N`` exactly (the tags and the run-id rule are
:mod:`shared.nodewire`'s; matching the node too keeps nodes that share a PID space, containers or
network-namespace test nodes, from touching each other's ranks). A process group is the run's only while its
leader is the very process the launch started (:func:`group_is_runs`): group ids are reused, so a bare pgid from
a record proves nothing.
"""

import os

from shared.nodewire import NODE_ENV, RUN_ENV, RUN_ID_PATTERN, valid_run_id


def proc_environ(pid, proc_root="/proc"):
    """The environment of ``pid`` as a dict, or None (gone, or another user's process)."""
    try:
        with open("%s/%d/environ" % (proc_root, pid), "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def stat_fields(pid, proc_root="/proc"):
    """Fields of ``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, ... (None when gone)."""
    try:
        with open("%s/%d/stat" % (proc_root, pid), "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself hold spaces or ')'.
    return raw[raw.rfind(")") + 2:].split()


def start_time(pid, proc_root="/proc"):
    """When ``pid`` started (``/proc/<pid>/stat`` field 22, clock ticks after boot), or None when gone.

    A pid and its start time name one process for the life of the machine: a reused pid starts later.
    """
    fields = stat_fields(pid, proc_root)
    # stat_fields starts at field 3 (state), so field 22 is index 19.
    if not fields or len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


def group_is_runs(pgid, started, proc_root="/proc"):
    """True when process group ``pgid`` is still the one a launch started: its leader (pid ``pgid``) exists,
    leads that group, and started at ``started`` (recorded at launch). False for an unknown ``started``.
    """
    if not pgid or pgid <= 1 or started is None:
        return False
    fields = stat_fields(pgid, proc_root)
    return bool(fields) and len(fields) >= 20 and fields[2] == str(pgid) and fields[19] == str(started)


def alive(pid, proc_root="/proc"):
    """Running and not a zombie (a zombie has exited; only its parent's wait is missing)."""
    fields = stat_fields(pid, proc_root)
    return bool(fields) and fields[0] not in ("Z", "X")


def cmdline(pid, proc_root="/proc"):
    """The command line (at most 300 characters), '' when unreadable."""
    try:
        with open("%s/%d/cmdline" % (proc_root, pid), "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300]
    except OSError:
        return ""


def run_processes(run_id, node=None, proc_root="/proc", exclude=()):
    """``[(pid, env)]`` of the live processes of run ``run_id`` (on ``node`` when given)."""
    if not valid_run_id(run_id):
        raise ValueError("run id %r does not match %s" % (run_id, RUN_ID_PATTERN))
    needle = ("%s=%s" % (RUN_ENV, run_id)).encode()
    skip = set(exclude) | {os.getpid()}
    found = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit() or int(entry) in skip:
            continue
        pid = int(entry)
        try:
            with open("%s/%d/environ" % (proc_root, pid), "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        if needle not in raw.split(b"\0"):
            continue
        env = proc_environ(pid, proc_root) or {}
        if node is not None and env.get(NODE_ENV) != node:
            continue
        if alive(pid, proc_root):
            found.append((pid, env))
    return sorted(found)


def is_worker(env):
    """A torchrun worker (not torchrun itself or its shell): it has ``RANK`` and ``LOCAL_RANK``."""
    return bool(env) and "RANK" in env and "LOCAL_RANK" in env


def process_sample(pid, proc_root="/proc"):
    """``(state, cpu_ticks, io_bytes, ppid)`` of ``pid``, or None when gone.

    ``cpu_ticks`` is user + system time in clock ticks; ``io_bytes`` is ``rchar + wchar`` (every
    read and write syscall: files, pipes and sockets) or 0 when ``/proc/<pid>/io`` is not readable.
    """
    fields = stat_fields(pid, proc_root)
    if not fields or len(fields) < 13:
        return None
    io_bytes = 0
    try:
        with open("%s/%d/io" % (proc_root, pid)) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("rchar", "wchar"):
                    io_bytes += int(value.strip() or 0)
    except (OSError, ValueError):
        pass
    return fields[0], int(fields[11]) + int(fields[12]), io_bytes, int(fields[1])


def sched_ns(pid, proc_root="/proc"):
    """``(run_ns, wait_ns)`` of ``pid``'s main thread: time on a CPU, and time runnable but waiting for one (a
    busy host, or a cgroup CPU quota holding it back); None when unreadable (``/proc/<pid>/schedstat``)."""
    try:
        with open("%s/%d/schedstat" % (proc_root, pid)) as fh:
            fields = fh.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def worker_samples(workers, proc_root="/proc"):
    """Per global rank, one sample summed over the rank's processes (its own children too).

    ``workers`` is ``[(pid, env)]`` of worker processes; returns ``[{"rank", "pid", "state", "cpu",
    "io"}]`` where ``pid``/``state`` are the rank's root process (the one whose parent is not of the
    same rank: torchrun started it) and ``cpu``/``io`` the sums; ``run_ns``/``wait_ns`` (:func:`sched_ns`)
    are the root's main thread's, the one that runs the training loop, when readable.
    """
    by_rank = {}  # type: dict
    for pid, env in workers:
        rank = env.get("RANK", "")
        if not rank.isdigit():
            continue
        sample = process_sample(pid, proc_root)
        if sample is None:
            continue
        by_rank.setdefault(int(rank), []).append((pid, sample))
    rows = []
    for rank, procs in sorted(by_rank.items()):
        pids = {pid for pid, _ in procs}
        roots = [(pid, s) for pid, s in procs if s[3] not in pids] or procs
        root_pid, root = min(roots)
        row = {"rank": rank, "pid": root_pid, "state": root[0], "cpu": sum(s[1] for _, s in procs), "io": sum(s[2] for _, s in procs)}
        sched = sched_ns(root_pid, proc_root)
        if sched is not None:
            row["run_ns"], row["wait_ns"] = sched
        rows.append(row)
    return rows
