"""The ``ftwiz.toml`` schema: cluster, nodes, job and NCCL settings.

Pure: this module parses and validates *text*; reading and atomic saving live in
``tui/config_io.py``. Errors name the file, the line and the field path, and list the allowed
values, so a user can fix the file without reading this code.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal, Optional, Union, get_args, get_origin

import tomlkit
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from tomlkit.exceptions import ParseError, TOMLKitError

from shared.config_errors import (
    NO_NODES,
    cross_loc,
    explain,
    got,
    is_gpus_union,
    is_union_tag,
    locate_line,
    path,
    syntax_detail,
)
from shared.job_command import REQUIREMENT_RE, RESERVED_ENV, check_command, check_progress_regex
from shared.nodewire import valid_node_name

DEFAULT_AGENT_PORT = 8462
DEFAULT_RENDEZVOUS_PORT = 29500
DEFAULT_TOKEN_FILE = "~/.config/ftwiz/agent.token"

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""Environment variable names (matched whole)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ClusterConfig(_Section):
    """``[cluster]``: what every node shares."""

    name: str = Field("local", description="A label for the cluster, shown in the UI and run records.")
    rendezvous_port: int = Field(DEFAULT_RENDEZVOUS_PORT, ge=1, le=65535, description="torchrun c10d rendezvous port on the master.")
    agent_port: int = Field(DEFAULT_AGENT_PORT, ge=1, le=65535, description="Default ftwiz-agent port for every node.")
    agent_token_file: str = Field(DEFAULT_TOKEN_FILE, description="File holding the agents' bearer token (mode 0600).")
    master: Optional[str] = Field(None, description="Name of the master node (MASTER_ADDR); default the first node.")
    ssh_keepalive_s: float = Field(3.0, gt=0, le=60, description="SSH keepalive interval: a cut link is noticed in a few of these.")
    ssh_connect_timeout_s: float = Field(10.0, gt=0, le=120, description="SSH connect timeout per node.")
    agent_timeout_s: float = Field(3.0, gt=0, le=60, description="Per-node timeout of an agent request.")
    agent_tls: bool = Field(False, description="Talk HTTPS to every agent (each started with --tls-cert/--tls-key); the token then "
                                               "never crosses the network in clear.")
    agent_ca_file: str = Field("", description="With agent_tls: PEM bundle every agent's certificate must verify against "
                                               "(self-signed node certificates concatenated work); empty: the system's CAs.")
    known_hosts: Optional[str] = Field(None, description="known_hosts file for SSH host keys; default ~/.ssh/known_hosts (and the system file).")
    ssh_config: Optional[str] = Field(None, description="OpenSSH client config to honour; default ~/.ssh/config.")
    backend: Literal["ssh", "slurm"] = Field("ssh", description='How nodes are reached: "ssh" (the [[nodes]] listed) or "slurm" (allocated per [slurm]).')


class NodeConfig(_Section):
    """``[[nodes]]``: one machine."""

    name: str = Field(description="Unique node name (letters, digits, '.', '_', '-').")
    host: str = Field(description="Address used for SSH, the agent and MASTER_ADDR.")
    ssh_user: Optional[str] = Field(None, description="SSH user; default from ~/.ssh/config, then $USER.")
    ssh_port: Optional[int] = Field(None, ge=1, le=65535, description="SSH port; default from ~/.ssh/config, then 22.")
    ssh_key: Optional[str] = Field(None, description="Private key file; default ssh-agent and ~/.ssh/config.")
    gpus: Union[Literal["all"], int, list[int]] = Field("all", description='"all", a count, or a list of GPU indices.')
    cpu_ranks: Optional[int] = Field(None, ge=1, le=512, description="Run this many ranks on CPU with gloo on this node instead of its GPUs (any node, GPU or not; the GPUs are hidden).")
    python: str = Field("python3", description="The training interpreter on that node.")
    workdir: str = Field("~/ftwiz", description="Where run files and node-side logs are kept.")
    agent_port: Optional[int] = Field(None, ge=1, le=65535, description="This node's agent port, if not the cluster default.")
    local: bool = Field(False, description="Run on this machine without SSH (the embedded one-node default).")

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if not valid_node_name(value):
            raise ValueError("use letters, digits, '.', '_' or '-' (at most 63), starting with a letter or digit")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus_ok(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ValueError("a GPU count must be 0 or more")
        if isinstance(value, list) and (len(set(value)) != len(value) or any(i < 0 for i in value)):
            raise ValueError("GPU indices must be distinct and not negative")
        return value

    @model_validator(mode="after")
    def _one_kind_of_rank(self) -> "NodeConfig":
        if self.cpu_ranks is not None and "gpus" in self.model_fields_set and self.gpus not in ("all", 0, []):
            raise ValueError(f"cpu_ranks: node {self.name} sets both gpus = {self.gpus!r} and cpu_ranks = {self.cpu_ranks}; "
                             "keep one (cpu_ranks runs CPU ranks with gloo, gpus runs one rank per GPU)")
        return self


_ALLREDUCE_SIZES_MB: list[float] = [1, 4, 16, 64, 256]
"""allreduce message sizes by default, in MB (kept as written: the saved file shows ``[1, 4, ...]``)."""


class JobConfig(_Section):
    """``[job]``: the workload and its hyper-parameters."""

    workload: Literal["sft", "allreduce", "command"] = Field("sft", description="sft (fine-tune), allreduce (network check) or command (your own training code, see `command`).")
    model: str = Field("meta-llama/Llama-2-7b-hf", description="HF model id or local directory.")
    dataset: str = Field("data/train.jsonl", description="JSONL file: text, chat messages or instruction records.")
    method: Literal["full", "lora", "qlora"] = Field("qlora", description="full, lora or qlora (4-bit NF4, CUDA only).")
    seq_len: int = Field(2048, ge=8, le=1_048_576, description="Tokens per sequence.")
    micro_batch_size: int = Field(1, ge=1, le=4096, description="Sequences per GPU per step.")
    grad_accum_steps: int = Field(8, ge=1, le=65536, description="Micro batches per optimizer step.")
    epochs: float = Field(3, gt=0, description="Passes over the dataset (ignored when max_steps > 0).")
    max_steps: int = Field(-1, ge=-1, description="Stop after this many optimizer steps; -1 uses epochs.")
    learning_rate: float = Field(2e-4, gt=0, lt=1, description="Peak learning rate.")
    lora_r: int = Field(16, ge=1, le=4096, description="LoRA rank.")
    lora_alpha: float = Field(32, gt=0, description="LoRA alpha.")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"], description="Modules that get LoRA adapters.")
    gradient_checkpointing: bool = Field(True, description="Recompute activations in backward.")
    precision: Literal["bf16", "fp16", "fp32"] = Field("bf16", description="Compute precision.")
    optimizer: Literal["adamw", "adamw_8bit", "paged_adamw_8bit"] = Field("paged_adamw_8bit", description="Optimizer.")
    sharding: Literal["auto", "ddp", "fsdp"] = Field(
        "auto", description="ddp replicates the model on every GPU; fsdp shards weights, gradients and optimizer states (FSDP2, "
                            "one transformer block per unit); auto picks fsdp exactly when the estimator says ddp does not fit and fsdp does.")
    fsdp_offload: bool = Field(False, description="With sharding = fsdp: keep the shards and optimizer states in CPU RAM (slower; for small cards).")
    balance: Literal["off", "auto"] = Field(
        "off", description="sft and command: auto gives each rank a share of every optimizer step's samples in proportion to its "
                           "speed; the global batch (micro_batch_size × grad_accum_steps × ranks) and the update stay what off gives. "
                           "sft measures the speeds on its first steps (micro-batch within its GPU's fit, accumulation makes up the "
                           "rest; re-measured when a rank drifts by > 20 %). command: the checklist's compute probe decides before "
                           "launch and each rank reads its numbers from FTWIZ_BALANCE, FTWIZ_GLOBAL_BATCH, FTWIZ_SAMPLES_PER_STEP, "
                           "FTWIZ_MICRO_BATCH and FTWIZ_GRAD_ACCUM (set with off too, uniform, once micro_batch_size or "
                           "grad_accum_steps is declared; see README \"Balancing your own code\").")
    output_dir: str = Field("checkpoints/run", description="Checkpoints and the final adapter/model, relative to the node's workdir.")
    save_steps: int = Field(100, ge=1, description="Checkpoint every this many steps.")
    logging_steps: int = Field(1, ge=1, description="Progress line every this many steps.")
    stall_timeout_s: float = Field(600, gt=0, description="Stop every rank when no progress line arrives for this long.")
    first_step_grace_s: float = Field(1800, gt=0, description="Longer stall allowance before the first step (model download, load).")
    sizes_mb: list[float] = Field(default_factory=lambda: list(_ALLREDUCE_SIZES_MB), description="allreduce: message sizes in MB.")
    iterations: int = Field(20, ge=1, le=100_000, description="allreduce: timed iterations per size.")
    warmup_iterations: int = Field(5, ge=0, le=10_000, description="allreduce: untimed warm-up iterations per size.")
    pause_s: float = Field(0.0, ge=0, le=3600, description="allreduce: seconds every rank waits after each size (0: none). With many sizes, a long and "
                           "light soak of the links: sizes_mb = [1.0] * 3600 with pause_s = 1 all-reduces 1 MB about once a second for an hour.")

    command: list[str] = Field(default_factory=list, description='workload = "command": your script and its arguments (["train.py", "--lr", "1e-4"]) or ["-m", "module", ...].')
    code_dir: str = Field(".", description='workload = "command": directory shipped to every node (relative to ftwiz.toml); "" = already on every node.')
    requires: list[str] = Field(default_factory=list, description='workload = "command": pip requirements your code needs ("trl>=0.20"), checked on every node.')
    env: dict[str, str] = Field(default_factory=dict, description='workload = "command": extra environment for every rank, e.g. { WANDB_MODE = "offline" }. '
                                                        "Values of keys holding TOKEN, SECRET, KEY or PASSWORD are masked in run.json and the logs.")
    progress_regex: Optional[str] = Field(None, description="A regular expression with named groups step, loss, total (also lr, epoch) that finds progress in your code's own lines.")
    progress_total: Optional[int] = Field(None, ge=1, description="The steps your code will run, when its own lines do not say: gives the progress a total and an ETA (a total the code prints wins).")

    @field_validator("command")
    @classmethod
    def _command_ok(cls, value: list[str]) -> list[str]:
        return check_command(value)

    @field_validator("requires")
    @classmethod
    def _requires_ok(cls, value: list[str]) -> list[str]:
        for item in value:
            if not REQUIREMENT_RE.fullmatch(item.strip()):
                raise ValueError(f"{item!r} is not a pip requirement: write a package name with an optional version, e.g. \"trl>=0.20\" or \"transformers\"")
        return [item.strip() for item in value]

    @field_validator("env")
    @classmethod
    def _job_env_ok(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_KEY.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by torchrun/ftwiz for every rank; remove it from [job].env")
        return value

    @field_validator("progress_regex")
    @classmethod
    def _regex_ok(cls, value: Optional[str]) -> Optional[str]:
        return check_progress_regex(value)

    @model_validator(mode="after")
    def _command_needed(self) -> "JobConfig":
        if self.workload == "command" and not self.command:
            raise ValueError('command: workload = "command" needs command = ["train.py", ...] (your script and its arguments) or ["-m", "package.module", ...]')
        if self.workload == "command" and self.balance == "auto" and not {"micro_batch_size", "grad_accum_steps"} & self.model_fields_set:
            raise ValueError('balance: balance = "auto" for your own code splits the global batch micro_batch_size × grad_accum_steps × '
                             "ranks between the ranks: declare micro_batch_size and grad_accum_steps in [job] (your code reads its "
                             'share from FTWIZ_MICRO_BATCH and FTWIZ_GRAD_ACCUM), or set balance = "off"')
        if self.workload == "allreduce" and self.pause_s >= self.stall_timeout_s:
            raise ValueError(f"pause_s: each size's heartbeat comes pause_s = {self.pause_s:g} s after the last, and a run silent for "
                             f"stall_timeout_s = {self.stall_timeout_s:g} s is stopped as a stall: make pause_s shorter or stall_timeout_s longer")
        return self

    @field_validator("sizes_mb")
    @classmethod
    def _sizes_ok(cls, value: list[float]) -> list[float]:
        if not value or any(s <= 0 for s in value):
            raise ValueError("give at least one positive size in MB")
        return value


#: The ``[job]`` keys each workload reads; keys in none of these (workload, output_dir, the stall timeouts) are
#: every workload's. A command workload may declare what it trains (model, method, seq_len, micro_batch_size) and its
#: batch (micro_batch_size, grad_accum_steps: each rank's FTWIZ_* batch numbers, balance = "auto" splits by them).
WORKLOAD_KEYS: dict[str, frozenset[str]] = {
    "sft": frozenset({"model", "dataset", "method", "seq_len", "micro_batch_size", "grad_accum_steps", "epochs", "max_steps",
                      "learning_rate", "lora_r", "lora_alpha", "lora_dropout", "target_modules", "gradient_checkpointing",
                      "precision", "optimizer", "sharding", "fsdp_offload", "save_steps", "logging_steps"}),
    "allreduce": frozenset({"sizes_mb", "iterations", "warmup_iterations", "pause_s"}),
    "command": frozenset({"command", "code_dir", "requires", "env", "progress_regex", "progress_total",
                          "model", "method", "seq_len", "micro_batch_size", "grad_accum_steps"}),
}


def foreign_job_keys(workload: str) -> frozenset[str]:
    """The ``[job]`` keys only other workloads read (not written when saving a ``workload`` job)."""
    others = frozenset().union(*(keys for name, keys in WORKLOAD_KEYS.items() if name != workload))
    return others - WORKLOAD_KEYS.get(workload, frozenset())


class NcclConfig(_Section):
    """``[nccl]``: interface and transport selection."""

    socket_ifname: str = Field("auto", description='"auto" picks the interface in the master\'s subnet; else a name (NCCL prefix-matches; "=eth0" is exact).')
    ib: Literal["auto", "on", "off"] = Field("auto", description="InfiniBand: auto uses it when every node has an Active port.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for every rank, e.g. NCCL_DEBUG "
                                                        "(secret-looking values masked in run.json and the logs, as [job].env).")

    @field_validator("env")
    @classmethod
    def _env_ok(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_KEY.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
        return value


_SLURM_TIME = re.compile(r"^(UNLIMITED|INFINITE|\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2})$")


class SlurmConfig(_Section):
    """``[slurm]``: what to allocate when ``[cluster] backend = "slurm"`` (the nodes come from the allocation)."""

    partition: str = Field("", description="Partition to submit to (sbatch --partition); empty: the cluster's default.")
    nodes: int = Field(1, ge=1, le=4096, description="Nodes to allocate (sbatch --nodes).")
    gpus_per_node: int = Field(0, ge=0, le=64, description="GPUs per node (sbatch --gpus-per-node, gres); 0 on CPU partitions.")
    time: str = Field("01:00:00", description="Time limit (sbatch --time): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS.")
    account: str = Field("", description="Account to charge (sbatch --account); empty: your default.")
    sbatch_args: list[str] = Field(default_factory=list, description="Anything else, passed through to sbatch as separate arguments.")
    python: str = Field("python3", description="The training interpreter on the compute nodes.")
    agent_python: str | None = Field(None, description="Interpreter with ftwiz installed that runs the agent step on every node; default: python.")
    workdir: str = Field("~/ftwiz", description="Run files and logs; must be on a filesystem every node and this machine share.")
    keep_allocation: bool = Field(False, description="After a run ends or is stopped, keep the job (allocation) instead of cancelling it.")

    @field_validator("time")
    @classmethod
    def _time_ok(cls, value: str) -> str:
        if not _SLURM_TIME.fullmatch(value.strip()):
            raise ValueError('use a Slurm time: minutes, "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM" or "D-HH:MM:SS"')
        return value.strip()

    @field_validator("partition", "account")
    @classmethod
    def _word_ok(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z0-9_.,-]+", value):
            raise ValueError("use letters, digits, '_', '.', ',' or '-'")
        return value


class FtwizConfig(BaseModel):
    """The whole ``ftwiz.toml``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    nodes: list[NodeConfig] = Field(default_factory=list, description="At least one node (none with the slurm backend).")
    job: JobConfig = Field(default_factory=JobConfig)
    nccl: NcclConfig = Field(default_factory=NcclConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)

    @model_validator(mode="after")
    def _cross_checks(self) -> "FtwizConfig":
        if not self.nodes and self.cluster.backend == "ssh":
            raise ValueError(NO_NODES)
        if self.cluster.agent_tls and self.cluster.backend == "slurm":
            raise ValueError('cluster.agent_tls is for backend = "ssh": on Slurm the agents run as a job step of your allocation '
                             "with a per-job token; remove agent_tls")
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node names must be unique; repeated: {', '.join(dupes)}")
        if self.cluster.master is not None and self.cluster.master not in names:
            raise ValueError(f"cluster.master = {self.cluster.master!r} is not a node; nodes are: {', '.join(names)}")
        return self

    @property
    def master(self) -> NodeConfig:
        """The master node: ``cluster.master`` or the first node."""
        wanted = self.cluster.master or self.nodes[0].name
        return next(n for n in self.nodes if n.name == wanted)

    def node(self, name: str) -> NodeConfig:
        """The node called ``name`` (KeyError if none)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def agent_port(self, node: NodeConfig) -> int:
        """The agent port of ``node``."""
        return node.agent_port or self.cluster.agent_port




class ConfigError(Exception):
    """A config problem a user can fix: file, line (when known), field path and message."""

    def __init__(self, source: str, message: str, *, line: Optional[int] = None, field: Optional[str] = None):
        self.source, self.message, self.line, self.field = source, message, line, field
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


def default_config(*, hostname: str, python: str, token_file: str = DEFAULT_TOKEN_FILE) -> FtwizConfig:
    """The embedded default: this machine as a one-node cluster running an all-reduce check."""
    node = NodeConfig(name=_safe_name(hostname), host="127.0.0.1", python=python, workdir="~/.cache/ftwiz/work", local=True)
    return FtwizConfig(
        cluster=ClusterConfig(name="local", agent_token_file=token_file),
        nodes=[node],
        job=JobConfig(workload="allreduce", sizes_mb=[1, 4, 16], iterations=10),
    )


def _safe_name(hostname: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", hostname).strip("-._")[:63]
    return cleaned or "localhost"


def parse_config(text: str, source: str = "ftwiz.toml") -> FtwizConfig:
    """Parse and validate ``text``; raise :class:`ConfigError` naming ``source``, line and field."""
    try:
        data = tomlkit.parse(text).unwrap()
    except ParseError as exc:
        raise ConfigError(source, f"TOML syntax error: {exc.args[0] if exc.args else exc}", line=exc.line) from None
    except TOMLKitError as exc:
        # e.g. a key written twice: tomlkit gives no line, the stdlib parser does.
        message, line = syntax_detail(text, exc)
        raise ConfigError(source, f"TOML syntax error: {message}", line=line) from None
    if not isinstance(data.get("nodes", []), list):
        raise ConfigError(source, "must be a list of [[nodes]] tables (write each node as a [[nodes]] section)",
                          line=locate_line(text, ["nodes"]), field="nodes")
    try:
        return FtwizConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        loc = list(first["loc"])
        if is_gpus_union(loc):
            loc = [p for p in loc if not is_union_tag(p)]
            message = 'must be "all", a GPU count (0 or more) or a list of GPU indices' + got(first)
            gpus_custom = [e for e in errors if e["type"] == "value_error" and is_gpus_union(list(e["loc"]))]
            if gpus_custom:  # our own validator's sentence is more precise than the union summary
                message = explain(gpus_custom[0])
        elif not loc:
            loc, message = cross_loc(data, first), explain(first)
        elif first["type"] == "extra_forbidden":
            message = unknown_key(loc)
        else:
            message = explain(first)
            inner = re.match(r"^([a-z_]+): (.*)$", message, re.S)
            if inner and loc and loc[-1] == "job" and inner.group(1) in JobConfig.model_fields:
                loc, message = [*loc, inner.group(1)], inner.group(2)
            elif inner and len(loc) == 2 and loc[0] == "nodes" and inner.group(1) in NodeConfig.model_fields:
                loc, message = [*loc, inner.group(1)], inner.group(2)
        field = path(loc)
        raise ConfigError(source, message, line=locate_line(text, loc), field=field or None) from None


def to_toml(config: FtwizConfig, original: Optional[str] = None) -> str:
    """Render ``config`` as TOML, keeping the comments, layout and explicit keys of ``original``.

    Keys the user wrote stay (updated when changed); keys that still hold their default are not added; ``[job]``
    keys that only another workload reads are dropped (:func:`foreign_job_keys`).
    """
    full = config.model_dump(mode="json", exclude_none=True)
    changed = config.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    for key in foreign_job_keys(config.job.workload):  # only the chosen workload's keys are written
        full["job"].pop(key, None)
        changed.get("job", {}).pop(key, None)
    doc = tomlkit.parse(original) if original else tomlkit.document()
    _merge(doc, full, changed)
    return tomlkit.dumps(doc)


def _merge(container: Any, full: dict[str, Any], changed: dict[str, Any]) -> None:
    for key in list(container.keys()):
        if key not in full:
            del container[key]
    for key, value in full.items():
        present = key in container
        if not present and key not in changed:
            continue
        if isinstance(value, dict):
            if not present or not hasattr(container[key], "keys"):
                container[key] = tomlkit.table()
            _merge(container[key], value, changed.get(key) or {})
        elif _is_table_list(value):
            _merge_tables(container, key, value, changed.get(key) or [{} for _ in value])
        elif not present or _plain(container[key]) != value:
            container[key] = value


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _merge_tables(container: Any, key: str, items: list[dict[str, Any]], changed: list[dict[str, Any]]) -> None:
    existing = container.get(key) if key in container else None
    if existing is None or not all(hasattr(e, "keys") for e in existing):
        container[key] = tomlkit.aot()
        existing = container[key]
    while len(existing) > len(items):
        existing.pop()
    for i, item in enumerate(items):
        if i >= len(existing):
            existing.append(tomlkit.table())
        _merge(existing[i], item, changed[i] if i < len(changed) else item)


def _plain(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


#: Where every key is listed (generated from these models, see shared/config_reference.py).
REFERENCE_DOC = "docs/config-reference.md"


def unknown_key(loc: list[Any]) -> str:
    """The message for a key the schema does not know: the closest valid key at that place, if one is close."""
    key = str(loc[-1]) if loc else ""
    model = _model_at(loc[:-1])
    valid = list(model.model_fields) if model is not None else []
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r}: did you mean {close[0]!r}? (every key: {REFERENCE_DOC})"
    return f"unknown key {key!r} (every key, with its type and default: {REFERENCE_DOC})"


def _model_at(loc: list[Any]) -> Optional[type[BaseModel]]:
    """The model holding the keys at ``loc`` (``["nodes", 0]`` → :class:`NodeConfig`), or None."""
    model: type[BaseModel] = FtwizConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        annotation = field.annotation
        inner = get_args(annotation)[0] if get_origin(annotation) is list else annotation
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return None
        model = inner
    return model
