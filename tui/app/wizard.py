"""What the steps, the engines adapter and the state objects may use of the app: the :class:`Wizard` protocol.

The app (:class:`tui.app.app.FtwizApp`) imports the screens; the screens must not import it back. They see the
app through this protocol instead, which imports only the state types, never a screen, a widget or the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Protocol

from shared.config import FtwizConfig, NodeConfig
from tui.app.checklist_state import ChecklistState
from tui.app.cluster_state import ClusterState
from tui.app.launch_session import LaunchSession

__all__ = ["Wizard"]


class Wizard(Protocol):
    """The wizard's state and the operations a step may ask of it (the app implements it)."""

    config: FtwizConfig
    """The config being edited (always valid)."""
    config_path: Optional[Path]
    """Where the config was read from; None for the embedded default."""
    cluster: ClusterState
    """Every node's latest poll and utilisation history."""
    last_statuses: dict[str, Any]
    """The agent client's last ``{node: NodeStatus}``."""
    checks: ChecklistState
    """The last checklist run and the launch gate."""
    launch: LaunchSession
    """The run the Launch step follows."""
    engines: dict[str, Any]
    """Stand-ins for the engines, by name (tests); empty in production."""

    @property
    def client(self) -> Any:
        """The agent client for the current config."""
        ...

    def set_config(self, config: FtwizConfig, section: str) -> None:
        """Replace the config (already validated) and tell the steps."""
        ...

    def node_problem(self, node: NodeConfig, *, replacing: Optional[str]) -> Optional[str]:
        """Why ``node`` cannot go into the config, or None."""
        ...

    def put_node(self, node: NodeConfig, *, replacing: Optional[str]) -> None:
        """Add ``node``, or replace the node called ``replacing``."""
        ...

    def remove_node(self, name: str) -> None:
        """Remove the node called ``name``."""
        ...

    def poll_now(self) -> None:
        """Poll every agent at once."""
        ...

    def run_event(self, event: Any) -> None:
        """Take one launcher event (from any thread) onto the UI thread."""
        ...

    async def start_launch(self, *, resume: bool) -> None:
        """Start the job through the launcher."""
        ...

    async def stop_launch(self) -> None:
        """Ask the supervisor to stop every rank on every node."""
        ...
