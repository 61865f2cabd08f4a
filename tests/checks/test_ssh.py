"""tui.ssh against real sshd in namespace nodes: login, argv quoting, and each failure's hint."""

from __future__ import annotations

import subprocess

import pytest

from shared.config import ClusterConfig, NodeConfig
from tui import ssh


def test_ssh_config_is_honoured(tmp_path, monkeypatch):
    key = tmp_path / "id_special"
    key.write_text("not used here")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu1\n  HostName 10.1.2.3\n  User trainer\n  Port 2200\n  IdentityFile {key}\n")
    cluster = ClusterConfig(ssh_config=str(config), known_hosts=str(tmp_path / "kh"))
    target = ssh.resolve_target(NodeConfig(name="n1", host="gpu1"), cluster)
    assert (target.hostname, target.port, target.user, target.key_files) == ("10.1.2.3", 2200, "trainer", [str(key)])
    explicit = NodeConfig(name="n1", host="gpu1", ssh_user="root", ssh_port=22, ssh_key=str(tmp_path / "mine"))
    target = ssh.resolve_target(explicit, cluster)
    assert (target.user, target.port, target.key_files[0]) == ("root", 22, str(tmp_path / "mine"))
    monkeypatch.setenv("USER", "alice")
    assert ssh.resolve_target(NodeConfig(name="n2", host="other"), cluster).user == "alice"


def test_login_and_argv_quoting(cluster3):
    config = cluster3.config()
    client = ssh.connect(config.node("node1"), config.cluster)
    try:
        tricky = ["a b", "it's", "$HOME", ";echo pwned", "`id`"]
        res = ssh.run(client, ["printf", "%s|", *tricky], timeout=10)
        assert res.ok and res.stdout == "|".join(tricky) + "|"
        res = ssh.run(client, ["pwd"], timeout=10, cwd=str(cluster3.node("node1").workdir))
        assert res.stdout.strip() == str(cluster3.node("node1").workdir)
        res = ssh.run(client, ["sh", "-c", "exit 3"], timeout=10)
        assert res.exit_status == 3 and not res.ok
        with pytest.raises(TimeoutError):
            ssh.run(client, ["sleep", "5"], timeout=0.5)
        assert client.get_transport().is_active()
    finally:
        client.close()


def test_unknown_host_key_is_refused(cluster3, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = cluster3.config(cluster={"known_hosts": str(empty)})
    node = config.node("node2")
    with pytest.raises(ssh.SshError) as info:
        ssh.connect(node, config.cluster)
    err = info.value
    assert err.kind == "unknown_host_key" and err.node == "node2"
    assert err.hint.startswith(f"ssh-keyscan -p 22 -t ed25519 {node.host} >> {empty}")
    assert empty.read_text() == ""


def test_changed_host_key_is_refused(cluster3, tmp_path):
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    node = cluster3.config().node("node0")
    known = tmp_path / "known_hosts"
    keytype, blob = (tmp_path / "other_host_key.pub").read_text().split()[:2]
    known.write_text(f"{node.host} {keytype} {blob}\n")
    with pytest.raises(ssh.SshError) as info:
        ssh.connect(node, cluster3.config(cluster={"known_hosts": str(known)}).cluster)
    assert info.value.kind == "host_key_changed" and "ssh-keygen -R" in info.value.hint


def test_key_not_authorized(cluster3, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    config = cluster3.config()
    node = config.node("node0").model_copy(update={"ssh_key": str(stranger)})
    with pytest.raises(ssh.SshError) as info:
        ssh.connect(node, config.cluster, timeout=5)
    assert info.value.kind == "auth"
    assert info.value.hint.startswith(f"ssh-copy-id -i {stranger}.pub -p 22 root@{node.host}")


def test_refused_and_missing_key_file(cluster3, tmp_path):
    config = cluster3.config()
    node = config.node("node0").model_copy(update={"ssh_port": 2222})
    with pytest.raises(ssh.SshError) as info:
        ssh.connect(node, config.cluster, timeout=5)
    assert info.value.kind == "refused" and "ssh_port" in info.value.hint
    node = config.node("node0").model_copy(update={"ssh_key": str(tmp_path / "nope")})
    with pytest.raises(ssh.SshError) as info:
        ssh.connect(node, config.cluster, timeout=5)
    assert info.value.kind == "key_file" and "ssh-keygen -t ed25519" in info.value.hint
