"""The doctor's corpus of real logs from public threads: load, validate, dedupe by thread, split.

Every ``tests/doctor/corpus/*.jsonl`` is read (file names in sorted order), then every ``*.jsonl`` of the
directories listed in ``$FTWIZ_CORPUS_DIRS`` (``:``-separated, in that order). A row that breaks the
format (``tests/doctor/corpus/SPLIT.md``) is a :class:`CorpusError`
naming ``file:line`` and the field. A thread met again in a later file is dropped there: the first file
that has a thread keeps all of its excerpts. The split is frozen: :func:`held_out` decides from the
thread's name alone, so a case never moves between the tuning and the held-out set.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from shared.doctor_signatures import CAUSES

__all__ = ["CORPUS_DIR", "PROJECTS", "Case", "CorpusError", "held_out", "load_corpus"]

CORPUS_DIR = Path(__file__).parent / "corpus"
PROJECTS = frozenset({
    "pytorch", "torchrun", "nccl", "gloo", "rocm", "deepspeed", "megatron", "nemo", "slurm", "transformers", "accelerate",
    "trl", "peft", "bitsandbytes", "llama-factory", "axolotl", "unsloth", "lightning", "vllm", "other",
})
_FIELDS = ("id", "thread", "url", "project", "kind", "cause", "confirmed", "visible", "file", "excerpt", "note")
_FILE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class CorpusError(ValueError):
    """A corpus row that breaks the format: ``file:line: field: what is wrong``."""


@dataclass(frozen=True)
class Case:
    """One excerpt of the corpus and where it was read from."""

    id: str
    thread: str
    url: str
    project: str
    kind: str
    cause: str
    confirmed: bool
    visible: bool
    file: str
    excerpt: str
    note: str
    source: str
    """``corpus_a.jsonl:12``: the file and line the row was read from."""

    @property
    def held_out(self) -> bool:
        return held_out(self.thread)

    @property
    def fair(self) -> bool:
        """A failure whose cause can be read from the excerpt (what first-cause accuracy is measured over)."""
        return self.kind == "failure" and self.visible


def held_out(thread: str) -> bool:
    """The frozen split rule: a thread is held out iff sha256(thread) mod 100 < 40."""
    return int(hashlib.sha256(thread.encode("utf-8")).hexdigest(), 16) % 100 < 40


def corpus_files(extra_dirs: str | None = None) -> list[Path]:
    """The corpus files in reading order: ours (sorted), then each ``$FTWIZ_CORPUS_DIRS`` directory's."""
    dirs = [CORPUS_DIR]
    extra = os.environ.get("FTWIZ_CORPUS_DIRS", "") if extra_dirs is None else extra_dirs
    dirs += [Path(d) for d in extra.split(":") if d.strip()]
    out: list[Path] = []
    for folder in dirs:
        if not folder.is_dir():
            raise CorpusError(f"{folder}: not a directory (listed in FTWIZ_CORPUS_DIRS)")
        out += [p for p in sorted(folder.glob("*.jsonl")) if p.resolve() not in {q.resolve() for q in out}]
    return out


def parse_row(obj: object, where: str) -> Case:
    """One validated :class:`Case` from a decoded JSON line (CorpusError naming ``where`` and the field)."""
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: the line is a JSON {type(obj).__name__}, not an object")
    for name in _FIELDS:
        if name not in obj:
            raise CorpusError(f"{where}: field {name!r} is missing")
    for name in ("id", "thread", "url", "project", "kind", "cause", "file", "excerpt", "note"):
        if not isinstance(obj[name], str):
            raise CorpusError(f"{where}: field {name!r} must be a string, not {type(obj[name]).__name__}")
    for name in ("confirmed", "visible"):
        if not isinstance(obj[name], bool):
            raise CorpusError(f"{where}: field {name!r} must be true or false, not {obj[name]!r}")
    for name in ("id", "thread", "excerpt"):
        if not obj[name].strip():
            raise CorpusError(f"{where}: field {name!r} is empty")
    if not obj["url"].startswith(("https://", "http://")):
        raise CorpusError(f"{where}: field 'url' must be the thread's http(s) address, not {obj['url'][:60]!r}")
    if obj["project"] not in PROJECTS:
        raise CorpusError(f"{where}: field 'project' is {obj['project']!r}; one of: {', '.join(sorted(PROJECTS))}")
    if obj["kind"] not in ("failure", "healthy"):
        raise CorpusError(f"{where}: field 'kind' is {obj['kind']!r}; 'failure' or 'healthy'")
    if obj["kind"] == "healthy" and obj["cause"] != "healthy":
        raise CorpusError(f"{where}: field 'cause' must be 'healthy' for kind 'healthy', not {obj['cause']!r}")
    if obj["kind"] == "failure" and obj["cause"] not in CAUSES:
        raise CorpusError(f"{where}: field 'cause' is {obj['cause']!r}, not a cause id (README's table: {', '.join(CAUSES)})")
    if not _FILE_NAME.match(obj["file"]):
        raise CorpusError(f"{where}: field 'file' must be a plain file name like node0.log, not {obj['file']!r}")
    return Case(**{name: obj[name] for name in _FIELDS}, source=where)


def read_file(path: Path) -> Iterable[Case | CorpusError]:
    """Every row of one ``.jsonl`` file, validated: a :class:`Case`, or the :class:`CorpusError` of a bad row."""
    with path.open(encoding="utf-8") as fh:
        for number, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:
                yield parse_row(json.loads(raw), where)
            except ValueError as exc:
                yield exc if isinstance(exc, CorpusError) else CorpusError(f"{where}: not valid JSON ({exc})")


def load_corpus(extra_dirs: str | None = None, *, skip_invalid: list[str] | None = None) -> list[Case]:
    """The whole corpus, deduplicated by thread (the first file that has a thread wins) and by id.

    ``skip_invalid``: when a list, an invalid row is appended there as its error and skipped (the
    collectors' files are read while they are still being written); otherwise it raises :class:`CorpusError`.
    """
    cases: list[Case] = []
    owner: dict[str, Path] = {}
    ids: dict[str, str] = {}
    for path in corpus_files(extra_dirs):
        for case in read_file(path):
            if isinstance(case, CorpusError):
                if skip_invalid is None:
                    raise case
                skip_invalid.append(str(case))
                continue
            if owner.setdefault(case.thread, path) != path:
                continue
            if case.id in ids:
                error = f"{case.source}: field 'id' {case.id!r} is already used at {ids[case.id]}"
                if skip_invalid is None:
                    raise CorpusError(error)
                skip_invalid.append(error)
                continue
            ids[case.id] = case.source
            cases.append(case)
    return cases
