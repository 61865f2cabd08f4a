"""Finding, reading and atomically saving ``ftwiz.toml``.

The schema and the parsing live in :mod:`shared.config` (pure); this module owns the file system:
where the file is looked for, turning file errors into :class:`~shared.config.ConfigError`, the
embedded one-node default when there is no file at all, and saves that never leave a half-written
file behind (temp file in the same directory, fsync, ``os.replace``).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from shared.config import ConfigError, FtwizConfig, default_config, parse_config, to_toml

__all__ = [
    "LoadedConfig",
    "candidate_paths",
    "expand_path",
    "find_config",
    "load_config",
    "read_config",
    "save_config",
    "user_config_dir",
]


@dataclass
class LoadedConfig:
    """A config and where it came from."""

    config: FtwizConfig
    """The validated config."""
    path: Optional[Path]
    """The file it was read from; ``None`` for the embedded default."""
    text: Optional[str]
    """The file's text (kept so a save can preserve comments); ``None`` for the embedded default."""

    @property
    def embedded(self) -> bool:
        """True when no file was found and the one-node default is in use."""
        return self.path is None

    @property
    def source(self) -> str:
        """A label for messages: the path, or ``<embedded default>``."""
        return str(self.path) if self.path else "<embedded default>"


def expand_path(path: str | os.PathLike[str]) -> Path:
    """``~`` and ``$VAR`` expanded; relative paths stay relative (to the caller's directory)."""
    return Path(os.path.expandvars(os.path.expanduser(os.fspath(path))))


def user_config_dir() -> Path:
    """``~/.config/ftwiz`` (honours ``$XDG_CONFIG_HOME``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "ftwiz"


def candidate_paths(explicit: Optional[str | os.PathLike[str]] = None) -> list[Path]:
    """Where a config is looked for, in order: ``--config``, ``./ftwiz.toml``, ``~/.config/ftwiz/ftwiz.toml``."""
    if explicit is not None:
        return [expand_path(explicit)]
    return [Path.cwd() / "ftwiz.toml", user_config_dir() / "ftwiz.toml"]


def find_config(explicit: Optional[str | os.PathLike[str]] = None) -> Optional[Path]:
    """The config file to use, or ``None`` when there is none (then the embedded default applies).

    An explicit ``--config`` path that does not exist is an error, not a silent fallback.
    """
    if explicit is not None:
        path = expand_path(explicit)
        if not path.is_file():
            what = "is a directory, not a file" if path.is_dir() else "not found"
            raise ConfigError(str(path), f"config file {what}", field=None)
        return path
    for path in candidate_paths():
        if path.is_file():
            return path
    return None


def read_config(path: str | os.PathLike[str]) -> tuple[FtwizConfig, str]:
    """Read and validate ``path``; every failure is a :class:`ConfigError` naming the file."""
    path = expand_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), "config file not found") from None
    except PermissionError:
        raise ConfigError(str(path), f"permission denied reading the config (fix: chmod u+r {path})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), f"not UTF-8 text (byte {exc.start}): save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read the config: {exc.strerror or exc}") from None
    return parse_config(text, str(path)), text


def load_config(explicit: Optional[str | os.PathLike[str]] = None) -> LoadedConfig:
    """Find and read the config; with no file anywhere, the embedded one-node default.

    The default describes this machine (``socket.gethostname()``) with the running interpreter as its
    training Python and a token under ``~/.config/ftwiz``.
    """
    path = find_config(explicit)
    if path is None:
        token_file = str(user_config_dir() / "agent.token")
        config = default_config(hostname=socket.gethostname(), python=sys.executable, token_file=token_file)
        return LoadedConfig(config=config, path=None, text=None)
    config, text = read_config(path)
    return LoadedConfig(config=config, path=path, text=text)


def save_config(config: FtwizConfig, path: str | os.PathLike[str], original: Optional[str] = None) -> Path:
    """Write ``config`` to ``path`` atomically, keeping the comments of the file already there.

    ``original`` is the text to preserve; when ``None`` the current file (if any) is read. The new text
    goes to a temporary file in the same directory, is fsynced, then renamed over ``path`` so a crash
    leaves either the old or the new file, never a torn one. The file's mode is kept.
    """
    path = expand_path(path)
    if original is None and path.is_file():
        try:
            original = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            original = None  # unreadable old file: write a fresh one rather than fail the save
    text = to_toml(config, original)
    # Re-parse before writing: a save must never produce a file that the next start rejects.
    parse_config(text, str(path))
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise ConfigError(str(path), f"cannot write the config: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        _fsync_dir(directory)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ConfigError(str(path), f"cannot write the config: {exc.strerror or exc}") from None
    return path


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
