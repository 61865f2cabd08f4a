"""The log-line prefixes (shared/logprefix.py): what is written reads back the same."""

from __future__ import annotations

import pytest

from shared.logprefix import node_line, rank_prefix, split_node_line, split_rank


@pytest.mark.parametrize("rank", [0, 3, 127])
@pytest.mark.parametrize("text", ['{"ftwiz":"heartbeat","rank":3}', "Traceback (most recent call last):", "", "a | b [rank9]: c"])
def test_rank_prefix_round_trip(rank, text):
    assert split_rank(rank_prefix(rank) + text) == (rank, text)


@pytest.mark.parametrize("node", ["node0", "gpu-box.lan", "n_1"])
@pytest.mark.parametrize("rank", [None, 0, 12])
@pytest.mark.parametrize("text", ["step 3/10 | loss 1.2", "", "  indented", "[rank4]:inner"])
def test_node_prefix_round_trip(node, rank, text):
    assert split_node_line(node_line(node, rank, text)) == (node, rank, text)


def test_what_torch_and_others_write_around_the_rank():
    assert split_rank("[default2]:old torchrun") == (2, "old torchrun")  # before torch 2.2
    assert split_rank("[rank0]: Traceback (most recent call last):") == (0, "Traceback (most recent call last):")
    assert split_rank("[1] [rank1]:mpirun-style") == (1, "mpirun-style")
    assert split_rank("W1122 torch warning") == (None, "W1122 torch warning")
    assert split_rank("x[rank1]:not at the start") == (None, "x[rank1]:not at the start")
    assert split_node_line("node0/- |") == ("node0", None, "")  # an editor trimmed the blank
    assert split_node_line("plain line | with a bar") is None
    assert split_node_line("node 0/1 | a space in the name is not ours") is None
