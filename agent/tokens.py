"""The agent token file: create it safely, refuse to use it when others can read it."""

from __future__ import annotations

import os
import secrets
import shlex
import stat
from pathlib import Path

__all__ = ["TokenError", "create_token_file", "read_token_file", "MIN_TOKEN_LENGTH"]

MIN_TOKEN_LENGTH = 16
"""Shorter tokens are refused: they can be guessed."""


class TokenError(Exception):
    """A token file problem; the message says what is wrong and the command that fixes it."""


def create_token_file(path: str | Path, *, force: bool = False) -> Path:
    """Write a new random token with mode 0600 (parents created 0700); never prints the token."""
    path = Path(path).expanduser()
    if path.exists() and not force:
        raise TokenError(f"{path} already exists; keep it, or pass --force to replace it (every node must then get the new one)")
    _make_private_parents(path.parent)
    token = secrets.token_urlsafe(32)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)  # O_CREAT's mode is filtered by the umask; be explicit
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def read_token_file(path: str | Path) -> str:
    """Return the token; refuse files readable by group or others, and weak tokens."""
    path = Path(path).expanduser()
    quoted = shlex.quote(str(path))
    try:
        info = path.stat()
    except FileNotFoundError:
        raise TokenError(f"token file {path} does not exist; create one with: ftwiz-agent token {quoted}") from None
    except OSError as error:
        raise TokenError(f"cannot read token file {path}: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise TokenError(f"token file {path} is not a regular file")
    if info.st_mode & 0o077:
        raise TokenError(
            f"token file {path} is accessible by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"fix it with: chmod 600 {quoted}"
        )
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise TokenError(f"cannot read token file {path}: {error}") from None
    if len(token) < MIN_TOKEN_LENGTH or not (token.isascii() and token.isprintable()) or " " in token:
        raise TokenError(
            f"token file {path} holds no usable token (one line of at least {MIN_TOKEN_LENGTH} printable ASCII characters, no spaces); "
            f"make a new one with: ftwiz-agent token --force {quoted}"
        )
    return token


def _make_private_parents(directory: Path) -> None:
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for created in reversed(missing):
        created.mkdir(mode=0o700)
        os.chmod(created, 0o700)  # mkdir's mode is filtered by the umask
