"""One door to NVML, in the manner of nvitop's ``libnvml``.

Every NVML call of the agent goes through :meth:`LiveNvml.query`: NVML is initialised lazily on
first use, calls are serialised by one lock, and any ``NVMLError`` turns into the caller's
default. "No driver" or "no library" is a value (:meth:`LiveNvml.init_error`), never a crash.

A fixture (:mod:`agent.probes.gpu_fixture`) implements the same two methods, so the code that
turns NVML answers into :class:`shared.models.GpuInfo` runs unchanged on GPU-less machines.
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Protocol

try:  # nvidia-ml-py provides the module; a broken install must not stop the agent.
    import pynvml as _pynvml
except ImportError:  # pragma: no cover - exercised only on broken installs
    _pynvml = None

__all__ = ["NvmlSource", "LiveNvml"]


class NvmlSource(Protocol):
    """What the GPU probe needs from NVML: the real library or a fixture."""

    source: Optional[str]
    """Where values come from when not live NVML (``None`` for the real library)."""

    def init_error(self) -> Optional[str]:
        """Initialise if needed; return why NVML is unusable, or ``None`` when it works."""

    def query(self, func_name: str, *args: Any, default: Any = None) -> Any:
        """Call the NVML function ``func_name``; return ``default`` on any NVML error."""

    def process_name(self, pid: int) -> Optional[str]:
        """Name of a process holding GPU memory, when it can be known."""

    def reset(self) -> None:
        """Forget the initialisation state so the next query retries (driver installed later)."""


class LiveNvml:
    """The node's real NVML library."""

    source: Optional[str] = None

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._initialized = False
        self._init_error: Optional[str] = None

    def init_error(self) -> Optional[str]:
        """Initialise NVML once; return the reason it cannot be used, or ``None``."""
        with self._lock:
            if self._initialized or self._init_error is not None:
                return self._init_error
            if _pynvml is None:
                self._init_error = "the pynvml module is missing: reinstall the agent (pip install nvidia-ml-py)"
                return self._init_error
            try:
                _pynvml.nvmlInit()
            except _pynvml.NVMLError as error:
                self._init_error = _explain_init_error(error)
            except OSError as error:  # ctypes can fail to load a broken library
                self._init_error = f"NVML library could not be loaded: {error}"
            else:
                self._initialized = True
            return self._init_error

    def query(self, func_name: str, *args: Any, default: Any = None) -> Any:
        """Call ``pynvml.<func_name>(*args)``; ``default`` on NVML errors or unknown functions."""
        if self.init_error() is not None:
            return default
        func = getattr(_pynvml, func_name, None)
        if func is None:  # older nvidia-ml-py than the function we ask for
            return default
        with self._lock:
            try:
                value = func(*args)
            except (_pynvml.NVMLError, UnicodeDecodeError):
                return default
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        return value

    def process_name(self, pid: int) -> Optional[str]:
        """Read ``/proc/<pid>/comm``: the process may belong to another user or be gone."""
        try:
            with open(f"/proc/{int(pid)}/comm", encoding="utf-8", errors="replace") as comm:
                return comm.read().strip() or None
        except OSError:
            return None

    def reset(self) -> None:
        """Shut NVML down so the next query initialises again."""
        with self._lock:
            if self._initialized and _pynvml is not None:
                try:
                    _pynvml.nvmlShutdown()
                except _pynvml.NVMLError:
                    pass
            self._initialized = False
            self._init_error = None


def _explain_init_error(error: Exception) -> str:
    """Turn an nvmlInit failure into a sentence an operator can act on."""
    text = str(error)
    if _pynvml is not None and isinstance(error, _pynvml.NVMLError_LibraryNotFound):
        return f"NVML unavailable: {text} (no NVIDIA driver installed on this node?)"
    if _pynvml is not None and isinstance(error, _pynvml.NVMLError_DriverNotLoaded):
        return f"NVML unavailable: {text} (the nvidia kernel module is not loaded: check `lsmod | grep nvidia`)"
    if _pynvml is not None and isinstance(error, _pynvml.NVMLError_LibRmVersionMismatch):
        return f"NVML unavailable: {text} (driver upgraded without reloading the module: reboot the node)"
    if _pynvml is not None and isinstance(error, _pynvml.NVMLError_NoPermission):
        return f"NVML unavailable: {text} (the agent's user cannot open /dev/nvidia*)"
    return f"NVML unavailable: {text}"
