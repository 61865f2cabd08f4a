"""GPU values from a JSON fixture, behind the same interface as the live NVML library.

For tests and demos on machines without an NVIDIA GPU. A fixture holds, per device, what each
NVML function would answer (in NVML's own units: bytes, milliwatts, bitmasks, topology levels),
so :class:`agent.probes.gpu.GpuProbe` converts it with exactly the code it uses on real GPUs.
A function missing from the fixture answers like NVML's "not supported": the caller's default.

File layout::

    {"kind": "ftwiz-nvml-fixture", "version": 1,
     "source": "constructed from <documents>, not recorded",
     "system": {"nvmlSystemGetDriverVersion": "550.54.15", "nvmlSystemGetCudaDriverVersion_v2": 12040},
     "devices": [{"nvmlDeviceGetName": "...", "nvmlDeviceGetMemoryInfo": {"total": ..., ...}, ...}],
     "processes": {"4242": "python3"}}

Per-peer functions (topology, P2P status) map the peer's index to the answer; per-link
functions (NVLink state) list one answer per link.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

__all__ = ["FixtureNvml", "FixtureError"]

FIXTURE_KIND = "ftwiz-nvml-fixture"
_PER_PEER = {"nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"}
_PER_LINK = {"nvmlDeviceGetNvLinkState"}
_P2P_CAPS_INDEX_NVLINK = 2


class FixtureError(ValueError):
    """The fixture file is missing or malformed; the message names the file and the problem."""


class FixtureNvml:
    """An :class:`~agent.probes.nvml.NvmlSource` that answers from a fixture file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        data = _load(self.path)
        self.source: Optional[str] = data["source"]
        self._system: dict[str, Any] = data.get("system", {})
        self._devices: list[dict[str, Any]] = data["devices"]
        self._processes: dict[str, str] = data.get("processes", {})

    def init_error(self) -> Optional[str]:
        """A fixture always initialises."""
        return None

    def query(self, func_name: str, *args: Any, default: Any = None) -> Any:
        """Answer ``func_name(*args)`` from the fixture, or ``default`` when it has no answer."""
        if func_name == "nvmlDeviceGetCount":
            return len(self._devices)
        if func_name == "nvmlDeviceGetHandleByIndex":
            index = args[0]
            return index if 0 <= index < len(self._devices) else default
        if func_name.startswith("nvmlSystem"):
            return self._system.get(func_name, default)
        if not args or not isinstance(args[0], int) or not 0 <= args[0] < len(self._devices):
            return default
        if func_name not in self._devices[args[0]]:
            return default
        value = self._devices[args[0]][func_name]
        if func_name in _PER_PEER:
            if func_name == "nvmlDeviceGetP2PStatus" and args[2] != _P2P_CAPS_INDEX_NVLINK:
                return default
            value = value.get(str(args[1]), default)
        elif func_name in _PER_LINK:
            link = args[1]
            value = value[link] if 0 <= link < len(value) else default
        return _as_struct(value)

    def process_name(self, pid: int) -> Optional[str]:
        """Process names come from the fixture too: its pids do not exist on this machine."""
        return self._processes.get(str(pid))

    def reset(self) -> None:
        """Nothing to forget."""


def _as_struct(value: Any) -> Any:
    """NVML returns ctypes structs with attributes; JSON gives dicts."""
    if isinstance(value, dict):
        return SimpleNamespace(**value)
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return [SimpleNamespace(**item) for item in value]
    return value


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FixtureError(f"GPU fixture {path} does not exist: pass a file from agent/fixtures/") from None
    except (OSError, ValueError) as error:
        raise FixtureError(f"GPU fixture {path} cannot be read as JSON: {error}") from None
    if not isinstance(data, dict) or data.get("kind") != FIXTURE_KIND:
        raise FixtureError(f"GPU fixture {path} is not an ftwiz NVML fixture (expected \"kind\": \"{FIXTURE_KIND}\")")
    source = data.get("source")
    if not isinstance(source, str) or not source.strip():
        raise FixtureError(f"GPU fixture {path} must say where its values come from in \"source\"")
    devices = data.get("devices")
    if not isinstance(devices, list) or not all(isinstance(device, dict) for device in devices):
        raise FixtureError(f"GPU fixture {path}: \"devices\" must be a list of objects, one per GPU")
    return data
