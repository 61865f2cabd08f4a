"""``ftwiz --export-sbatch FILE``: a self-contained sbatch script for the configured job (pure: no I/O).

The script carries everything: the ``#SBATCH`` options of ``[slurm]``, the workloads package and ``job.json``
(a base64 tar, unpacked into the run directory at start), and one ``srun --ntasks-per-node=1`` of a node script
that runs the *same* torchrun command line and environment the SSH backend builds (:func:`tui.launch.plan.build_plan`).

What differs per node is only known inside the allocation, so the plan is built for placeholder nodes and
the per-node values become shell variables the script sets on each node:

* the master (c10d store host) is the first node of ``$SLURM_JOB_NODELIST``; ``MASTER_ADDR`` its IPv4 address;
* ``--rdzv-conf=is_host=`` is ``true`` on that node only, ``--local-addr`` is the address the node reaches the
  master from (``ip route get``), ``FTWIZ_NODE`` is ``$SLURMD_NODENAME``.

Every other value is :func:`shlex.quote`-d. The run directory must be on a filesystem every node shares
(``[slurm] workdir``): ranks read the workloads from it and write their logs to it.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping

from shared.config import FtwizConfig, NodeConfig
from shared.nodewire import EXIT_FILE, LOG
from tui.launch.plan import NodePlan, build_plan, make_payload, rundir_rel
from tui.slurm.options import sbatch_options

__all__ = ["PLACEHOLDER_ADDR", "PLACEHOLDER_NODE", "ExportError", "allocation_config", "export_script", "node_script"]

#: Placeholder node names and addresses the plan is built with (replaced by shell variables).
PLACEHOLDER_NODE = "ftwizslurmnode{i}"
PLACEHOLDER_ADDR = "ftwizslurmaddr{i}"
_PAYLOAD_END = "FTWIZ_PAYLOAD_END"
_NODE_END = "FTWIZ_NODE_SCRIPT_END"


class ExportError(ValueError):
    """The configured job cannot be written as an sbatch script; the message says why and the fix."""


def allocation_config(config: FtwizConfig, names: list[str], addresses: list[str],
                      agent_ports: Mapping[str, int] | None = None, *, per_node_workdir: bool = False) -> FtwizConfig:
    """``config`` with one ``[[nodes]]`` entry per allocated node (first = master), from ``[slurm]``'s values.

    ``per_node_workdir`` gives each node ``<workdir>/<node>``: the launcher's nodes each keep their own run files
    and checkpoints (as on the SSH backend), so nodes sharing one filesystem never write the same file.
    """
    slurm = config.slurm
    nodes = [
        NodeConfig.model_validate({"name": name, "host": address, "gpus": slurm.gpus_per_node,
                                   "python": slurm.python,
                                   "workdir": f"{slurm.workdir.rstrip('/')}/{name}" if per_node_workdir else slurm.workdir,
                                   "agent_port": (agent_ports or {}).get(name)})
        for name, address in zip(names, addresses, strict=True)
    ]
    data = config.model_dump()
    data["nodes"] = [n.model_dump() for n in nodes]
    data["cluster"]["master"] = names[0]
    return FtwizConfig.model_validate(data)


def export_script(config: FtwizConfig, run_id: str, *, workdir_abs: str, workloads: Mapping[str, bytes],
                  output_dir: str | None = None) -> str:
    """The whole sbatch script for ``config`` as run ``run_id``.

    ``workdir_abs`` is ``[slurm] workdir`` resolved (shared by every node); ``workloads`` the workloads package
    files (:func:`tui.launch.support.workload_files`).
    """
    slurm = config.slurm
    for arg in slurm.sbatch_args:
        if "\n" in arg or "\r" in arg:
            raise ExportError(f"[slurm] sbatch_args: {arg!r} holds a newline; give each option as one list item")
    rundir_abs = f"{workdir_abs.rstrip('/')}/{rundir_rel(run_id)}"
    n = slurm.nodes
    names = [PLACEHOLDER_NODE.format(i=i) for i in range(n)]
    addresses = [PLACEHOLDER_ADDR.format(i=i) for i in range(n)]
    concrete = allocation_config(config, names, addresses)
    plans = build_plan(concrete, run_id, rundirs=dict.fromkeys(names, rundir_abs),
                       network_env={name: _network_env(config) for name in names})
    plan = plans[-1]  # a plan for one node; what differs per node becomes shell variables in node_script
    spec = config.job.model_dump(mode="json")
    # One workdir shared by every node: only the main process writes checkpoints (the recipe's default is
    # every node's, for nodes without a shared filesystem).
    spec.update(run_id=run_id, workdir=workdir_abs, base_dir=workdir_abs, resume=None,
                output_dir=output_dir or config.job.output_dir, save_on_each_node=False)
    files = dict(workloads)
    files["job.json"] = json.dumps(spec, indent=2).encode()
    payload = base64.encodebytes(make_payload(files)).decode()
    rundir = shlex.quote(rundir_abs)
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {option}" for option in sbatch_options(slurm, job_name=f"ftwiz-{run_id}")]
    if _sbatch_safe(rundir_abs):
        lines.append(f"#SBATCH --output={rundir_abs}/slurm-%j.out")
    lines += [
        f"# ftwiz run {run_id} ({config.job.workload}), exported by `ftwiz --export-sbatch`: submit with `sbatch FILE`.",
        f"# Every node runs the same torchrun line and environment as ftwiz's SSH backend; logs in {rundir_abs}.",
        "set -eu",
        "umask 077  # job.json and node.sh hold [job].env / [nccl].env values: the run dir is the user's alone",
        f"mkdir -p {rundir}",
        f"chmod 700 {rundir}",
        f"base64 -d > {rundir}/payload.tar <<'{_PAYLOAD_END}'",
        payload.rstrip("\n"),
        _PAYLOAD_END,
        f"tar -xf {rundir}/payload.tar -C {rundir} && rm -f {rundir}/payload.tar",
        'FTWIZ_MASTER_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'MASTER_ADDR=$(getent ahostsv4 "$FTWIZ_MASTER_NODE" | awk \'NR == 1 {print $1}\')',
        'MASTER_ADDR=${MASTER_ADDR:-$FTWIZ_MASTER_NODE}',
        "export FTWIZ_MASTER_NODE MASTER_ADDR",
        f"cat > {rundir}/node.sh <<'{_NODE_END}'",
        node_script(plan, placeholders=len(names)),
        _NODE_END,
        f'echo "ftwiz: run {run_id} on $SLURM_JOB_NUM_NODES node(s), master $FTWIZ_MASTER_NODE ($MASTER_ADDR)"',
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 sh {rundir}/node.sh",
        "",
    ]
    return "\n".join(lines)


def node_script(plan: NodePlan, *, placeholders: int) -> str:
    """The ``sh`` script srun runs once per node: the plan's environment and torchrun, per-node values filled in.

    It writes torchrun's output to ``<rundir>/<node>.log`` and its exit code to ``<rundir>/<node>.exit``, as the
    SSH backend's start script does, and echoes both to the job's output.
    """
    rundir = shlex.quote(plan.env["PYTHONPATH"])
    lines = [
        "#!/bin/sh",
        "# One node of the run: generated by ftwiz, every value quoted; per-node values come from Slurm.",
        "set -u",
        'FTWIZ_NODE_NAME=${SLURMD_NODENAME:-$(hostname)}',
        'if [ "$FTWIZ_NODE_NAME" = "$FTWIZ_MASTER_NODE" ]; then',
        "  FTWIZ_IS_HOST=true",
        "  FTWIZ_LOCAL_ADDR=$MASTER_ADDR",
        "else",
        "  FTWIZ_IS_HOST=false",
        '  FTWIZ_LOCAL_ADDR=$(ip -o route get "$MASTER_ADDR" 2>/dev/null | sed -n \'s/.* src \\([^ ]*\\).*/\\1/p\')',
        '  FTWIZ_LOCAL_ADDR=${FTWIZ_LOCAL_ADDR:-$(getent ahostsv4 "$FTWIZ_NODE_NAME" | awk \'NR == 1 {print $1}\')}',
        "fi",
        f"cd {rundir} || exit 97",
    ]
    for key, value in sorted(plan.env.items()):
        lines.append(f"export {key}={_render(value, placeholders)}")
    if "GLOO_SOCKET_IFNAME" not in plan.env:
        lines += [
            "# No interface named in [nccl]: use the one that routes to the master (never lo), as the SSH backend does.",
            'dev=$(ip -o route get "$MASTER_ADDR" 2>/dev/null | sed -n \'s/.* dev \\([^ ]*\\).*/\\1/p\')',
            'if [ "$dev" = lo ]; then dev=$(ip -o addr show 2>/dev/null | awk -v a="$MASTER_ADDR" \'{split($4, p, "/"); if (p[1] == a) print $2}\' | head -n 1); fi',
            'if [ -n "$dev" ] && [ "$dev" != lo ]; then export GLOO_SOCKET_IFNAME="$dev"; [ -n "${NCCL_SOCKET_IFNAME+x}" ] || export NCCL_SOCKET_IFNAME="=$dev"; fi',
        ]
    argv = " ".join(_render(arg, placeholders) for arg in plan.argv)
    lines += [
        f'{argv} < /dev/null > {rundir}/"$FTWIZ_NODE_NAME"{LOG} 2>&1',
        "code=$?",
        f'echo $code > {rundir}/"$FTWIZ_NODE_NAME"{EXIT_FILE}',
        f'echo "ftwiz: $FTWIZ_NODE_NAME torchrun exit $code (log: "{rundir}/"$FTWIZ_NODE_NAME{LOG})"',
        "exit $code",
    ]
    return "\n".join(lines)


def _network_env(config: FtwizConfig) -> dict[str, str]:
    """What ``[nccl]`` says without agents to ask: an explicit interface, IB off; the rest is found on the node."""
    env: dict[str, str] = {}
    if config.nccl.socket_ifname != "auto":
        env["NCCL_SOCKET_IFNAME"] = config.nccl.socket_ifname
        env["GLOO_SOCKET_IFNAME"] = config.nccl.socket_ifname.lstrip("=^")
    if config.nccl.ib == "off":
        env["NCCL_IB_DISABLE"] = "1"
    return env


_PLACEHOLDER_RE = re.compile(r"is_host=(?:true|false)|ftwizslurmaddr(\d+)|ftwizslurmnode\d+")


def _render(value: str, placeholders: int) -> str:
    """``value`` quoted for sh, each placeholder replaced by its (double-quoted) shell variable."""
    out: list[str] = []
    pos = 0
    for match in _PLACEHOLDER_RE.finditer(value):
        if match.start() > pos:
            out.append(shlex.quote(value[pos:match.start()]))
        text = match.group(0)
        if text.startswith("is_host="):
            out.append(shlex.quote("is_host=") + '"$FTWIZ_IS_HOST"')
        elif match.group(1) is not None:
            out.append('"$MASTER_ADDR"' if match.group(1) == "0" else '"$FTWIZ_LOCAL_ADDR"')
        else:
            out.append('"$FTWIZ_NODE_NAME"')
        pos = match.end()
    if pos < len(value) or not out:
        out.append(shlex.quote(value[pos:]))
    return "".join(out)


def _sbatch_safe(path: str) -> bool:
    """Whether ``path`` can stand in an ``#SBATCH`` line (sbatch splits those on whitespace, no quoting)."""
    return not re.search(r"\s", path)
