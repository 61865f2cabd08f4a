"""What one node needs in its run directory: the workloads package, ``job.json`` and its start script.

Called on that node's runner thread once the node's workdir and run dir are known (absolute paths
on the node). Returns the files (relative to the run dir) and the node's plan, and what the run
record keeps about the node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from shared.config import FtwizConfig, NodeConfig
from shared.redact import masked_env
from tui.codeship import bundle_for_run, resolve_code_dir
from tui.launch.plan import NodePlan, Payload, build_plan, start_script

__all__ = ["NodeFiles", "add_user_code", "node_files"]


@dataclass
class NodeFiles:
    """One node's run-dir files, its plan, and the fields the run record keeps for it."""

    files: dict[str, bytes]
    plan: NodePlan
    record: dict[str, Any] = field(default_factory=dict)
    """Fields for ``run.json``'s ``nodes[<node>]``."""
    run_record: dict[str, Any] = field(default_factory=dict)
    """Top-level fields for ``run.json`` (e.g. what code was shipped)."""
    code_tar: Optional[Path] = None
    """The user's code as one tar of ``code/<path>`` members, built once per run and shared by every node."""

    def payload(self) -> Payload:
        """What the node's launch exec receives: these files, then the code tar streamed from disk."""
        return Payload(self.files, (self.code_tar,) if self.code_tar is not None else ())


def node_files(
    config: FtwizConfig,
    node: NodeConfig,
    *,
    run_id: str,
    workdir_abs: str,
    rundir_abs: str,
    package: Mapping[str, bytes],
    reports: Mapping[str, Any],
    network_env: Optional[Mapping[str, Mapping[str, str]]],
    resume: bool,
    output_dir: str,
    config_dir: Optional[str] = None,
) -> NodeFiles:
    """Everything ``node`` needs under its run dir, for a run started from ``config``."""
    gpus: dict[str, list[int]] = {}
    cores: dict[str, Optional[int]] = {}
    report = reports.get(node.name)
    if report is not None:
        gpus[node.name] = [g.index for g in getattr(report, "gpus", [])]
        cores[node.name] = getattr(getattr(report, "host", None), "cpu_cores", None)
    plan = build_plan(
        config,
        run_id,
        rundirs={n.name: rundir_abs for n in config.nodes},
        gpu_indices=gpus,
        cpu_cores=cores,
        network_env=network_env,
    )
    mine = next(p for p in plan if p.node == node.name)
    spec = config.job.model_dump(mode="json")
    spec.update(run_id=run_id, workdir=workdir_abs, base_dir=workdir_abs, resume="auto" if resume else None, output_dir=output_dir)
    if spec.get("sharding") == "auto":  # the workload runs what the estimator picked: fsdp exactly when ddp does not fit
        from tui.checks.resources import launch_sharding

        spec["sharding"], spec["sharding_reason"] = launch_sharding(config, reports)
    files = dict(package)
    files["job.json"] = json.dumps(spec, indent=2).encode()
    files[f"{node.name}.sh"] = start_script(mine, rundir_abs).encode()
    record: dict[str, Any] = {
        "workdir": workdir_abs,
        "rundir": rundir_abs,
        "nproc": mine.nproc,
        "command": mine.argv,
        "command_line": mine.command_line,
        "env": masked_env(mine.env),
        "cuda_visible_devices": mine.cuda_visible_devices,
        "node_log": f"{rundir_abs}/{node.name}.log",
    }
    built = NodeFiles(files=files, plan=mine, record=record)
    add_user_code(built, config, run_id=run_id, config_dir=config_dir)
    return built


def add_user_code(built: NodeFiles, config: FtwizConfig, *, run_id: str, config_dir: Optional[str]) -> None:
    """``workload = "command"``: ship ``[job].code_dir`` as ``code/`` and record what shipped (``run.json`` → ``code``).

    ``code_dir`` resolves against ``config_dir`` (the directory of ftwiz.toml; the current directory when
    None). Raises :class:`tui.codeship.CodeDirError` (over the cap, missing): nothing starts then.
    """
    job = config.job
    if job.workload != "command":
        return
    if job.code_dir == "":
        built.run_record["code"] = {"root": None, "shipped_to": None, "note": 'code_dir = "": the code already on each node ran (not shipped, not hashed)'}
        return
    bundle = bundle_for_run(run_id, resolve_code_dir(job.code_dir, config_dir))
    built.code_tar = bundle.tar_path
    built.run_record["code"] = bundle.record()
