"""Step 1, Cluster: every node's live state, the selected node's detail, and node editing."""

from __future__ import annotations

from typing import ClassVar, Optional

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer

from shared.config import NodeConfig
from tui.app.messages import ClusterUpdated, ConfigChanged
from tui.app.render import Palette
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.node_form_screen import NodeFormScreen
from tui.app.screens.step_screen import StepScreen
from tui.app.widgets.cluster.node_detail import NodeDetail
from tui.app.widgets.cluster.node_table import NodeTable
from tui.app.widgets.common.step_bar import StepBar

__all__ = ["ClusterScreen"]


class ClusterScreen(StepScreen):
    """Node rows refreshed from every poll; a form to add, edit and remove nodes."""

    STEP = "cluster"
    CSS_PATH = "cluster_screen.tcss"
    AUTO_FOCUS = "#node-table"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "add_node", "Add node"),
        Binding("e", "edit_node", "Edit node"),
        Binding("delete,x", "remove_node", "Remove node"),
        Binding("r", "refresh", "Refresh now"),
        Binding("ctrl+n", "goto_next", "Job ›"),
    ]

    def compose(self) -> ComposeResult:
        yield StepBar(self.STEP)
        yield NodeTable(id="node-table")
        yield NodeDetail(id="node-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()

    def on_cluster_updated(self, message: ClusterUpdated) -> None:
        self.redraw()

    def on_config_changed(self, message: ConfigChanged) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Draw the table and the selected node's detail from ``app.cluster``."""
        palette = Palette.from_app(self.app)
        table = self.query_one(NodeTable)
        table.show(self.wizard.cluster, palette)
        self._show_detail(table.selected_name)

    def _show_detail(self, name: Optional[str]) -> None:
        view = self.wizard.cluster.nodes.get(name) if name else None
        self.query_one(NodeDetail).show(view, Palette.from_app(self.app))

    @on(NodeTable.Highlighted)
    def _row_highlighted(self, event: NodeTable.Highlighted) -> None:
        self._show_detail(event.name)

    def action_refresh(self) -> None:
        """Poll every agent now rather than at the next tick."""
        self.wizard.poll_now()

    def _selected_node(self) -> Optional[NodeConfig]:
        name = self.query_one(NodeTable).selected_name
        try:
            return self.wizard.config.node(name) if name else None
        except KeyError:
            return None

    @work(exclusive=True, group="node-form")
    async def action_add_node(self) -> None:
        """Open the node form empty; the new node is appended."""
        node = await self.app.push_screen_wait(NodeFormScreen(None, lambda n: self.wizard.node_problem(n, replacing=None)))
        if node is not None:
            self.wizard.put_node(node, replacing=None)
            self.notify(f"Added {node.name}. Ctrl+S saves ftwiz.toml.")

    @work(exclusive=True, group="node-form")
    async def action_edit_node(self) -> None:
        """Open the node form on the selected node."""
        current = self._selected_node()
        if current is None:
            self.notify("Select a node first.", severity="warning")
            return
        node = await self.app.push_screen_wait(NodeFormScreen(current, lambda n: self.wizard.node_problem(n, replacing=current.name)))
        if node is not None:
            self.wizard.put_node(node, replacing=current.name)

    @work(exclusive=True, group="node-form")
    async def action_remove_node(self) -> None:
        """Remove the selected node after a confirmation."""
        current = self._selected_node()
        if current is None:
            self.notify("Select a node first.", severity="warning")
            return
        if len(self.wizard.config.nodes) == 1:
            self.notify("A cluster needs at least one node: add another before removing this one.", severity="warning")
            return
        answer = await self.app.push_screen_wait(ConfirmScreen(
            f"Remove node {current.name} ({current.host}) from the config?",
            [("remove", "Remove", "error"), ("cancel", "Cancel", "default")], title="Remove node"))
        if answer == "remove":
            self.wizard.remove_node(current.name)
