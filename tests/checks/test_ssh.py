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


class ScriptedChannel:
    """A paramiko channel whose events come in a scripted order, one per ``recv_ready`` poll: ``("status", code)``,
    ``("out", bytes)``, ``("err", bytes)``, ``("eof",)``, ``("idle",)`` (nothing yet); polls past the script change
    nothing."""

    def __init__(self, *steps: tuple) -> None:
        self.steps, self.status, self.eof_received, self.closed = list(steps), None, False, False
        self.out, self.err = bytearray(), bytearray()

    def _advance(self) -> None:
        if self.steps:
            kind, *value = self.steps.pop(0)
            if kind == "status":
                self.status = value[0]
            elif kind == "eof":
                self.eof_received = True
            elif kind != "idle":
                (self.out if kind == "out" else self.err).extend(value[0])

    def recv_ready(self) -> bool:
        self._advance()  # time passes between polls: the transport thread delivers the next event
        return bool(self.out)

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv(self, n: int) -> bytes:
        data, self.out[:] = bytes(self.out[:n]), self.out[n:]
        return data

    def recv_stderr(self, n: int) -> bytes:
        data, self.err[:] = bytes(self.err[:n]), self.err[n:]
        return data

    def exit_status_ready(self) -> bool:
        return self.status is not None

    def recv_exit_status(self) -> int:
        return -1 if self.status is None else self.status


def test_output_that_comes_after_the_exit_status_is_read_to_its_end():
    """sshd can send the exit status before the command's last output: the end is the EOF, not the status."""
    channel = ScriptedChannel(("out", b"1\n"), ("status", 0), ("idle",), ("out", b"0\n"), ("err", b"warn\n"), ("idle",),
                              ("out", b"1\n"), ("eof",))
    assert ssh.read_to_end(channel, timeout=30, what="test") == (0, "1\n0\n1\n", "warn\n")


def test_a_child_holding_the_output_gets_a_grace_then_the_status_stands(monkeypatch):
    monkeypatch.setattr(ssh, "OUTPUT_END_GRACE_S", 0.05)
    channel = ScriptedChannel(("out", b"started\n"), ("status", 0))  # no EOF: a daemon it started holds stdout
    assert ssh.read_to_end(channel, timeout=30, what="test") == (0, "started\n", "")


def test_a_command_that_never_exits_times_out_naming_it():
    with pytest.raises(TimeoutError, match="command x did not finish in 0.05 s"):
        ssh.read_to_end(ScriptedChannel(("out", b"busy\n")), timeout=0.05, what="command x")
