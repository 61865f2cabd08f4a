"""Finding, loading and atomically saving ftwiz.toml (real files in a temp dir)."""

from __future__ import annotations

import os
import socket
import stat
import sys

import pytest

from shared.config import ConfigError, parse_config
from tui import config_io

COMMENTED = """\
# my cluster — keep this comment
[cluster]
name = "homelab"   # inline comment
rendezvous_port = 29500

[[nodes]]
name = "node0"
host = "192.168.1.100"  # the master
gpus = "all"

[job]
# the model
model = "meta-llama/Llama-2-7b-hf"
seq_len = 2048
"""


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A temp home and working directory with no config anywhere."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.chdir(work)
    return home, work


def test_search_order_explicit_then_cwd_then_user(isolated, tmp_path):
    home, work = isolated
    user = home / ".config" / "ftwiz" / "ftwiz.toml"
    user.parent.mkdir(parents=True)
    user.write_text(COMMENTED.replace("homelab", "from-user"))
    assert config_io.load_config().config.cluster.name == "from-user"
    (work / "ftwiz.toml").write_text(COMMENTED.replace("homelab", "from-cwd"))
    assert config_io.load_config().config.cluster.name == "from-cwd"
    explicit = tmp_path / "other.toml"
    explicit.write_text(COMMENTED.replace("homelab", "explicit"))
    loaded = config_io.load_config(str(explicit))
    assert loaded.config.cluster.name == "explicit" and loaded.path == explicit and not loaded.embedded


def test_embedded_default_is_this_machine(isolated):
    home, _ = isolated
    loaded = config_io.load_config()
    assert loaded.embedded and loaded.path is None and loaded.source == "<embedded default>"
    node = loaded.config.nodes[0]
    assert node.local and node.host == "127.0.0.1" and node.python == sys.executable
    assert node.name == config_io.default_config(hostname=socket.gethostname(), python="x").nodes[0].name
    assert loaded.config.cluster.agent_token_file == str(home / ".config" / "ftwiz" / "agent.token")


def test_missing_explicit_config_is_an_error(isolated, tmp_path):
    with pytest.raises(ConfigError) as info:
        config_io.load_config(str(tmp_path / "nope.toml"))
    assert "nope.toml" in str(info.value) and "not found" in str(info.value)
    with pytest.raises(ConfigError) as info:
        config_io.load_config(str(tmp_path))
    assert "is a directory" in str(info.value)


def test_file_errors_name_the_path(isolated, tmp_path):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[cluster]\nname = "caf\xe9"\n')
    with pytest.raises(ConfigError) as info:
        config_io.read_config(bad)
    assert str(bad) in str(info.value) and "UTF-8" in str(info.value)
    broken = tmp_path / "broken.toml"
    broken.write_text('[cluster\nname = "x"\n')
    with pytest.raises(ConfigError) as info:
        config_io.read_config(broken)
    assert str(info.value).startswith(f"{broken}:1: TOML syntax error")


def test_tilde_is_expanded(isolated):
    home, _ = isolated
    (home / "c.toml").write_text(COMMENTED)
    assert config_io.load_config("~/c.toml").path == home / "c.toml"
    assert config_io.expand_path("~/x/y") == home / "x" / "y"


def test_save_keeps_comments_and_changes_values(tmp_path):
    path = tmp_path / "ftwiz.toml"
    path.write_text(COMMENTED)
    os.chmod(path, 0o640)
    config = parse_config(COMMENTED, str(path))
    config.job.seq_len = 4096
    config.cluster.name = "renamed"
    config_io.save_config(config, path)
    text = path.read_text()
    assert "# my cluster — keep this comment" in text and "# the model" in text and "# the master" in text
    assert "seq_len = 4096" in text and 'name = "renamed"' in text
    assert "micro_batch_size" not in text  # defaults the user did not write stay out
    assert parse_config(text).job.seq_len == 4096
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["ftwiz.toml"]  # no temp file left behind


def test_save_new_file_and_round_trip(tmp_path):
    config = parse_config(COMMENTED)
    target = tmp_path / "sub" / "new.toml"
    config_io.save_config(config, target)
    again, _ = config_io.read_config(target)
    assert again == config


def test_failed_save_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ftwiz.toml"
    path.write_text(COMMENTED)
    config = parse_config(COMMENTED)
    config.job.seq_len = 8192

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(config_io.os, "replace", broken_replace)
    with pytest.raises(ConfigError) as info:
        config_io.save_config(config, path)
    assert "No space left on device" in str(info.value) and str(path) in str(info.value)
    assert path.read_text() == COMMENTED
    assert [p.name for p in tmp_path.iterdir()] == ["ftwiz.toml"]
