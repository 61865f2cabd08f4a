"""Config errors name the file, the line, the field path and the allowed values."""

from __future__ import annotations

import pytest

from shared.config import ConfigError, parse_config

NODE = '[[nodes]]\nname = "node0"\nhost = "10.0.0.1"\n'


def _error(text: str, source: str = "/etc/ftwiz/ftwiz.toml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source)
    return info.value


def test_syntax_error_names_file_and_line():
    err = _error('[cluster]\nname = "unterminated\n' + NODE)
    assert err.line == 2 and err.field is None
    assert str(err).startswith("/etc/ftwiz/ftwiz.toml:2: TOML syntax error")


def test_key_written_twice_names_the_second_line():
    err = _error('[cluster]\nname = "a"\nname = "b"\n' + NODE)
    assert err.line == 3
    assert "TOML syntax error" in str(err) and "line 3" in str(err)


def test_unknown_key_names_field_and_line():
    err = _error('[cluster]\nrendzvous_port = 29500\n' + NODE)
    assert (err.field, err.line) == ("cluster.rendzvous_port", 2)
    assert "unknown key" in err.message


@pytest.mark.parametrize(
    ("text", "field", "line", "allowed"),
    [
        (NODE + '[job]\nmethod = "qlora2"\n', "job.method", 5, "must be one of 'full', 'lora' or 'qlora' (got 'qlora2')"),
        (NODE + '[job]\nworkload = "pretrain"\n', "job.workload", 5, "must be one of 'sft', 'allreduce' or 'command'"),
        (NODE + '[job]\nprecision = "int4"\n', "job.precision", 5, "must be one of 'bf16', 'fp16' or 'fp32'"),
        (NODE + '[job]\noptimizer = "sgd"\n', "job.optimizer", 5, "'adamw', 'adamw_8bit' or 'paged_adamw_8bit'"),
        (NODE + '[nccl]\nib = "yes"\n', "nccl.ib", 5, "must be one of 'auto', 'on' or 'off' (got 'yes')"),
        (NODE + 'gpus = "some"\n', "nodes[0].gpus", 4, 'must be "all", a GPU count (0 or more) or a list of GPU indices'),
    ],
)
def test_literal_errors_list_the_allowed_values(text, field, line, allowed):
    err = _error(text)
    assert err.field == field
    assert err.line == line
    assert allowed in err.message


def test_second_node_field_path_and_line():
    err = _error(NODE + '[[nodes]]\nname = "node1"\nhost = "10.0.0.2"\nssh_port = "22a"\n')
    assert (err.field, err.line) == ("nodes[1].ssh_port", 7)
    assert "valid integer" in err.message and "'22a'" in err.message


def test_out_of_range_port():
    err = _error('[cluster]\nrendezvous_port = 70000\n' + NODE)
    assert (err.field, err.line) == ("cluster.rendezvous_port", 2)
    assert "65535" in err.message


def test_gpu_validator_messages():
    assert "a GPU count must be 0 or more" in _error(NODE + "gpus = -1\n").message
    assert "distinct and not negative" in _error(NODE + "gpus = [0, 0]\n").message


def test_missing_nodes_and_missing_host():
    err = _error('[cluster]\nname = "x"\n')
    assert err.field == "nodes" and "required but missing" in err.message
    err = _error('[[nodes]]\nname = "node0"\n')
    assert (err.field, err.line) == ("nodes[0].host", 1)


def test_nodes_must_be_an_array_of_tables():
    err = _error('[nodes]\nname = "a"\nhost = "h"\n')
    assert err.field == "nodes" and "[[nodes]]" in err.message


def test_duplicate_node_names_point_at_the_repeat():
    err = _error(NODE + NODE)
    assert (err.field, err.line) == ("nodes[1].name", 5)
    assert "repeated: node0" in err.message


def test_master_must_be_a_node():
    err = _error('[cluster]\nname = "c"\nmaster = "node9"\n' + NODE)
    assert (err.field, err.line) == ("cluster.master", 3)
    assert "nodes are: node0" in err.message


def test_bad_node_name_and_env_key():
    err = _error('[[nodes]]\nname = "my node"\nhost = "h"\n')
    assert err.field == "nodes[0].name" and "letters, digits" in err.message
    err = _error(NODE + '[nccl]\nenv = { "1BAD" = "x" }\n')
    assert err.field == "nccl.env" and "'1BAD' is not a valid environment variable name" in err.message


def test_valid_config_parses():
    config = parse_config(NODE + 'gpus = [0, 1]\n[job]\nmethod = "lora"\n')
    assert config.nodes[0].gpus == [0, 1] and config.job.method == "lora"
    assert config.master.name == "node0"


def test_balance_auto_for_your_own_code_needs_a_declared_batch():
    err = _error(NODE + '[job]\nworkload = "command"\ncommand = ["train.py"]\nbalance = "auto"\n')
    assert (err.field, err.line) == ("job.balance", 7)
    assert "declare micro_batch_size and grad_accum_steps" in err.message and 'balance = "off"' in err.message
    parse_config(NODE + '[job]\nworkload = "command"\ncommand = ["train.py"]\nbalance = "auto"\ngrad_accum_steps = 4\n', "ftwiz.toml")


def test_an_allreduce_pause_longer_than_the_stall_window_is_refused():
    err = _error(NODE + '[job]\nworkload = "allreduce"\npause_s = 30\nstall_timeout_s = 20\n')
    assert err.field == "job.pause_s" and "stall_timeout_s = 20 s" in err.message and "make pause_s shorter" in err.message
    assert parse_config(NODE + '[job]\nworkload = "allreduce"\npause_s = 0.5\n', "ftwiz.toml").job.pause_s == 0.5
