"""The node helper: runs ON each node, standard library only (Python 3.8+).

The controller ships it inside the node bundle (:mod:`nodeside.boot`, built by :mod:`tui.launch.nodecode`) on the
command line of every call, ``<python> -I -S -c <boot> <bundle> <command> ...``, so it works on a node before,
during and after a run, with nothing installed. Its frames and tags are :mod:`shared.nodewire`'s. Commands:

``launch NODE TICK``
    Receive the job files on stdin, unpack them in the current directory (the run directory), and
    start ``<node>.sh`` in its own session on ``go``; then behave as ``follow`` (see
    :func:`cmd_launch` for the exchange).
``follow RUNDIR NODE OFFSET TICK``
    Stream ``<node>.log`` from byte ``OFFSET``, framed one record a line on stdout:
    ``P <pgid> <leader start time>`` once known, ``L <end offset> <text>`` per log line, ``T <unix time>`` every ``TICK``
    seconds (the controller's liveness signal: a cut link shows as missing ticks), and finally
    ``X <exit code>`` when torchrun ended by itself, ``X stopped`` when an ftwiz stop ended it
    (``<node>.stopped`` is there), or ``X gone`` when its process group vanished without an exit
    code (signalled by someone else). Every tick it also samples the run's workers on the node:
    ``S [{"rank", "pid", "state", "cpu", "io", "run_ns", "wait_ns"}, ...]`` (see
    :func:`nodeside.procmatch.worker_samples`).
``kill RUN_ID NODE GRACE [PGID [RUNDIR [PGID_START]]]``
    SIGTERM (then SIGCONT, so a stopped process can act on it) to every process whose environment
    carries ``FTWIZ_RUN_ID=RUN_ID`` and ``FTWIZ_NODE=NODE``, and to process group ``PGID`` only while
    its leader is the process the launch started (its start time, ``/proc/PID/stat`` field 22, equals
    ``PGID_START``: group ids are reused, so without a matching start time the group is left alone);
    after ``GRACE`` s, or as soon as no worker (``RANK`` in its environment) is left, SIGKILL the
    rest; print one JSON object ``{"killed": [...], "remaining": [...]}``.
    Matching the node as well as the run keeps nodes that share a PID space (containers,
    network-namespace test nodes) from killing each other's processes.
``signal RUN_ID NODE SIGNAME``
    Send a signal to the run's workers on this node (processes with ``RANK`` in their
    environment); print JSON ``{"signalled": [{"pid", "rank"}]}``.
``dump RUN_ID NODE [RUNDIR]``
    Dump every worker's Python stack into the node log (SIGUSR1 where a handler is registered,
    py-spy when installed); print JSON ``{"signalled": [...], "py_spy": [...], "no_dump": [...]}``.
``ps RUN_ID NODE``
    Print JSON ``{"processes": [{"pid", "cmdline", "rank"}]}`` of the run's processes on this node.
``keep KEEPERS``
    (Slurm) Be this node's keeper: start the runs requested under ``KEEPERS`` (:mod:`nodeside.keeper`).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from nodeside.procmatch import (
    alive,
    cmdline,
    group_is_runs,
    is_worker,
    proc_environ,
    run_processes,
    start_time,
    worker_samples,
)
from shared import nodewire
from shared.logprefix import rank_prefix


def _is_worker(pid):
    return is_worker(proc_environ(pid))


def _group_pids(pgid):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid and alive(int(entry)):
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _group_running(pgid, started):
    """Whether the run's process group still has live members; a group id whose leader is now another
    process (a different start time) is not the run's."""
    leader = start_time(pgid)
    if started is not None and leader is not None and not group_is_runs(pgid, started):
        return False
    return bool(_group_pids(pgid))


def _read_pgid(path):
    """``(pgid, leader start time)`` from a ``<node>.pgid`` file (start None in files of older runs), or None."""
    return nodewire.parse_pgid(_read_text(path) or "")


def _send(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def cmd_kill(run_id, node, grace, pgid=None, rundir=None, started=None):
    """TERM → grace → KILL everything of the run on this node; report it as JSON.

    The run's processes are those that carry its tag; process group ``pgid`` is signalled as a group
    only at moments its leader is provably the launched one (:func:`group_is_runs` with ``started``).
    With ``rundir``, first leave ``<node>.stopped`` there, so whoever follows the log (another
    controller attached to the run) learns the run was stopped on purpose, not killed. The report's
    ``stopped_before`` says the marker was already there: another ftwiz stopped the run on this node first.
    """
    killed = {}
    rundir = os.path.expanduser(rundir) if rundir else None
    before = False
    if rundir and os.path.isdir(rundir):
        marker = os.path.join(rundir, nodewire.run_file(node, nodewire.STOPPED_FILE))
        before = os.path.exists(marker)  # another ftwiz stopped this run here first (its failures are that stop's)
        if not before:
            try:
                with open(marker, "w") as fh:
                    fh.write("%.3f\n" % time.time())
            except OSError:
                pass

    def ours():
        return bool(pgid) and group_is_runs(pgid, started)

    def targets():
        pids = {pid for pid, _ in run_processes(run_id, node)}
        if ours():
            pids.update(_group_pids(pgid))
        return pids

    first = targets()
    if ours():
        try:
            os.killpg(pgid, signal.SIGTERM)
            os.killpg(pgid, signal.SIGCONT)
        except OSError:
            pass
    for pid in first:
        killed[pid] = {"pid": pid, "cmdline": cmdline(pid), "signal": "SIGTERM"}
        _send(pid, signal.SIGTERM)
        _send(pid, signal.SIGCONT)
    # The grace is for the ranks. Once they are gone, what is left is torchrun and its shell, whose
    # remaining work (a rendezvous shutdown against a store that is going away) can hang: KILL them.
    deadline = time.time() + grace
    while time.time() < deadline:
        left = targets()
        if not left or not any(_is_worker(pid) for pid in left):
            break
        time.sleep(0.05)
    for pid in targets():
        info = killed.setdefault(pid, {"pid": pid, "cmdline": cmdline(pid)})
        info["signal"] = "SIGKILL"
        _send(pid, signal.SIGKILL)
    if ours():
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.time() + 3.0
    while time.time() < deadline and targets():
        time.sleep(0.05)
    remaining = sorted(targets())
    for pid, info in killed.items():
        info["gone"] = pid not in remaining
    print(json.dumps({"killed": sorted(killed.values(), key=lambda k: k["pid"]), "remaining": remaining, "stopped_before": before}))
    return 0


def cmd_signal(run_id, node, signame):
    """Signal the run's worker processes (they have RANK in their environment)."""
    sig = getattr(signal, signame)
    done = []
    for pid, env in run_processes(run_id, node):
        if "RANK" in env and _send(pid, sig):
            done.append({"pid": pid, "rank": int(env["RANK"]) if env["RANK"].isdigit() else None})
    print(json.dumps({"signalled": done}))
    return 0


def _catches(pid, signum):
    """True when ``pid`` has a handler for ``signum`` (``SigCgt`` in /proc/<pid>/status)."""
    try:
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _py_spy():
    """The py-spy binary beside the training interpreter or on PATH, or None."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def cmd_dump(run_id, node, rundir=None):
    """Dump every worker's Python stack into the node log; print JSON of what was done.

    A worker with a SIGUSR1 handler (the built-in workloads register faulthandler there) gets
    SIGUSR1; with py-spy installed beside the training interpreter or on PATH, every worker's stack
    is also read from outside (``py-spy dump --nonblocking``: works on a stopped or hung process)
    and appended to ``<node>.log`` as ``[rank<N>]:py-spy | ...`` lines. A worker without a handler
    never gets SIGUSR1 (its default action would kill it).
    """
    workers = [(pid, env) for pid, env in run_processes(run_id, node) if is_worker(env)]
    roots = {row["pid"]: row["rank"] for row in worker_samples(workers)}
    signalled, spied, skipped = [], [], []
    for pid, rank in sorted(roots.items(), key=lambda item: item[1]):
        if _catches(pid, signal.SIGUSR1) and _send(pid, signal.SIGUSR1):
            signalled.append({"pid": pid, "rank": rank})
        elif not _py_spy():
            skipped.append({"pid": pid, "rank": rank})
    spy = _py_spy()
    log = os.path.join(os.path.expanduser(rundir), nodewire.run_file(node, nodewire.LOG)) if rundir else None
    if spy:
        for pid, rank in sorted(roots.items(), key=lambda item: item[1]):
            try:
                out = subprocess.run([spy, "dump", "--pid", str(pid), "--nonblocking"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, timeout=20, check=False).stdout.decode("utf-8", "replace")
            except (OSError, subprocess.SubprocessError) as exc:
                out = "py-spy failed: %s" % exc
            spied.append({"pid": pid, "rank": rank})
            if log:
                try:
                    with open(log, "a") as fh:
                        for line in out.splitlines() or ["(no output)"]:
                            fh.write("%spy-spy | %s\n" % (rank_prefix(rank), line))
                except OSError:
                    pass
    print(json.dumps({"signalled": signalled, "py_spy": spied, "no_dump": skipped}))
    return 0


def cmd_ps(run_id, node):
    """List the run's processes on this node."""
    procs = [
        {"pid": pid, "cmdline": cmdline(pid), "rank": env.get("RANK")}
        for pid, env in run_processes(run_id, node)
    ]
    print(json.dumps({"processes": procs}))
    return 0


def _emit(kind, body=""):
    sys.stdout.write(nodewire.frame(kind, body) + "\n")
    sys.stdout.flush()


def _read_text(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


class _Bounded(object):
    """At most ``size`` bytes of ``stream`` (the payload frame), so the ``go`` line after it stays unread."""

    def __init__(self, stream, size):
        self.stream, self.left = stream, size

    def read(self, n=-1):
        # type: (int) -> bytes
        if n is None or n < 0 or n > self.left:
            n = self.left
        data = self.stream.read(n) if n else b""
        self.left -= len(data)
        return data

    def drain(self):
        """Read what the archive left of the frame; False when the input ended before the frame did."""
        while self.left:
            if not self.read(1 << 16):
                return False
        return True


def cmd_launch(node, tick):
    """Receive the job on stdin, wait for ``go``, start ``<node>.sh`` in its own session, then follow.

    Run inside the (new) run directory. Protocol: print ``R <run dir>``; read ``payload <n>\\n`` and
    n bytes (a tar of the job files) and unpack it; print ``U``; read one line: ``go`` starts the run
    (``P <pgid>``, then as ``follow``), anything else or end of input leaves without starting anything
    (``X aborted``). One SSH exec per node carries upload, start and log stream.
    """
    import subprocess
    import tarfile

    rundir = os.getcwd()
    _emit(nodewire.RUNDIR, rundir)
    size = nodewire.parse_payload_header(sys.stdin.buffer.readline())
    if size is None:
        _emit(nodewire.EXIT, nodewire.ABORTED)
        return 3
    os.umask(0o077)  # job.json and <node>.sh hold the job's secrets; the logs and exit files are the user's alone
    payload = _Bounded(sys.stdin.buffer, size)
    extract = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.12+: refuse links, devices
    try:
        # Streamed: the node's own tar, then the run's code tar, read as one archive (ignore_zeros).
        with tarfile.open(fileobj=payload, mode="r|", ignore_zeros=True) as tar:  # type: ignore[call-overload]
            for member in tar:
                if member.name.startswith("/") or ".." in member.name.split("/") or not (member.isfile() or member.isdir()):
                    _emit(nodewire.EXIT, nodewire.BAD_PAYLOAD)
                    return 3
                tar.extract(member, rundir, **extract)
    except (tarfile.TarError, EOFError):
        _emit(nodewire.EXIT, nodewire.ABORTED)
        return 3
    if not payload.drain():
        _emit(nodewire.EXIT, nodewire.ABORTED)
        return 3
    _emit(nodewire.UNPACKED)
    if sys.stdin.buffer.readline().strip() != nodewire.GO:
        _emit(nodewire.EXIT, nodewire.ABORTED)
        return 0
    for suffix in (nodewire.PGID_FILE, nodewire.EXIT_FILE, nodewire.STOPPED_FILE):
        try:
            os.unlink(os.path.join(rundir, nodewire.run_file(node, suffix)))
        except OSError:
            pass
    keeper = os.environ.get(nodewire.KEEPER_ENV)
    if keeper:
        # On Slurm the node's keeper (a job step of the allocation) starts the run, so it outlives this
        # step; ask it, then follow as on a re-attach (node.sh writes the pgid file).
        here = os.path.join(keeper, os.environ.get("SLURMD_NODENAME") or node)
        if not os.path.isdir(here):
            os.makedirs(here, exist_ok=True)
        request = os.path.join(here, os.path.basename(rundir) + nodewire.START_SUFFIX)
        with open(request + ".tmp", "w") as handle:
            handle.write(nodewire.start_request(rundir, node))
        os.rename(request + ".tmp", request)
        return cmd_follow(rundir, node, 0, tick)
    with open(os.devnull, "r+b") as null:
        # start_new_session: setsid, so the run is its own session and process group, detached from SSH.
        child = subprocess.Popen(["sh", nodewire.run_file(node, nodewire.SCRIPT)], cwd=rundir, stdin=null, stdout=null, stderr=null, start_new_session=True)
    # The child is unreaped, so its pid (and start time) cannot be another process's yet.
    started = start_time(child.pid)
    _emit(nodewire.PGID, nodewire.pgid_body(child.pid, started))
    return cmd_follow(rundir, node, 0, tick, child=child, started=started)


def cmd_follow(rundir, node, offset, tick, child=None, started=None):
    """Stream the node log, framed, with ticks; end with the exit code."""
    log = os.path.join(rundir, nodewire.run_file(node, nodewire.LOG))
    pgid_file = os.path.join(rundir, nodewire.run_file(node, nodewire.PGID_FILE))
    exit_file = os.path.join(rundir, nodewire.run_file(node, nodewire.EXIT_FILE))
    pgid = None
    handle = None
    pending = b""
    last_tick = 0.0
    gone_since = None
    waited_since = time.time()
    run_id = os.path.basename(os.path.normpath(rundir))
    workers = []  # type: list
    scans = 0
    ended = None
    if child is not None:
        pgid = child.pid
        ended = _on_exit(child)
    while True:
        now = time.time()
        if child is not None:
            child.poll()  # reap our own child, so the group check below never sees a zombie
        if now - last_tick >= tick:
            _emit(nodewire.TICK, "%.3f" % now)
            last_tick = now
            if pgid is not None:
                # The workers' activity (state, CPU, I/O): how the controller tells a loading rank from a hung one.
                if not workers or scans % 5 == 0 or not all(alive(pid) for pid, _ in workers):
                    workers = [(pid, env) for pid, env in run_processes(run_id, node) if is_worker(env)]
                scans += 1
                if workers:
                    _emit(nodewire.SAMPLES, nodewire.samples_body(worker_samples(workers)))
        if pgid is None:
            found = _read_pgid(pgid_file)
            if found is not None:
                pgid, started = found
                _emit(nodewire.PGID, nodewire.pgid_body(pgid, started))
        if handle is None and os.path.exists(log):
            handle = open(log, "rb")
            handle.seek(offset)
        got = False
        if handle is not None:
            chunk = handle.read(1 << 16)
            if chunk:
                got = True
                pending += chunk
                while b"\n" in pending or len(pending) > 65536:
                    if b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        offset += len(line) + 1
                    else:
                        line, pending = pending[:65536], pending[65536:]
                        offset += len(line)
                    _emit(nodewire.LINE, nodewire.line_body(offset, line.decode("utf-8", "replace")))
        if got:
            continue
        code = nodewire.parse_exit(_read_text(exit_file) or "")
        running = pgid is not None and _group_running(pgid, started)
        if code is not None and not running:
            _flush_pending(pending, offset)
            _emit(nodewire.EXIT, str(code))
            return 0
        if pgid is not None and not running:
            # The group is gone without an exit file: signalled. Give the file a moment to land.
            gone_since = gone_since or now
            if now - gone_since > 1.0:
                _flush_pending(pending, offset)
                stopped = os.path.exists(os.path.join(rundir, nodewire.run_file(node, nodewire.STOPPED_FILE)))
                _emit(nodewire.EXIT, nodewire.STOPPED if stopped else nodewire.GONE)
                return 0
        if pgid is None and now - waited_since > 30 and not os.path.exists(log):
            _emit(nodewire.EXIT, nodewire.MISSING)
            return 0
        # Poll fast until torchrun is up (the launch waits for the pgid), then at an easy pace; our own child's end
        # (the launch's <node>.sh) wakes the loop at once, so a run's end is reported when it happens.
        pause = 0.2 if pgid is not None else 0.02
        if ended is not None and not ended.is_set():
            ended.wait(pause)
        else:
            time.sleep(pause)


def _on_exit(child):
    """An event set the moment ``child`` ends (a thread waits for it, which also reaps it)."""
    import threading

    ended = threading.Event()

    def wait():
        try:
            child.wait()
        finally:
            ended.set()

    threading.Thread(target=wait, name="ftwiz-child-wait", daemon=True).start()
    return ended


def _flush_pending(pending, offset):
    if pending:
        _emit(nodewire.LINE, nodewire.line_body(offset + len(pending), pending.decode("utf-8", "replace")))


def main(argv):
    """Dispatch a command (see the module docstring)."""
    if not argv:
        print("usage: launch|follow|kill|signal|dump|ps|keep ...", file=sys.stderr)
        return 2
    command, args = argv[0], argv[1:]
    if command == "launch":
        return cmd_launch(args[0], float(args[1]))
    if command == "follow":
        return cmd_follow(args[0], args[1], int(args[2]), float(args[3]))
    if command == "kill":
        pgid = int(args[3]) if len(args) > 3 and args[3].isdigit() else None
        started = int(args[5]) if len(args) > 5 and args[5].isdigit() else None
        return cmd_kill(args[0], args[1], float(args[2]), pgid, args[4] if len(args) > 4 and args[4] else None, started)
    if command == "signal":
        return cmd_signal(args[0], args[1], args[2])
    if command == "dump":
        return cmd_dump(args[0], args[1], args[2] if len(args) > 2 else None)
    if command == "ps":
        return cmd_ps(args[0], args[1])
    if command == "keep":
        from nodeside.keeper import keep

        return keep(args[0])
    print("unknown command %r" % command, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
