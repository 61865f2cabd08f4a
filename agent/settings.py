"""The agent's configuration, as the command line gives it."""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

__all__ = ["AgentSettings", "IpNetwork", "DEFAULT_PORT", "MAX_JSON_BODY_BYTES"]

IpNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

DEFAULT_PORT = 8462
"""TCP port of ``ftwiz-agent``."""

MAX_JSON_BODY_BYTES = 64 * 1024
"""Largest request body the JSON routes accept (the sink has its own cap)."""


@dataclass(frozen=True)
class AgentSettings:
    """What one agent serves and how."""

    node_name: str
    """The node's name in the cluster config (``--node-name``)."""
    token: str = field(repr=False)
    """Shared bearer token; never logged."""
    python: str = sys.executable
    """The training interpreter whose software versions are reported."""
    disk_paths: tuple[str, ...] = ()
    """Paths whose free space is reported."""
    interval_s: float = 1.0
    """Seconds between hardware samples."""
    gpu_fixture: Optional[Path] = None
    """Serve GPUs from this constructed NVML fixture instead of the live library."""
    probe_allow: tuple[IpNetwork, ...] = ()
    """When set, connect and bandwidth probes only reach IP addresses inside these networks."""
    stop_grace_s: float = 5.0
    """Seconds between SIGTERM and SIGKILL when stopping a run."""
    max_json_body_bytes: int = MAX_JSON_BODY_BYTES
    """Body limit of the JSON routes."""
    tls: bool = False
    """Served over HTTPS only (``--tls-cert``/``--tls-key``): the bandwidth probe then sends the token to peers over HTTPS only."""
    tls_ca_file: Optional[str] = None
    """PEM bundle peer agents' certificates are verified against in the bandwidth probe (None: the system's CAs)."""

    @property
    def token_bytes(self) -> bytes:
        """The token as bytes, for constant-time comparison."""
        return self.token.encode("utf-8")
