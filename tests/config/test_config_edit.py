"""The wizard's node edits (tui/app/config_edit.py): pure functions over a validated config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.config import NodeConfig, parse_config
from tui.app.config_edit import node_problem, with_node, without_node

TWO_NODES = """\
[cluster]
name = "lab"
master = "a"

[[nodes]]
name = "a"
host = "10.0.0.1"

[[nodes]]
name = "b"
host = "10.0.0.2"
"""


def test_add_replace_and_remove_keep_the_master_consistent():
    config = parse_config(TWO_NODES)
    added = with_node(config, NodeConfig(name="c", host="10.0.0.3"), None)
    assert [n.name for n in added.nodes] == ["a", "b", "c"]
    renamed = with_node(config, NodeConfig(name="a2", host="10.0.0.9"), "a")
    assert [n.name for n in renamed.nodes] == ["a2", "b"] and renamed.cluster.master == "a2"
    removed = without_node(config, "a")
    assert [n.name for n in removed.nodes] == ["b"] and removed.cluster.master is None
    assert [n.name for n in config.nodes] == ["a", "b"], "the original config is never changed"


def test_a_duplicate_name_is_a_problem_named_for_the_form():
    config = parse_config(TWO_NODES)
    problem = node_problem(config, NodeConfig(name="b", host="10.0.0.7"), None)
    assert problem is not None and "b" in problem and not problem.startswith("Value error")
    assert node_problem(config, NodeConfig(name="b", host="10.0.0.7"), "b") is None
    with pytest.raises(ValidationError):
        with_node(config, NodeConfig(name="b", host="10.0.0.7"), None)
