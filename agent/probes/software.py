"""Software versions as the *training interpreter* sees them.

The agent runs in its own environment; torchrun runs another interpreter (``--python``). This
probe starts that interpreter with the text of :mod:`agent.workloads.versions` and reads JSON back,
with a timeout. The agent itself never imports torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from shared.models import SoftwareVersions

__all__ = ["probe_software", "probe_script", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 90.0
"""Importing torch on a cold page cache can take tens of seconds."""

_SCRIPT_PATH = Path(__file__).resolve().parents[1] / "workloads" / "versions.py"
"""The probe script: run by the training interpreter, it is workload-side code (the only place torch is imported)."""

_MARKER = "FTWIZ-SOFTWARE:"
"""Must equal ``MARKER`` in the script (a test holds them together)."""


@lru_cache(maxsize=1)
def probe_script() -> str:
    """The text the training interpreter runs with ``-c`` (read once)."""
    return _SCRIPT_PATH.read_text(encoding="utf-8")


def probe_software(python: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> SoftwareVersions:
    """Run the probe script in ``python``; errors are reported in ``error``, never raised."""
    started = time.time()

    def failed(message: str) -> SoftwareVersions:
        return SoftwareVersions(python_executable=python, error=message, probed_at=started)

    try:
        completed = subprocess.run(
            [python, "-c", probe_script()],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            cwd=tempfile.gettempdir(),  # never pick up a stray torch/ directory from the agent's cwd
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            check=False,
        )
    except FileNotFoundError:
        return failed(f"training interpreter {python} does not exist: pass --python with the interpreter torchrun uses")
    except PermissionError:
        return failed(f"training interpreter {python} is not executable by the agent's user")
    except subprocess.TimeoutExpired:
        return failed(f"training interpreter {python} did not answer within {timeout_s:g} s (importing torch?)")
    except OSError as error:
        return failed(f"training interpreter {python} could not start: {error}")
    for line in reversed(completed.stdout.decode("utf-8", errors="replace").splitlines()):
        if line.startswith(_MARKER):
            try:
                values = json.loads(line[len(_MARKER):])
            except ValueError:
                break
            return SoftwareVersions(python_executable=python, probed_at=started, **_known(values))
    stderr = completed.stderr.decode("utf-8", errors="replace").strip().splitlines()
    detail = stderr[-1] if stderr else f"exit status {completed.returncode}"
    return failed(f"training interpreter {python} failed the version probe: {detail}")


def _known(values: object) -> dict:
    """Keep only the fields the model knows, with the types it expects."""
    if not isinstance(values, dict):
        return {}
    fields = set(SoftwareVersions.model_fields) - {"python_executable", "probed_at"}
    return {key: value for key, value in values.items() if key in fields and (value is None or isinstance(value, (str, bool)))}
