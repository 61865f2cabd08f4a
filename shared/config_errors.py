"""Config errors a user can act on: the TOML line of a field, and pydantic's errors in plain words.

Pure helpers of :func:`shared.config.parse_config` (text and dicts in, strings and line numbers out).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["NO_NODES", "cross_loc", "explain", "got", "is_gpus_union", "is_union_tag", "locate_line", "path", "syntax_detail"]

NO_NODES = 'required but missing: add a [[nodes]] section per machine (or set [cluster] backend = "slurm")'
"""The message when no [[nodes]] are given on the SSH backend (the error locator points it at ``nodes``)."""


def syntax_detail(text: str, exc: Exception) -> tuple[str, Optional[int]]:
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        return str(exc), None
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as decode:
        found = re.search(r"\(at line (\d+), column \d+\)", str(decode))
        return str(decode), int(found.group(1)) if found else None
    return str(exc), None


_UNION_TAGS = ("literal['all']", "int", "list[int]")


def is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or part.startswith("function-after["))


def is_gpus_union(loc: list[Any]) -> bool:
    return "gpus" in loc and any(is_union_tag(p) for p in loc[loc.index("gpus") + 1:])


def got(error: Mapping[str, Any]) -> str:
    value = error.get("input")
    return f" (got {value!r})" if value is not None and not isinstance(value, (dict, list)) else ""


def cross_loc(data: dict[str, Any], error: Mapping[str, Any]) -> list[Any]:
    """Where a whole-config check points: the repeated node name, or ``cluster.master``."""
    message = str(error.get("msg", ""))
    if NO_NODES in message:
        return ["nodes"]
    if "cluster.master" in message:
        return ["cluster", "master"]
    if "node names must be unique" in message:
        seen: set[Any] = set()
        for index, node in enumerate(data.get("nodes") or []):
            name = node.get("name") if isinstance(node, dict) else None
            if name in seen:
                return ["nodes", index, "name"]
            seen.add(name)
    return []


def path(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("literal['all']", "int", "list[int]", "function-after[_gpus_ok(), union[literal['all'],int,list[int]]]"):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def explain(error: Mapping[str, Any]) -> str:
    message = error["msg"]
    ctx = error.get("ctx") or {}
    if error["type"] == "literal_error" and "expected" in ctx:
        message = f"must be one of {ctx['expected']}"
    elif error["type"] == "extra_forbidden":
        message = "unknown key (check the spelling; see the README for the allowed keys)"
    elif error["type"] == "missing":
        message = "required but missing"
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if "input" in error and error["type"] not in ("missing",) and not isinstance(error["input"], (dict, list)):
        message += f" (got {error['input']!r})"
    return message


def locate_line(text: str, loc: list[Any]) -> Optional[int]:
    """Best-effort line of the key at ``loc`` (e.g. ``['nodes', 1, 'ssh_port']``) in ``text``."""
    keys = [p for p in loc if isinstance(p, (str, int))]
    if not keys:
        return None
    lines = text.splitlines()
    section, index, key = str(keys[0]), None, None
    rest = keys[1:]
    if rest and isinstance(rest[0], int):
        index, rest = rest[0], rest[1:]
    if rest:
        key = str(rest[0])
    header_re = re.compile(r"^\s*\[\[\s*" + re.escape(section) + r"\s*\]\]" if index is not None else r"^\s*\[\s*" + re.escape(section) + r"\s*\]")
    seen, start = -1, None
    for number, line in enumerate(lines, 1):
        if header_re.match(line):
            seen += 1
            if index is None or seen == index:
                start = number
                break
    if start is None:
        for number, line in enumerate(lines, 1):
            if re.match(r"^\s*" + re.escape(section) + r"\s*=", line):
                return number
        return None
    if key is None:
        return start
    for number in range(start + 1, len(lines) + 1):
        line = lines[number - 1]
        if re.match(r"^\s*\[", line):
            break
        if re.match(r"^\s*" + re.escape(key) + r"\s*=", line):
            return number
    return start
