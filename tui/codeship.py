"""Shipping the user's code: ``[job].code_dir`` → ``code/`` in every node's run directory.

:func:`collect_code` walks the directory, leaves out what ``.gitignore`` (and ``.ftwizignore``, same
syntax) at its top exclude plus a few things that never belong in a job (``.git/``, virtual
environments, caches, ``runs/``), refuses a tree over the size cap with an error naming the biggest
files and the fix, and returns a manifest (path, size, sha256 of each) and one hash over the whole
tree, which ``run.json`` records under ``code`` so a run says exactly what code ran.

Only the tree ships: regular files and directories inside ``code_dir``. A symlink is followed when it
resolves to a regular file inside ``code_dir`` (a link to a directory is left out, as git does); a link
that resolves outside it (a credentials file, ``/proc/self/environ``), a dangling link, a FIFO, a socket
or a device that the ignore rules do not exclude stops the launch with an error naming each one. The size
cap counts the bytes actually read, not what ``stat`` says.

:func:`bundle_for_run` builds the tar once per launch into a temporary file; every node's upload streams it
from disk (:func:`tui.launch.plan.send_payload`), so the controller's memory does not grow with the nodes.
:func:`prebuild` starts that work early, in a thread, while the checklist runs (``ftwiz --launch``); the run takes
the result over when the tree is what it was (the same files, sizes, modes and times), and builds afresh otherwise.

The ignore syntax is gitignore(5), matched by ``pathspec`` (gitwildmatch) on its RE2 backend: linear
time whatever the pattern (``**/**/…``, ``*a*a*a*…b`` cannot backtrack).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

import pathspec

from shared.codepaths import CODE_SUBDIR

__all__ = ["CODE_SUBDIR", "DEFAULT_EXCLUDES", "DEFAULT_MAX_BYTES", "CodeBundle", "CodeDirError", "anchor_code_dir", "bundle_for_run",
           "collect_code", "discard_prebuilt", "ignore_spec", "prebuild", "resolve_code_dir"]

#: The size cap of a shipped tree: code and small configs, not data or checkpoints.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: Never shipped, whatever .gitignore says.
DEFAULT_EXCLUDES = (".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "venv/", ".mypy_cache/", ".pytest_cache/",
                    ".ruff_cache/", ".ipynb_checkpoints/", "runs/", "wandb/", ".DS_Store")
_IGNORE_FILES = (".gitignore", ".ftwizignore")
_CHUNK = 1 << 20
#: A file's bytes stay in memory up to this size while it is hashed and counted, then spill to disk.
_SPOOL_BYTES = 1 << 20


class CodeDirError(Exception):
    """``code_dir`` cannot be shipped: missing, over the cap, unreadable, or holding what is not its own. The message has the fix."""


@dataclass
class CodeBundle:
    """What ships and what ``run.json`` records about it."""

    root: str
    """The directory shipped (absolute, on this machine)."""
    manifest: list[dict[str, Any]] = field(default_factory=list)
    """One ``{"path", "bytes", "sha256"}`` per file, sorted by path."""
    excluded: int = 0
    """Files left out by the ignore rules."""
    tar_path: Optional[Path] = None
    """The files as one tar of ``code/<path>`` members, built once (None when only scanned, as the checklist does)."""

    @property
    def paths(self) -> list[str]:
        """The shipped paths, relative to ``root``."""
        return [item["path"] for item in self.manifest]

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


def collect_code(root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, tar_path: Optional[Path] = None) -> CodeBundle:
    """The shippable files under ``root`` (see the module docstring); raises :class:`CodeDirError`.

    Each file is read once: hashed, counted against ``max_bytes`` and, when ``tar_path`` is given, written
    into that tar as ``code/<path>``.
    """
    if not root.is_dir():
        raise CodeDirError(f"[job].code_dir {root} is not a directory: set code_dir to the directory holding your script "
                           '(relative to ftwiz.toml), or code_dir = "" when the code is already on every node')
    found, refused, excluded = _walk(root, ignore_spec(root))
    if refused:
        listing = "; ".join(f"{rel} ({why})" for rel, why in refused[:8]) + (f"; and {len(refused) - 8} more" if len(refused) > 8 else "")
        raise CodeDirError(
            f"[job].code_dir {root} holds what is not its own to ship: {listing}. ftwiz ships only regular files and directories "
            "inside code_dir. Fix: list them in a .ftwizignore there, or replace a link by a copy of what it points at")
    total = sum(item.size for item in found)
    if total > max_bytes:  # what stat says: refuse before reading anything
        raise _over_cap(root, max_bytes, total, sorted(((item.rel, item.size) for item in found), key=lambda pair: -pair[1])[:5])
    bundle = CodeBundle(root=str(root), excluded=excluded, tar_path=tar_path)
    tar = tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) if tar_path is not None else None
    try:
        read = 0
        for item in sorted(found, key=lambda f: f.rel):
            size, digest, spool = _read(root, item, budget=max_bytes - read, max_bytes=max_bytes, keep=tar is not None)
            read += size
            if tar is not None and spool is not None:
                with spool:
                    info = tarfile.TarInfo(f"{CODE_SUBDIR}/{item.rel}")
                    info.size, info.mtime = size, int(item.mtime)
                    info.mode = 0o700 if item.mode & 0o111 else 0o600  # the run dir is the user's alone (secrets beside it)
                    tar.addfile(info, spool)
            bundle.manifest.append({"path": item.rel, "bytes": size, "sha256": digest})
    finally:
        if tar is not None:
            tar.close()
    return bundle


def ignore_spec(root: Path) -> pathspec.GitIgnoreSpec:
    """The built-in excludes plus ``.gitignore`` and ``.ftwizignore`` at the top of ``root``, as one gitwildmatch spec."""
    lines: list[tuple[str, int, str]] = [("ftwiz's built-in excludes", 0, line) for line in DEFAULT_EXCLUDES]
    for name in _IGNORE_FILES:
        path = root / name
        if path.is_file():
            lines += [(str(path), number, line) for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)]
    try:
        return pathspec.GitIgnoreSpec.from_lines([line for _, _, line in lines], backend="re2")
    except ValueError:
        for where, number, line in lines:  # name the line
            try:
                pathspec.GitIgnoreSpec.from_lines([line], backend="re2")
            except ValueError as exc:
                raise CodeDirError(f"{where}:{number}: {line!r} is not a gitignore pattern ({exc}). Fix: correct or delete that line") from None
        raise


_BUILT: list[CodeBundle] = []
_BUILT_LOCK = threading.Lock()


@dataclass
class _Prebuilt:
    """A bundle built ahead of its run, and the tree (as walked before reading it) it was built from."""

    max_bytes: int
    tree: list["_Found"] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    bundle: Optional[CodeBundle] = None


_PREBUILT: dict[str, _Prebuilt] = {}


def prebuild(root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> threading.Event:
    """Start building ``root``'s bundle in a thread, for the run a checklist in progress may start; the event is set
    when it is done. A tree that cannot ship builds nothing here (the checklist and then the run say why);
    :func:`discard_prebuilt` drops the result."""
    early = _Prebuilt(max_bytes)

    def build() -> None:
        folder = Path(tempfile.mkdtemp(prefix="ftwiz-code-"))  # mode 0700
        try:
            early.tree = _walk(root, ignore_spec(root))[0]  # before reading: a file changed meanwhile differs later
            early.bundle = collect_code(root, max_bytes=max_bytes, tar_path=folder / "code.tar")
        except Exception:  # the run builds again and raises it where it is shown
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            early.done.set()

    with _BUILT_LOCK:
        replaced = _PREBUILT.pop(str(root), None)
        _PREBUILT[str(root)] = early
    _discard(replaced)
    threading.Thread(target=build, name="ftwiz-code-prebuild", daemon=True).start()
    return early.done


def discard_prebuilt() -> None:
    """Drop every bundle :func:`prebuild` made (the launch it was for does not go ahead)."""
    with _BUILT_LOCK:
        dropped = list(_PREBUILT.values())
        _PREBUILT.clear()
    for early in dropped:
        _discard(early)


def _discard(early: Optional[_Prebuilt]) -> None:
    if early is not None:
        early.done.wait()
        if early.bundle is not None:
            _remove_tar(early.bundle)


def _take_prebuilt(root: Path, max_bytes: int) -> Optional[CodeBundle]:
    """The bundle prebuilt from ``root`` when the tree is still the one it was built from (else None, and it is dropped)."""
    with _BUILT_LOCK:
        early = _PREBUILT.pop(str(root), None)
    if early is None:
        return None
    early.done.wait()
    try:
        same = early.bundle is not None and early.max_bytes == max_bytes and _walk(root, ignore_spec(root))[0] == early.tree
    except (CodeDirError, OSError):
        same = False
    if not same:
        _discard(early)
        return None
    return early.bundle


def bundle_for_run(run_id: str, root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> CodeBundle:
    """:func:`collect_code` into a private temporary tar for run ``run_id`` (the launch plan asks once; every
    node's upload streams the one file), or what :func:`prebuild` made of the same tree. The tars go when ftwiz
    exits."""
    prebuilt = _take_prebuilt(root, max_bytes)
    if prebuilt is not None:
        bundle = prebuilt
    else:
        folder = Path(tempfile.mkdtemp(prefix=f"ftwiz-code-{run_id}-"))  # mode 0700
        try:
            bundle = collect_code(root, max_bytes=max_bytes, tar_path=folder / "code.tar")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    with _BUILT_LOCK:
        _BUILT.append(bundle)
        while len(_BUILT) > 8:  # a long TUI session launches many times: keep the tars of the last few launches only
            _remove_tar(_BUILT.pop(0))
    return bundle


@atexit.register
def _remove_tars() -> None:
    with _BUILT_LOCK:
        for bundle in _BUILT:
            _remove_tar(bundle)
        _BUILT.clear()
    discard_prebuilt()


def _remove_tar(bundle: CodeBundle) -> None:
    if bundle.tar_path is not None:
        shutil.rmtree(bundle.tar_path.parent, ignore_errors=True)


@dataclass(frozen=True)
class _Found:
    rel: str
    """Path relative to code_dir (what ships)."""
    source: str
    """What is read: the file itself, or the file inside code_dir that a link resolves to."""
    size: int
    mode: int
    mtime: float


def _walk(root: Path, spec: pathspec.GitIgnoreSpec) -> tuple[list[_Found], list[tuple[str, str]], int]:
    """The files to ship, what must be refused (path, why), and how many entries the rules left out."""
    real_root = os.path.realpath(root)
    found: list[_Found] = []
    refused: list[tuple[str, str]] = []
    excluded = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        rel_dir = base.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        kept = []
        for name in sorted(dirnames):
            rel, path = rel_dir + name, base / name
            if spec.match_file(rel + "/"):
                excluded += 1
            elif path.is_symlink():
                target = os.path.realpath(path)
                if _inside(real_root, target):
                    excluded += 1  # a link to a directory of the tree: its files ship under their own path
                else:
                    refused.append((rel, f"a link to {target}, outside code_dir"))
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel, path = rel_dir + name, base / name
            if spec.match_file(rel):
                excluded += 1
                continue
            problem, item = _classify(real_root, rel, path)
            if problem:
                refused.append((rel, problem))
            elif item is not None:
                found.append(item)
    return found, refused, excluded


def _classify(real_root: str, rel: str, path: Path) -> tuple[str, Optional[_Found]]:
    """Why ``path`` cannot ship (``""`` when it can), and what to read."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}", None
    source = str(path)
    if stat.S_ISLNK(st.st_mode):
        source = os.path.realpath(path)
        if not _inside(real_root, source):
            return f"a link to {source}, outside code_dir", None
        try:
            st = os.stat(source)
        except OSError:
            return f"a link to {source}, which does not exist", None
        if not stat.S_ISREG(st.st_mode):
            return f"a link to {_kind(st.st_mode)}", None
    elif not stat.S_ISREG(st.st_mode):
        return _kind(st.st_mode), None
    return "", _Found(rel, source, st.st_size, st.st_mode, st.st_mtime)


def _read(root: Path, item: _Found, *, budget: int, max_bytes: int, keep: bool) -> tuple[int, str, Optional[IO[bytes]]]:
    """Read ``item`` once: its size as read, its sha256, and (``keep``) its bytes in a spooled file at offset 0."""
    try:
        # O_NOFOLLOW: what was classified a regular file must not have become a link; O_NONBLOCK: nor a FIFO that blocks.
        fd = os.open(item.source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise CodeDirError(f"cannot read {root / item.rel} to ship it: {exc.strerror or exc}; fix its permissions or ignore it in .ftwizignore") from None
    spool: Optional[IO[bytes]] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) if keep else None
    digest, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise CodeDirError(f"[job].code_dir {root}: {item.rel} changed into {_kind(os.fstat(handle.fileno()).st_mode)} while it was read. "
                                   "Fix: list it in a .ftwizignore there")
            while chunk := handle.read(min(_CHUNK, budget - size + 1)):
                size += len(chunk)
                if size > budget:
                    raise _over_cap(root, max_bytes, None, [(item.rel, size)], read=True)
                digest.update(chunk)
                if spool is not None:
                    spool.write(chunk)
    except BaseException:
        if spool is not None:
            spool.close()
        raise
    if spool is not None:
        spool.seek(0)
    return size, digest.hexdigest(), spool


def _over_cap(root: Path, max_bytes: int, total: Optional[int], biggest: list[tuple[str, int]], *, read: bool = False) -> CodeDirError:
    listing = ", ".join(f"{rel} ({_mb(size)}{' read so far' if read else ''})" for rel, size in biggest)
    holds = f"holds {_mb(total)} to ship" if total is not None else "holds more to ship than its files' sizes said"
    return CodeDirError(
        f"[job].code_dir {root} {holds}, over the {_mb(max_bytes)} cap; the biggest files: {listing}. "
        "Fix: list data, checkpoints and models in a .gitignore or .ftwizignore there (they belong on the nodes, "
        'read by path), or set code_dir = "" and put the code on every node yourself')


def _inside(real_root: str, target: str) -> bool:
    return target == real_root or target.startswith(real_root.rstrip("/") + "/")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
