"""The full mesh kept between checklist runs: one JSON file per cluster under the user's cache dir.

``$XDG_CACHE_HOME/ftwiz/mesh/<cluster>-<key>.json`` (``~/.cache`` without it). The key is a hash of
what the figures depend on: each node's name, address and agent port, and the NCCL interface its agent
reports with that interface's link speed. Change any of them (a node re-cabled to a 10G port, another
interface chosen, a node added) and the old matrix no longer applies: the next check measures the full
mesh again. Saves are atomic (temp file, then ``os.replace``); an unreadable file counts as no cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Optional

from shared import netplan
from shared.config import FtwizConfig
from shared.meshplan import MeshMatrix
from shared.models import NodeReport

__all__ = ["MAX_AGE_S", "cache_dir", "cache_path", "load", "mesh_key", "save"]

MAX_AGE_S = 24 * 3600.0
"""A cached full matrix older than this (option ``mesh_max_age_s``) is measured again. A day: cabling and
switch ports rarely change within one, and what does change (a node or link gone slow) the quick pass of
every check catches by itself."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ftwiz/mesh`` (``~/.cache/ftwiz/mesh`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ftwiz" / "mesh"


def mesh_key(config: FtwizConfig, reports: dict[str, NodeReport]) -> str:
    """A short hash of the nodes' names, addresses, agent ports, NCCL interfaces and their link speeds."""
    plan = netplan.resolve_interfaces(config, reports)
    parts = []
    for node in config.nodes:
        chosen = plan.nodes.get(node.name)
        ifname = chosen.ifname if chosen is not None else None
        report = reports.get(node.name)
        nic = next((n for n in report.nics if n.name == ifname), None) if report is not None and ifname else None
        parts.append([node.name, node.host, config.agent_port(node), ifname, nic.speed_mbps if nic is not None else None])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_path(config: FtwizConfig, key: str) -> Path:
    """Where the cluster's matrix for ``key`` lives."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", config.cluster.name or "cluster")[:64]
    return cache_dir() / f"{name}-{key}.json"


def load(config: FtwizConfig, key: str) -> Optional[MeshMatrix]:
    """The cached matrix for ``key``, or None when there is none or it cannot be read."""
    try:
        return MeshMatrix.model_validate_json(cache_path(config, key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def save(config: FtwizConfig, key: str, mesh: MeshMatrix) -> Optional[str]:
    """Write ``mesh`` atomically; returns why it could not be written (None when it was)."""
    path = cache_path(config, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(mesh.model_dump_json())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as error:
        return f"cannot write {path}: {error.strerror or error}"
    return None
