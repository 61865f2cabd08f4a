"""The node bundle: its format (:func:`pack`, :func:`unpack`) and its loader, whose text is the ``-c`` program of
every node-helper call.

``<python> -I -S -c <this file> <bundle> COMMAND ...``: ``<bundle>`` holds the helper's files (``nodeside/*.py``
and the ``shared/`` modules they import, chosen by :mod:`tui.launch.nodecode`) as base64 of zlib-compressed JSON
``{"nodeside/helper.py": "<source>", ...}``. The loader imports those modules from memory (nothing is written on
the node; ``-I -S`` keeps the node's site-packages and ``PYTHON*`` variables out) and runs
:func:`nodeside.helper.main` with the rest of the arguments. Standard library only, Python 3.8+, and only
modules that start fast (no ``zipfile``, no ``importlib.abc``: each helper call pays for its imports).
"""

import binascii
import json
import sys
import zlib
from importlib.machinery import ModuleSpec

ENTRY = "nodeside.helper"
"""The module whose ``main(argv)`` the loader runs."""
ORIGIN = "<ftwiz-bundle>/"
"""What a module's file name starts with in a traceback."""


def pack(files):
    """``{path: source text}`` as a bundle (ASCII, the same for the same files)."""
    # type: (dict) -> str
    raw = json.dumps(files, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return binascii.b2a_base64(zlib.compress(raw, 9), newline=False).decode("ascii")


def unpack(bundle):
    """The ``{path: source text}`` a bundle holds."""
    # type: (str) -> dict
    return json.loads(zlib.decompress(binascii.a2b_base64(bundle)).decode("utf-8"))


class BundleImporter(object):
    """A meta path finder and loader for the modules of one bundle, and nothing else."""

    def __init__(self, files):
        self.files = files

    def _path(self, fullname):
        base = fullname.replace(".", "/")
        for path in (base + "/__init__.py", base + ".py"):
            if path in self.files:
                return path
        return None

    def find_spec(self, fullname, path=None, target=None):
        found = self._path(fullname)
        if found is None:
            return None
        # A loader by its methods (importlib.abc.Loader as a base would cost every call an import)
        return ModuleSpec(fullname, self, origin=ORIGIN + found, is_package=found.endswith("/__init__.py"))  # type: ignore[arg-type]

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module):
        found = self._path(module.__name__)
        exec(compile(self.files[found], ORIGIN + found, "exec"), module.__dict__)

    def get_source(self, fullname):
        found = self._path(fullname)
        return None if found is None else self.files[found]


def main(argv):
    """``argv``: the bundle, then the helper's command and arguments."""
    if not argv:
        sys.stderr.write("ftwiz node bundle: no bundle given\n")
        return 2
    sys.meta_path.insert(0, BundleImporter(unpack(argv[0])))
    return __import__(ENTRY, fromlist=["main"]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
