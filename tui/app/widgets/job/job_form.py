"""The ``[job]`` form: one compact field per setting, validated by :class:`shared.config.JobConfig`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Literal, Optional, get_args

from pydantic import ValidationError
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Checkbox, Input, Label, Select, Static

from shared.config import JobConfig

__all__ = ["JOB_FIELDS", "WORKLOAD_FIELDS", "JobForm"]

Kind = Literal["text", "int", "float", "choice", "bool", "list", "words", "env"]

JOB_FIELDS: list[tuple[str, str, Kind]] = [
    ("workload", "Workload", "choice"),
    ("model", "Model", "text"),
    ("dataset", "Dataset", "text"),
    ("method", "Method", "choice"),
    ("seq_len", "Seq len", "int"),
    ("micro_batch_size", "Micro batch", "int"),
    ("grad_accum_steps", "Grad accum", "int"),
    ("epochs", "Epochs", "float"),
    ("max_steps", "Max steps", "int"),
    ("learning_rate", "Learn rate", "float"),
    ("lora_r", "LoRA r", "int"),
    ("lora_alpha", "LoRA alpha", "float"),
    ("lora_dropout", "LoRA drop", "float"),
    ("target_modules", "LoRA target", "list"),
    ("gradient_checkpointing", "Grad ckpt", "bool"),
    ("precision", "Precision", "choice"),
    ("optimizer", "Optimizer", "choice"),
    ("sharding", "Sharding", "choice"),
    ("output_dir", "Output dir", "text"),
    ("save_steps", "Save steps", "int"),
    ("sizes_mb", "Sizes MB", "list"),
    ("iterations", "Iterations", "int"),
    ("command", "Command", "words"),
    ("code_dir", "Code dir", "text"),
    ("requires", "Requires", "list"),
    ("env", "Env", "env"),
    ("progress_regex", "Progress re", "text"),
    ("progress_total", "Total steps", "int"),
]
"""``(field, label, kind)`` in form order; choices come from the schema's Literal types."""

#: The "your own code" fields: shown only for ``workload = "command"``.
COMMAND_FIELDS = frozenset({"command", "code_dir", "requires", "env", "progress_regex", "progress_total"})
#: The rows each workload shows besides ``workload``: its own settings and nothing of the others'.
WORKLOAD_FIELDS: dict[str, frozenset[str]] = {
    "sft": frozenset({"model", "dataset", "method", "seq_len", "micro_batch_size", "grad_accum_steps", "epochs", "max_steps",
                      "learning_rate", "lora_r", "lora_alpha", "lora_dropout", "target_modules", "gradient_checkpointing",
                      "precision", "optimizer", "sharding", "output_dir", "save_steps"}),
    "allreduce": frozenset({"sizes_mb", "iterations"}),
    "command": COMMAND_FIELDS,
}
#: How a workload reads in the choice list.
WORKLOAD_LABELS = {"command": "your own code"}


def _choices(field: str) -> list[str]:
    annotation = JobConfig.model_fields[field].annotation
    return [str(c) for c in get_args(annotation)]


def _text(value: Any, kind: str = "text") -> str:
    if value is None:
        return ""
    if kind == "words":
        return shlex.join(value)
    if kind == "env":
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    return str(value)


def _env(text: str) -> Any:
    """``"WANDB_MODE=offline, HF_HOME=/data/hf"`` → a dict; a part without ``=`` is left for the schema to refuse."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            return text
        out[key.strip()] = value.strip()
    return out


class JobForm(VerticalScroll):
    """Edits a :class:`JobConfig`; posts :class:`JobForm.Changed` with every valid state.

    Invalid input is shown under its field and not applied; ``errors`` holds the messages.
    """

    @dataclass
    class Changed(Message):
        """The form holds a new valid job."""

        job: JobConfig
        """The validated job settings."""

    @dataclass
    class Invalid(Message):
        """The form holds input the schema rejects (nothing was applied)."""

        errors: dict[str, str]
        """Field → message."""

    def __init__(self, job: JobConfig, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._job = job
        self.errors: dict[str, str] = {}
        """The current validation errors, by field."""
        self._loading = False

    def compose(self) -> ComposeResult:
        for field, label, kind in JOB_FIELDS:
            value = getattr(self._job, field)
            with Horizontal(classes="job-field", id=f"row-{field}"):
                yield Label(label, classes="job-label")
                if kind == "choice":
                    options = [(WORKLOAD_LABELS.get(c, c) if field == "workload" else c, c) for c in _choices(field)]
                    yield Select(options, value=str(value), allow_blank=False, compact=True, id=f"job-{field}")
                elif kind == "bool":
                    yield Checkbox("on", value=bool(value), compact=True, id=f"job-{field}")
                else:
                    yield Input(_text(value, kind), compact=True, id=f"job-{field}", tooltip=JobConfig.model_fields[field].description)
            yield Static("", classes="job-error", id=f"job-error-{field}")

    def on_mount(self) -> None:
        self._show_fields(self._job.workload)

    def _show_fields(self, workload: str) -> None:
        """Only the chosen workload's rows (your own code shows no recipe settings); your code's get a wider form."""
        shown = WORKLOAD_FIELDS.get(workload, frozenset())
        for field, _, _ in JOB_FIELDS:
            if field != "workload":
                self.query_one(f"#row-{field}").display = field in shown
        self.set_class(workload == "command", "-command")

    def load(self, job: JobConfig) -> None:
        """Show ``job`` (e.g. after the config was reloaded) without posting Changed."""
        self._job = job
        self._loading = True
        try:
            for field, _, kind in JOB_FIELDS:
                widget = self.query_one(f"#job-{field}")
                value = getattr(job, field)
                if kind == "choice":
                    widget.value = str(value)  # type: ignore[attr-defined]
                elif kind == "bool":
                    widget.value = bool(value)  # type: ignore[attr-defined]
                else:
                    widget.value = _text(value, kind)  # type: ignore[attr-defined]
        finally:
            self._loading = False
        self._show_fields(job.workload)

    def values(self) -> dict[str, Any]:
        """The form's raw values, shaped for :class:`JobConfig` (lists split, blanks omitted)."""
        data: dict[str, Any] = {}
        workload = self.query_one("#job-workload", Select).value
        shown = WORKLOAD_FIELDS.get(str(workload), frozenset()) | {"workload"}
        for field, _, kind in JOB_FIELDS:
            if field not in shown:
                continue  # another workload's setting: kept as it is, never read from a hidden row
            widget = self.query_one(f"#job-{field}")
            value = widget.value  # type: ignore[attr-defined]
            if kind == "list":
                data[field] = [part.strip() for part in str(value).split(",") if part.strip()]
            elif kind == "words":
                try:
                    data[field] = shlex.split(str(value))
                except ValueError:
                    data[field] = str(value)  # unbalanced quotes: the schema says what is wrong
            elif kind == "env":
                data[field] = _env(str(value))
            elif kind in ("text", "int", "float"):
                text = str(value).strip()
                if text == "" and kind != "text":
                    if JobConfig.model_fields[field].default is None:
                        data[field] = None  # a blank optional number (progress_total) is unset
                    continue  # a blank number falls back to its default
                data[field] = text
            elif kind == "choice":
                data[field] = value if value is not Select.NULL else None
            else:
                data[field] = bool(value)
        # Settings the form does not show (allreduce sizes, timeouts) are kept as they are.
        return {**self._job.model_dump(exclude_unset=True), **data}

    def validate_form(self) -> Optional[JobConfig]:
        """Validate the form against the schema; show errors under their fields."""
        try:
            job = JobConfig.model_validate(self.values())
        except ValidationError as exc:
            errors: dict[str, str] = {}
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else "job"
                message = error["msg"].removeprefix("Value error, ")
                inner = message.split(": ", 1)
                if field == "job" and len(inner) == 2 and inner[0] in JobConfig.model_fields:
                    field, message = inner  # a whole-job rule that names its field (command for workload = "command")
                if error["type"] == "literal_error":
                    message = f"must be one of {error.get('ctx', {}).get('expected', '')}"
                errors.setdefault(field, message)
            self._show_errors(errors)
            return None
        self._show_errors({})
        return job

    def _show_errors(self, errors: dict[str, str]) -> None:
        self.errors = errors
        for field, _, _ in JOB_FIELDS:
            message = errors.get(field)
            error = self.query_one(f"#job-error-{field}", Static)
            error.update(f"{field}: {message}" if message else "")
            error.set_class(bool(message), "-shown")
            self.query_one(f"#row-{field}").set_class(bool(message), "-invalid")

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _field_changed(self, event: Message) -> None:
        event.stop()
        if self._loading or not self.is_mounted:
            return
        job = self.validate_form()
        self._show_fields(str(self.query_one("#job-workload", Select).value))
        if job is None:
            self.post_message(self.Invalid(dict(self.errors)))
        elif job != self._job:
            self._job = job
            self.post_message(self.Changed(job))
