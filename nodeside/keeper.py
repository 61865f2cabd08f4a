"""The Slurm keeper: one per node, a job step of the allocation that starts the runs ftwiz asks for.

Run by the allocation's batch script (:func:`tui.slurm.keeper.batch_script`) as the node helper's ``keep``
command: ``<python> -I -S -c <boot> <bundle> keep <keepers>``. It watches ``<keepers>/<node>/`` (``<node>`` is
``$SLURMD_NODENAME``) for start requests (:func:`shared.nodewire.start_request`, left there by the helper's
``launch``), starts ``sh <node>.sh`` in the request's run directory in its own session, as its child, so Slurm
accounts for every process of the run; it ends once ``<keepers>/../release`` exists and its runs have ended.
Standard library only, Python 3.8+.
"""

import os
import subprocess
import time

from shared import nodewire


def keep(base, poll_s=0.2):
    """Start the runs requested under ``base`` until released (see the module docstring); returns 0."""
    os.umask(0o077)  # the runs' logs and exit files, like their job files, are the user's alone
    here = os.path.join(base, os.environ.get("SLURMD_NODENAME") or os.uname()[1])
    os.makedirs(here, exist_ok=True)
    children = []  # type: list
    while True:
        for name in sorted(os.listdir(here)):
            if name.endswith(nodewire.START_SUFFIX):
                child = _start(os.path.join(here, name))
                if child is not None:
                    children.append(child)
        children = [child for child in children if child.poll() is None]
        if not children and os.path.exists(os.path.join(os.path.dirname(base), "release")):
            return 0
        time.sleep(poll_s)


def _start(path):
    """Start the run a request file asks for, removing the request; None when it is unreadable or not one yet."""
    try:
        with open(path) as handle:
            request = nodewire.parse_start_request(handle.read())
        if request is None:
            return None
        os.unlink(path)
    except OSError:
        return None
    rundir, node = request
    with open(os.devnull, "r+b") as null:
        return subprocess.Popen(["sh", nodewire.run_file(node, nodewire.SCRIPT)], cwd=rundir, stdin=null, stdout=null, stderr=null,
                                start_new_session=True)

