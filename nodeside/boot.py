"""The node bundle's loader: this file's text is the ``-c`` program of every node-helper call.

``<python> -I -S -c <this file> <bundle> COMMAND ...``: ``<bundle>`` is a base64 zip of the helper's files
(``nodeside/*.py`` and ``shared/nodewire.py``, built by :mod:`tui.launch.nodecode`). The loader imports those
modules from memory (nothing is written on the node; ``-I -S`` keeps the node's site-packages and ``PYTHON*``
variables out) and runs :func:`nodeside.helper.main` with the rest of the arguments. Standard library only,
Python 3.8+.
"""

import base64
import importlib.abc
import importlib.util
import io
import sys
import zipfile

ENTRY = "nodeside.helper"
"""The module whose ``main(argv)`` the loader runs."""


class BundleImporter(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Imports the modules of one bundle (``{"pkg/mod.py": source}``) and nothing else."""

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
        return importlib.util.spec_from_loader(fullname, self, origin="<ftwiz-bundle>/" + found,
                                               is_package=found.endswith("/__init__.py"))

    def get_source(self, fullname):
        found = self._path(fullname)
        if found is None:
            raise ImportError("not in the bundle: " + fullname, name=fullname)
        return self.files[found].decode("utf-8")

    def get_code(self, fullname):
        return compile(self.get_source(fullname), "<ftwiz-bundle>/" + (self._path(fullname) or ""), "exec")

    def is_package(self, fullname):
        return (self._path(fullname) or "").endswith("/__init__.py")


def install(bundle):
    """Make the modules of ``bundle`` (a zip, as bytes) importable, ahead of anything on disk."""
    with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    sys.meta_path.insert(0, BundleImporter(files))


def main(argv):
    """``argv``: the base64 bundle, then the helper's command and arguments."""
    if not argv:
        sys.stderr.write("ftwiz node bundle: no bundle given\n")
        return 2
    install(base64.b64decode(argv[0]))
    return importlib.import_module(ENTRY).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
