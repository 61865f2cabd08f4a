"""OpenSSH pieces for namespace nodes: keys, a per-node ``sshd_config``, known_hosts lines."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

from tests.cluster.netns import ClusterError

__all__ = ["SSHD", "generate_keys", "sshd_config_text", "known_hosts_line", "ssh_client_options"]

#: The OpenSSH server binary (openssh-server from apt).
SSHD = "/usr/sbin/sshd"


def generate_keys(paths: Sequence[Path], comment: str = "ftwiz-test") -> None:
    """Create an ed25519 key pair (no passphrase) at each path, all ``ssh-keygen`` runs at once."""
    procs = []
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
        try:
            procs.append((path, subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        except FileNotFoundError:
            raise ClusterError("ssh-keygen not found: apt-get install openssh-client") from None
    for path, proc in procs:
        out, _ = proc.communicate(timeout=30)
        if proc.returncode != 0:
            raise ClusterError(f"ssh-keygen for {path} failed: {out.strip()}")


def sshd_config_text(*, port: int, host_key: Path, pid_file: Path, authorized_keys: Path) -> str:
    """An ``sshd_config`` for one node: root by key only, no PAM, its own host key and pid file."""
    return "\n".join([
        # All addresses of the namespace: eth0 and its loopback.
        "ListenAddress 0.0.0.0",
        f"Port {port}",
        f"HostKey {host_key}",
        f"PidFile {pid_file}",
        f"AuthorizedKeysFile {authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        # The key files live under /tmp, whose modes sshd's strict checks reject.
        "StrictModes no",
        "UseDNS no",
        # Launchers open several sessions per node at once; the defaults (10:30:100) would drop some.
        "MaxStartups 200",
        "MaxSessions 100",
        "PrintMotd no",
        "AcceptEnv LANG LC_* FTWIZ_*",
        "Subsystem sftp /usr/lib/openssh/sftp-server",
        "LogLevel INFO",
        "",
    ])


def known_hosts_line(address: str, port: int, host_pubkey: Path) -> str:
    """The known_hosts entry for a node: ``ADDR ssh-ed25519 AAAA...`` (``[ADDR]:PORT`` off port 22)."""
    keytype, blob = host_pubkey.read_text().split()[:2]
    host = address if port == 22 else f"[{address}]:{port}"
    return f"{host} {keytype} {blob}"


def ssh_client_options(key: Path, known_hosts: Path, *, connect_timeout_s: float = 5.0) -> list[str]:
    """``ssh`` options that use only the test key and known_hosts and never prompt or add host keys."""
    return [
        "-F", "/dev/null",
        "-i", str(key),
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={max(1, int(connect_timeout_s))}",
        "-o", "LogLevel=ERROR",
    ]
