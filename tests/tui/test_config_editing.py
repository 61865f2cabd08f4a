"""Node form validation, unsaved marker, atomic save that keeps comments, and quit with unsaved changes."""

from __future__ import annotations

from pathlib import Path

from shared.config import parse_config, to_toml
from tests.tui.screen_text import flat_text, screen_text
from tests.tui.waiting import wait_for
from tui.app.screens.confirm_screen import ConfirmScreen
from tui.app.screens.node_form_screen import NodeFormScreen
from tui.app.widgets.common.step_bar import StepBar


def _write_config(loopback, path: Path) -> Path:
    text = "# cluster of the wizard tests: keep this comment\n" + to_toml(loopback.config())
    path.write_text(text)
    return path


async def _fill(pilot, field: str, value: str) -> None:
    widget = pilot.app.screen.query_one(f"#node-{field}")
    widget.value = value
    await pilot.pause()


async def test_node_form_shows_schema_errors_then_adds_the_node(loopback, make_app, tmp_path):
    path = _write_config(loopback, tmp_path / "ftwiz.toml")
    config = parse_config(path.read_text(), str(path))
    app = make_app(config, path, poll_interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, NodeFormScreen), what="the node form")
        await _fill(pilot, "name", "bad name!")
        await _fill(pilot, "ssh_port", "70000")
        await pilot.press("ctrl+s")
        await pilot.pause()
        text = flat_text(app)
        assert "name: use letters, digits" in text
        assert "ssh_port: Input should be less than or equal to 65535" in text
        assert "host: required" in text
        assert isinstance(app.screen, NodeFormScreen)
        # A name already in the config is refused by the whole-config validation.
        await _fill(pilot, "name", "node0")
        await _fill(pilot, "host", "127.0.0.50")
        await _fill(pilot, "ssh_port", "")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "node names must be unique; repeated: node0" in flat_text(app)
        await _fill(pilot, "name", "node9")
        await _fill(pilot, "gpus", "0,1")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, NodeFormScreen), what="the form to close")
        assert app.config.node("node9").gpus == [0, 1]
        assert app.dirty
        assert "● unsaved" in screen_text(app)
        await wait_for(pilot, lambda: "node9" in app.cluster.nodes and app.cluster.nodes["node9"].state == "down", what="node9 polled")


async def test_save_is_atomic_and_keeps_comments(loopback, make_app, tmp_path):
    path = _write_config(loopback, tmp_path / "ftwiz.toml")
    config = parse_config(path.read_text(), str(path))
    app = make_app(config, path, poll_interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("down", "e")
        await wait_for(pilot, lambda: isinstance(app.screen, NodeFormScreen), what="the edit form")
        assert app.screen.query_one("#node-name").value == "node1"
        await _fill(pilot, "workdir", "/srv/ftwiz-node1")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not isinstance(app.screen, NodeFormScreen), what="the form to close")
        assert app.dirty and app.screen.query_one(StepBar).dirty
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not app.dirty, what="the save")
        text = path.read_text()
        assert text.startswith("# cluster of the wizard tests: keep this comment\n")
        assert parse_config(text, str(path)).node("node1").workdir == "/srv/ftwiz-node1"
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind
        assert "● unsaved" not in screen_text(app)


async def test_remove_node_asks_first(loopback, make_app, tmp_path):
    app = make_app(poll_interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("down", "down", "down", "delete")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        assert "Remove node node3" in flat_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="cancel")
        assert [n.name for n in app.config.nodes] == ["node0", "node1", "node2", "node3"]
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation again")
        await pilot.click("#remove")
        await wait_for(pilot, lambda: [n.name for n in app.config.nodes] == ["node0", "node1", "node2"], what="node3 removed")
        assert app.dirty


async def test_quit_with_unsaved_changes_asks(loopback, make_app, tmp_path):
    path = _write_config(loopback, tmp_path / "ftwiz.toml")
    config = parse_config(path.read_text(), str(path))
    app = make_app(config, path, poll_interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.remove_node("node2")
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the quit question")
        assert "unsaved changes" in flat_text(app)
        await pilot.click("#cancel")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="cancel")
        assert app.is_running
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the quit question again")
        await pilot.click("#save")
        await wait_for(pilot, lambda: not app.is_running, what="save and quit")
    assert [n.name for n in parse_config(path.read_text(), str(path)).nodes] == ["node0", "node1"]
    assert path.read_text().startswith("# cluster of the wizard tests")
    assert app.return_value == 0


async def test_quit_without_changes_does_not_ask(make_app):
    app = make_app(poll_interval=5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, what="quit")


async def test_embedded_default_saves_to_ftwiz_toml_here(loopback, make_app, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(loopback.config(), None, poll_interval=5)  # no file: the embedded default's situation
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "embedded default" in screen_text(app) and not app.dirty
        app.remove_node("node2")
        await pilot.pause()
        assert "● unsaved" in screen_text(app)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not app.dirty, what="the save")
        assert "ftwiz.toml" in screen_text(app) and "embedded default" not in screen_text(app)
    saved = parse_config((tmp_path / "ftwiz.toml").read_text(), "ftwiz.toml")
    assert [n.name for n in saved.nodes] == ["node0", "node1"]
