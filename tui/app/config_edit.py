"""Node edits of the wizard as pure functions over a validated config (the app applies the result)."""

from __future__ import annotations

from typing import Optional

from pydantic import ValidationError

from shared.config import FtwizConfig, NodeConfig

__all__ = ["node_problem", "with_node", "without_node"]


def with_node(config: FtwizConfig, node: NodeConfig, replacing: Optional[str]) -> FtwizConfig:
    """``config`` with ``node`` added, or put in place of the node called ``replacing`` (a master follows it).

    Raises :class:`pydantic.ValidationError` when the result is not a valid config (a duplicate name, ...).
    """
    data = _dump(config)
    nodes = data["nodes"]
    fresh = node.model_dump()
    if replacing is None:
        nodes.append(fresh)
    else:
        nodes[[n["name"] for n in nodes].index(replacing)] = fresh
        if data["cluster"].get("master") == replacing:
            data["cluster"]["master"] = node.name
    return FtwizConfig.model_validate(data)


def without_node(config: FtwizConfig, name: str) -> FtwizConfig:
    """``config`` without the node called ``name`` (a master that goes with it falls back to the first node)."""
    data = _dump(config)
    data["nodes"] = [n for n in data["nodes"] if n["name"] != name]
    if data["cluster"].get("master") == name:
        data["cluster"]["master"] = None
    return FtwizConfig.model_validate(data)


def node_problem(config: FtwizConfig, node: NodeConfig, replacing: Optional[str]) -> Optional[str]:
    """Why ``node`` cannot go into ``config`` (duplicate name, master, ...), or None."""
    try:
        with_node(config, node, replacing)
    except ValidationError as exc:
        return "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
    return None


def _dump(config: FtwizConfig) -> dict:
    """``config`` as data that validates back to the same config: ``[job]`` keys never set stay unset (a command
    workload's undeclared model is not declared by a node edit)."""
    data = config.model_dump()
    data["job"] = config.job.model_dump(exclude_unset=True)
    return data
