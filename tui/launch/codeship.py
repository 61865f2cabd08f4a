"""Shipping the user's code: ``[job].code_dir`` → ``code/`` in every node's run directory.

:func:`collect_code` walks the directory, leaves out what ``.gitignore`` (and ``.ftwizignore``, same
syntax) at its top exclude plus a few things that never belong in a job (``.git/``, virtual
environments, caches, ``runs/``), refuses a tree over the size cap with an error naming the biggest
files and the fix, and returns the files with a manifest (path, size, sha256 of each) and one hash
over the whole tree, which ``run.json`` records under ``code`` so a run says exactly what code ran.

The ignore syntax is the common part of gitignore(5): ``#`` comments, ``!`` re-includes, a trailing
``/`` matches directories only, a pattern with a ``/`` (other than at its end) is anchored at the
top, one without matches the name at any depth, ``*``, ``?``, ``[...]`` and ``**`` as in git.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from shared.codepaths import CODE_SUBDIR

__all__ = ["CODE_SUBDIR", "DEFAULT_EXCLUDES", "DEFAULT_MAX_BYTES", "CodeBundle", "CodeDirError", "anchor_code_dir", "bundle_for_run",
           "collect_code", "resolve_code_dir"]

#: The size cap of a shipped tree: code and small configs, not data or checkpoints.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: Never shipped, whatever .gitignore says.
DEFAULT_EXCLUDES = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "venv/", ".mypy_cache/", ".pytest_cache/",
                    ".ruff_cache/", ".ipynb_checkpoints/", "runs/", "wandb/", ".DS_Store")
_IGNORE_FILES = (".gitignore", ".ftwizignore")


class CodeDirError(Exception):
    """``code_dir`` cannot be shipped: missing, over the cap, or unreadable. The message has the fix."""


@dataclass
class CodeBundle:
    """The files to ship and what ``run.json`` records about them."""

    root: str
    """The directory shipped (absolute, on this machine)."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Relative path → content."""
    manifest: list[dict[str, Any]] = field(default_factory=list)
    """One ``{"path", "bytes", "sha256"}`` per file, sorted by path."""
    excluded: int = 0
    """Files left out by the ignore rules."""

    @property
    def total_bytes(self) -> int:
        """Bytes shipped."""
        return sum(item["bytes"] for item in self.manifest)

    @property
    def sha256(self) -> str:
        """One hash over every shipped path and content hash (stable: sorted by path)."""
        digest = hashlib.sha256()
        for item in self.manifest:
            digest.update(f"{item['path']}\0{item['sha256']}\n".encode())
        return digest.hexdigest()

    def payload(self) -> dict[str, bytes]:
        """The files as run-dir paths (``code/<path>``)."""
        return {f"{CODE_SUBDIR}/{path}": data for path, data in self.files.items()}

    def record(self) -> dict[str, Any]:
        """What ``run.json`` keeps under ``code``."""
        return {"root": self.root, "sha256": self.sha256, "bytes": self.total_bytes, "files": self.manifest,
                "excluded": self.excluded, "shipped_to": f"<rundir>/{CODE_SUBDIR}"}


def resolve_code_dir(code_dir: str, config_dir: Optional[str]) -> Path:
    """``code_dir`` as an absolute path: relative to the directory of ftwiz.toml (else the current one)."""
    path = Path(os.path.expanduser(code_dir))
    if not path.is_absolute():
        path = Path(config_dir or os.getcwd()) / path
    return path.resolve()


def anchor_code_dir(job: Any, config_path: Optional[os.PathLike[str] | str]) -> None:
    """Make a relative ``job.code_dir`` absolute against ftwiz.toml's directory (headless runs: the config
    is not saved back, and the run record then says exactly which directory shipped)."""
    if config_path is None or getattr(job, "workload", None) != "command" or job.code_dir in ("",) or os.path.isabs(os.path.expanduser(job.code_dir)):
        return
    job.code_dir = str(resolve_code_dir(job.code_dir, os.path.dirname(os.path.abspath(config_path))))


def collect_code(root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> CodeBundle:
    """The shippable files under ``root`` (see the module docstring); raises :class:`CodeDirError`."""
    if not root.is_dir():
        raise CodeDirError(f"[job].code_dir {root} is not a directory: set code_dir to the directory holding your script "
                           '(relative to ftwiz.toml), or code_dir = "" when the code is already on every node')
    rules = _Rules.load(root)
    found: list[tuple[str, Path, int]] = []
    excluded = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        rel_dir = base.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        kept = []
        for name in sorted(dirnames):
            if (base / name).is_symlink() or rules.ignored(rel_dir + name, is_dir=True):
                excluded += 1
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = base / name
            if rules.ignored(rel_dir + name, is_dir=False) or not path.is_file():
                excluded += 1
                continue
            found.append((rel_dir + name, path, path.stat().st_size))
    total = sum(size for _, _, size in found)
    if total > max_bytes:
        biggest = sorted(found, key=lambda item: -item[2])[:5]
        listing = ", ".join(f"{rel} ({_mb(size)})" for rel, _, size in biggest)
        raise CodeDirError(
            f"[job].code_dir {root} holds {_mb(total)} to ship, over the {_mb(max_bytes)} cap; the biggest files: {listing}. "
            "Fix: list data, checkpoints and models in a .gitignore or .ftwizignore there (they belong on the nodes, "
            'read by path), or set code_dir = "" and put the code on every node yourself')
    bundle = CodeBundle(root=str(root), excluded=excluded)
    for rel, path, _size in sorted(found):
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CodeDirError(f"cannot read {path} to ship it: {exc.strerror or exc}; fix its permissions or ignore it in .ftwizignore") from None
        bundle.files[rel] = data
        bundle.manifest.append({"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return bundle


_CACHE: dict[tuple[str, str], CodeBundle] = {}
_CACHE_LOCK = threading.Lock()


def bundle_for_run(run_id: str, root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> CodeBundle:
    """:func:`collect_code` once per run (every node's runner thread asks; all get the same files)."""
    key = (run_id, str(root))
    with _CACHE_LOCK:
        if key not in _CACHE:
            if len(_CACHE) > 8:
                _CACHE.clear()
            _CACHE[key] = collect_code(root, max_bytes=max_bytes)
        return _CACHE[key]


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


@dataclass
class _Rule:
    regex: "re.Pattern[str]"
    negate: bool
    dir_only: bool


@dataclass
class _Rules:
    rules: list[_Rule]

    @classmethod
    def load(cls, root: Path) -> "_Rules":
        lines = list(DEFAULT_EXCLUDES)
        for name in _IGNORE_FILES:
            path = root / name
            if path.is_file():
                lines += path.read_text(errors="replace").splitlines()
        return cls([rule for rule in (_parse(line) for line in lines) if rule is not None])

    def ignored(self, rel: str, *, is_dir: bool) -> bool:
        verdict = False
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                verdict = not rule.negate
        return verdict


def _parse(line: str) -> Optional[_Rule]:
    line = line.rstrip("\n").rstrip()
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    line = line.lstrip("/")
    if not line:
        return None
    body = _glob_regex(line)
    regex = re.compile(("" if anchored else r"(?:.*/)?") + body + r"$")
    return _Rule(regex, negate, dir_only)


def _glob_regex(pattern: str) -> str:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append(r"(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append(r"/.*")
            i += 3
        elif pattern[i] == "*":
            out.append(r"[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i:end + 1])[4:-3])
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)
