"""The job spec a launcher writes to ``<rundir>/job.json`` and every rank reads.

The spec is the ``[job]`` table as a plain dict (``JobConfig.model_dump(mode="json")``) plus:

- ``run_id``      the run's id (also in the env as ``FTWIZ_RUN_ID``);
- ``workdir``     the node's workdir: a relative ``output_dir`` resolves against it (default: the cwd);
- ``base_dir``    where relative ``dataset`` and ``model`` paths resolve (default: the cwd);
- ``resume``      ``"auto"`` (continue from the latest ``checkpoint-N`` in ``output_dir``), a checkpoint
                  path, or null;
- optional: ``save_on_each_node`` (default true: every node keeps its own checkpoints, for nodes without a
  shared filesystem; set false when ``output_dir`` is on a filesystem all nodes share),
  ``dist_timeout_s`` (collective timeout, default 1800), ``seed`` (default 42),
  ``save_total_limit`` (default: keep all checkpoints).

Defaults below mirror ``shared/config.py``'s JobConfig; this package cannot import it (a node's training
interpreter need not have ftwiz installed), so a spec missing a key still runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from shared.nodewire import RUN_ENV

from .errors import WorkloadError

JOB_DEFAULTS: dict[str, Any] = {
    "workload": "sft",
    "model": "meta-llama/Llama-2-7b-hf",
    "dataset": "data/train.jsonl",
    "method": "qlora",
    "seq_len": 2048,
    "micro_batch_size": 1,
    "grad_accum_steps": 8,
    "epochs": 3,
    "max_steps": -1,
    "learning_rate": 2e-4,
    "lora_r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "target_modules": ["q_proj", "v_proj"],
    "gradient_checkpointing": True,
    "precision": "bf16",
    "optimizer": "paged_adamw_8bit",
    "sharding": "auto",
    "fsdp_offload": False,
    "balance": "off",
    "output_dir": "checkpoints/run",
    "save_steps": 100,
    "logging_steps": 1,
    "sizes_mb": [1, 4, 16, 64, 256],
    "iterations": 20,
    "warmup_iterations": 5,
    "pause_s": 0.0,
}
CHOICES: dict[str, tuple[str, ...]] = {
    "workload": ("sft", "allreduce"),
    "method": ("full", "lora", "qlora"),
    "precision": ("bf16", "fp16", "fp32"),
    "optimizer": ("adamw", "adamw_8bit", "paged_adamw_8bit"),
    "sharding": ("auto", "ddp", "fsdp"),
    "balance": ("off", "auto"),
}


@dataclass
class Spec:
    """A loaded job spec: ``job`` holds the [job] fields, the rest are run-level settings."""

    path: Path
    job: dict[str, Any]
    run_id: str = ""
    workdir: Optional[Path] = None
    base_dir: Optional[Path] = None
    resume: Optional[str] = None
    save_on_each_node: bool = True
    dist_timeout_s: float = 1800.0
    seed: int = 42
    save_total_limit: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.job[key]

    def input_path(self, value: str) -> Path:
        """``value`` (dataset or model path) made absolute against ``base_dir`` (or the cwd)."""
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else (self.base_dir or Path.cwd()) / path

    def output_path(self, value: str) -> Path:
        """``value`` (output_dir) made absolute against the node's ``workdir`` (or the cwd)."""
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else (self.workdir or Path.cwd()) / path


def load_spec(path: str) -> Spec:
    """Read and check the spec at ``path``; raise :class:`WorkloadError` naming the file and key."""
    spec_path = Path(path)
    try:
        data = json.loads(spec_path.read_text())
    except FileNotFoundError:
        raise WorkloadError(f"job spec {spec_path} not found (the launcher writes it to <rundir>/job.json)") from None
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"job spec {spec_path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"job spec {spec_path}: expected a JSON object, got {type(data).__name__}")
    run_keys = {"run_id", "workdir", "base_dir", "resume", "save_on_each_node", "dist_timeout_s", "seed", "save_total_limit"}
    job = dict(JOB_DEFAULTS)
    job.update({k: v for k, v in data.items() if k not in run_keys})
    for key, allowed in CHOICES.items():
        if job[key] not in allowed:
            raise WorkloadError(f"job spec {spec_path}: {key} = {job[key]!r} is not one of {', '.join(allowed)}")
    _check_numbers(spec_path, job)
    resume = data.get("resume")
    if resume is not None and not isinstance(resume, str):
        raise WorkloadError(f"job spec {spec_path}: resume must be \"auto\", a checkpoint path or null")
    return Spec(
        path=spec_path,
        job=job,
        run_id=str(data.get("run_id") or os.environ.get(RUN_ENV, "")),
        workdir=_dir(data.get("workdir")),
        base_dir=_dir(data.get("base_dir")),
        resume=resume,
        save_on_each_node=bool(data.get("save_on_each_node", True)),
        dist_timeout_s=float(data.get("dist_timeout_s") or 1800.0),
        seed=int(data.get("seed", 42)),
        save_total_limit=data.get("save_total_limit"),
    )


def _dir(value: Any) -> Optional[Path]:
    return Path(os.path.expanduser(str(value))) if value else None


def _check_numbers(source: Path, job: dict[str, Any]) -> None:
    positive_ints = ("seq_len", "micro_batch_size", "grad_accum_steps", "save_steps", "logging_steps", "iterations", "lora_r")
    for key in positive_ints:
        if not isinstance(job[key], int) or isinstance(job[key], bool) or job[key] < 1:
            raise WorkloadError(f"job spec {source}: {key} must be a whole number >= 1 (got {job[key]!r})")
    if not isinstance(job["max_steps"], int) or job["max_steps"] < -1 or job["max_steps"] == 0:
        raise WorkloadError(f"job spec {source}: max_steps must be -1 (use epochs) or >= 1 (got {job['max_steps']!r})")
    if not isinstance(job["warmup_iterations"], int) or job["warmup_iterations"] < 0:
        raise WorkloadError(f"job spec {source}: warmup_iterations must be >= 0 (got {job['warmup_iterations']!r})")
    pause = job["pause_s"]
    if not isinstance(pause, (int, float)) or isinstance(pause, bool) or not 0 <= pause <= 3600:
        raise WorkloadError(f"job spec {source}: pause_s must be seconds from 0 to 3600 (got {pause!r})")
    sizes = job["sizes_mb"]
    if not isinstance(sizes, list) or not sizes or any(not isinstance(s, (int, float)) or s <= 0 for s in sizes):
        raise WorkloadError(f"job spec {source}: sizes_mb must be a list of positive sizes in MB (got {sizes!r})")
    if not isinstance(job["target_modules"], list) or not all(isinstance(m, str) for m in job["target_modules"]):
        raise WorkloadError(f"job spec {source}: target_modules must be a list of module names")
