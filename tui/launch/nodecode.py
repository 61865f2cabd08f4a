"""The code ftwiz ships to nodes, built once per controller process: the node helper bundle and package files.

One locator (:func:`package_dir`: the installed package's folder, found without importing it) and one collector
(:func:`package_files`) serve both things a launch ships: the node helper (:data:`NODESIDE_FILES`, packed into
:func:`helper_bundle` and run through :mod:`nodeside.boot` on every helper call) and the workloads
(:func:`tui.launch.support.workload_files`, unpacked into the run directory). Nothing is spliced: the node runs
the very files the tests and the agent daemon import.
"""

from __future__ import annotations

import functools
import importlib.util
import shlex
from pathlib import Path

from nodeside.boot import pack
from tui.launch.plan import quote_path

__all__ = ["NODESIDE_FILES", "helper_argv", "helper_bundle", "helper_command", "package_dir", "package_files"]

#: What the node helper imports, as bundle paths: the ``nodeside`` package and the wire rules it shares with
#: the controller (a test checks that every import of these files is the standard library or one of them).
NODESIDE_FILES = ("nodeside/__init__.py", "nodeside/helper.py", "nodeside/keeper.py", "nodeside/procmatch.py",
                  "shared/__init__.py", "shared/logprefix.py", "shared/nodewire.py")


def package_dir(dotted: str) -> Path:
    """The folder of package ``dotted`` (e.g. ``agent.workloads``) where this Python finds it, without importing it.

    Only the top-level name is looked up (:func:`importlib.util.find_spec` imports the parents of a dotted name);
    the rest is a path under it.
    """
    top, *rest = dotted.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {top!r} package is not installed beside ftwiz (needed on the nodes: {dotted})")
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest)
    if not folder.is_dir():
        raise RuntimeError(f"{folder} is missing: the {dotted!r} package is not installed beside ftwiz")
    return folder


def package_files(dotted: str, suffixes: tuple[str, ...] = (".py",)) -> dict[str, bytes]:
    """Every file of package ``dotted`` with one of ``suffixes``, keyed by its path relative to the package
    folder (no caches)."""
    root = package_dir(dotted)
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in sorted(root.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in suffixes}


@functools.cache
def helper_bundle() -> str:
    """The node helper's files (:data:`NODESIDE_FILES`) as a bundle (:func:`nodeside.boot.pack`): the loader's first
    argument."""
    found: dict[str, str] = {}
    for top in sorted({path.split("/")[0] for path in NODESIDE_FILES}):
        found.update({f"{top}/{name}": data.decode("utf-8") for name, data in package_files(top).items()})
    missing = [path for path in NODESIDE_FILES if path not in found]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing from the installed ftwiz: the node helper cannot be shipped")
    return pack({path: found[path] for path in NODESIDE_FILES})


@functools.cache
def _boot_source() -> str:
    return (package_dir("nodeside") / "boot.py").read_text(encoding="utf-8")


def helper_argv(python: str, *args: str) -> list[str]:
    """``python -I -S -c <boot> <bundle> ARGS...``: the node helper run by ``python`` (no shell)."""
    # -I -S: the helper needs only the standard library; skip site-packages and PYTHON* variables,
    # which start faster and cannot be broken by the node's environment.
    return [python, "-I", "-S", "-c", _boot_source(), helper_bundle(), *args]


def helper_command(python: str, *args: str) -> str:
    """:func:`helper_argv` as one shell command, every piece quoted (a leading ``~/`` in ``python`` expands)."""
    return " ".join([quote_path(python), *(shlex.quote(word) for word in helper_argv(python, *args)[1:])])
