"""Cluster step with real agents on loopback: rows, states, detail, navigation, help."""

from __future__ import annotations

from tests.tui.agents import AGENT_PORT
from tests.tui.screen_text import flat_text, screen_text
from tests.tui.waiting import wait_for
from tui.app.screens.cluster_screen import ClusterScreen
from tui.app.screens.help_screen import HelpScreen
from tui.app.widgets.cluster.node_detail import NodeDetail
from tui.app.widgets.cluster.node_table import NodeTable


async def test_rows_show_each_node_state_and_gpus(make_app):
    app = make_app(poll_interval=0.5)
    async with app.run_test(size=(100, 32)) as pilot:
        expected = {"node0": "up", "node1": "up", "node2": "up", "node3": "down"}
        await wait_for(pilot, lambda: {name: view.state for name, view in app.cluster.nodes.items()} == expected, what=f"states {expected}")
        assert isinstance(app.screen, ClusterScreen)
        await wait_for(pilot, lambda: "8× H100" in screen_text(app) and "1× RTX 4090" in screen_text(app), what="the GPU rows drawn")
        text = screen_text(app)
        assert "no GPU (" in text  # node2: this machine, no NVIDIA driver
        assert "✖ down" in text and "no answer" in text


async def test_gpu_less_node_detail_names_the_nvml_error(make_app):
    app = make_app(poll_interval=0.5)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_for(pilot, lambda: app.cluster.nodes["node2"].report is not None, what="node2's report")
        await pilot.press("down", "down")
        await pilot.pause()
        assert app.screen.query_one(NodeTable).selected_name == "node2"
        nvml_error = app.cluster.nodes["node2"].report.nvml_error
        assert nvml_error
        assert f"no GPU ({' '.join(nvml_error.split())[:30]}" in flat_text(app)


async def test_down_node_detail_gives_reason_and_fix(make_app):
    app = make_app(poll_interval=0.5)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_for(pilot, lambda: app.cluster.nodes["node3"].state == "down", what="node3 down")
        await pilot.press("down", "down", "down")
        await pilot.pause()
        body = flat_text(app)
        assert "DOWN:" in body and f"http://127.0.0.40:{AGENT_PORT}" in body and "start the agent on node3" in body


async def test_function_keys_move_between_steps_and_help_lists_keys(make_app):
    app = make_app(poll_interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        for key, name in (("f3", "JobScreen"), ("f4", "ChecklistScreen"), ("f5", "LaunchScreen"), ("f2", "ClusterScreen")):
            await pilot.press(key)
            await wait_for(pilot, lambda: type(app.screen).__name__ == name, what=name, timeout=10)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "JobScreen", what="ctrl+n to Job", timeout=10)
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ClusterScreen", what="ctrl+b back", timeout=10)
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), what="help", timeout=10)
        text = screen_text(app)
        for needle in ("F2", "Go to the Cluster step", "Add node", "Remove node", "Save", "Quit"):
            assert needle in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ClusterScreen), what="help closed", timeout=10)


async def test_node_going_down_turns_its_row_red_without_crashing(loopback, tmp_path, make_app):
    from tests.tui.agents import start_agents

    extra = start_agents(tmp_path / "extra", [("spare", "127.0.0.21", "rtx4090-1x")])
    try:
        config = loopback.config()
        data = config.model_dump()
        data["nodes"].append({"name": "spare", "host": "127.0.0.21", "workdir": str(tmp_path / "spare")})
        data["cluster"]["agent_token_file"] = str(extra.token_path)
        from shared.config import FtwizConfig

        app = make_app(FtwizConfig.model_validate(data), poll_interval=0.3)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.cluster.nodes["spare"].state == "up", what="spare up")
            table = app.screen.query_one(NodeTable)
            table.cursor_row = list(app.cluster.nodes).index("spare")
            body = app.screen.query_one(NodeDetail).query_one("#detail-body")
            await wait_for(pilot, lambda: "spare · 127.0.0.21" in screen_text(app), what="spare's detail")
            await pilot.pause(0.7)  # a refresh or two with the same number of lines: no layout pass needed
            lines_up = body.size.height
            extra.agents[0].stop()
            await wait_for(pilot, lambda: app.cluster.nodes["spare"].state == "down", what="spare down")
            # Going down adds the reason (wrapped) above the last values: the pane must grow (a layout pass), not clip.
            await wait_for(pilot, lambda: body.size.height > lines_up + 1, what=f"the detail to grow from {lines_up} lines")
            assert "Last values reported before it stopped answering" in flat_text(app)
            row = app.screen.query_one(NodeTable).row_text("spare")
            assert "✖ down" in row.plain and "no answer" in row.plain
            red = str(app.current_theme.error).lower()
            styled = {row.plain[span.start:span.end].strip(): str(span.style).lower() for span in row.spans}
            assert red in styled["spare"] and red in styled["✖ down"]  # the row is red, not just a word in it
            await pilot.pause(1.0)  # a few more polls with the node down: still no crash
            assert app.is_running
    finally:
        extra.close()
