"""SSH to the nodes with paramiko, the way ``ssh`` on the command line would, but safer.

Stable API (the checklist and the launcher both use it):

- :func:`connect` ``(node, cluster, *, timeout=None) -> paramiko.SSHClient`` — a connected,
  authenticated client with keepalive set. Raises :class:`SshError` (``node``, ``message``,
  ``hint``) for every failure a user can hit; ``hint`` is the exact fix.
- :func:`resolve_target` ``(node, cluster) -> SshTarget`` — where and as whom :func:`connect` will log
  in (after ``~/.ssh/config``), without touching the network.
- :func:`run` ``(client, argv, *, timeout, cwd=None) -> CommandResult`` — run an argv list (never a
  shell string built from unescaped input) and collect exit status and output.
- :func:`keyscan_hint` — the ``ssh-keyscan`` line that adds a node's host key.

Host keys: known hosts come from ``cluster.known_hosts`` or ``~/.ssh/known_hosts`` plus the system
file; an unknown key is *rejected* (a :class:`paramiko.RejectPolicy` subclass), never auto-added.
Users and keys: ``node.ssh_user``/``ssh_port``/``ssh_key`` win, then ``~/.ssh/config`` (HostName,
User, Port, IdentityFile, ProxyCommand), then ``$USER`` and port 22; ssh-agent and the default
``~/.ssh/id_*`` keys are tried too. A paramiko client is not shared between threads: open one per
node per thread.
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import paramiko

from shared.config import ClusterConfig, NodeConfig

__all__ = [
    "CommandResult",
    "SshError",
    "SshTarget",
    "connect",
    "keyscan_hint",
    "read_to_end",
    "resolve_target",
    "run",
]

SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


class SshError(Exception):
    """An SSH failure on one node, with the fix.

    ``node`` is the node's name, ``message`` what failed, ``hint`` the exact command or setting that
    fixes it. ``kind`` is a short machine-readable label: ``unknown_host_key``, ``host_key_changed``,
    ``auth``, ``refused``, ``timeout``, ``unresolvable``, ``key_file``, ``ssh``.
    """

    def __init__(self, node: str, message: str, hint: str, *, kind: str = "ssh"):
        self.node, self.message, self.hint, self.kind = node, message, hint, kind
        super().__init__(f"{node}: {message}")


@dataclass
class SshTarget:
    """Where :func:`connect` goes for a node, after ``~/.ssh/config`` is applied."""

    node: str
    """The node's name in ftwiz.toml."""
    hostname: str
    """The address or name actually dialled (ssh config ``HostName`` or ``node.host``)."""
    port: int
    """TCP port (``node.ssh_port``, ssh config ``Port``, else 22)."""
    user: str
    """Login user (``node.ssh_user``, ssh config ``User``, else ``$USER``)."""
    key_files: list[str] = field(default_factory=list)
    """Private key files to try, expanded (``node.ssh_key`` first, then ssh config ``IdentityFile``)."""
    known_hosts: list[str] = field(default_factory=list)
    """known_hosts files loaded (existing ones only)."""
    user_known_hosts: str = "~/.ssh/known_hosts"
    """The known_hosts file a fix should append to."""
    proxy_command: Optional[str] = None
    """ssh config ``ProxyCommand``, if any."""


@dataclass
class CommandResult:
    """Outcome of :func:`run`."""

    argv: list[str]
    """The command as run."""
    exit_status: int
    """Remote exit status (-1 when the channel closed without one)."""
    stdout: str
    """Decoded standard output."""
    stderr: str
    """Decoded standard error."""

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.exit_status == 0


class _RejectUnknown(paramiko.RejectPolicy):
    """Reject like :class:`paramiko.RejectPolicy`, but keep the offered key for the error message."""

    def __init__(self) -> None:
        self.offered: Optional[paramiko.PKey] = None
        self.hostname: Optional[str] = None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.offered, self.hostname = key, hostname
        super().missing_host_key(client, hostname, key)


def _expand(path: str) -> str:
    return os.path.expandvars(os.path.expanduser(path))


def _ssh_config(cluster: ClusterConfig) -> Optional[paramiko.SSHConfig]:
    path = _expand(cluster.ssh_config or "~/.ssh/config")
    if not os.path.isfile(path):
        return None
    try:
        return paramiko.SSHConfig.from_path(path)
    except (OSError, paramiko.ssh_exception.ConfigParseError):
        return None  # a broken ssh config should not stop ftwiz; ssh itself will complain to the user


def _default_user() -> str:
    return os.environ.get("USER") or getpass.getuser()


def resolve_target(node: NodeConfig, cluster: ClusterConfig) -> SshTarget:
    """Apply ``~/.ssh/config`` (or ``cluster.ssh_config``) to ``node``; no network access."""
    looked: dict = {}
    ssh_config = _ssh_config(cluster)
    if ssh_config is not None:
        looked = ssh_config.lookup(node.host)
    hostname = looked.get("hostname") or node.host
    port = node.ssh_port or int(looked.get("port") or 22)
    user = node.ssh_user or looked.get("user") or _default_user()
    keys: list[str] = []
    if node.ssh_key:
        keys.append(_expand(node.ssh_key))
    for key in looked.get("identityfile") or []:
        expanded = _expand(key)
        if expanded not in keys and os.path.isfile(expanded):
            keys.append(expanded)
    user_known = cluster.known_hosts or "~/.ssh/known_hosts"
    known = [p for p in (_expand(user_known), SYSTEM_KNOWN_HOSTS) if os.path.isfile(p)]
    return SshTarget(
        node=node.name,
        hostname=hostname,
        port=port,
        user=user,
        key_files=keys,
        known_hosts=known,
        user_known_hosts=user_known,
        proxy_command=looked.get("proxycommand"),
    )


def _key_type(key: Optional[paramiko.PKey]) -> str:
    name = key.get_name() if key is not None else "ssh-ed25519"
    if "ed25519" in name:
        return "ed25519"
    if "ecdsa" in name:
        return "ecdsa"
    return "rsa"


def keyscan_hint(target: SshTarget, key: Optional[paramiko.PKey] = None) -> str:
    """The command that adds ``target``'s host key to the user's known_hosts."""
    return (
        f"ssh-keyscan -p {target.port} -t {_key_type(key)} {shlex.quote(target.hostname)} >> {target.user_known_hosts}"
        " (verify the fingerprint out of band first, e.g. `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the node)"
    )


def _known_name(target: SshTarget) -> str:
    return target.hostname if target.port == 22 else f"[{target.hostname}]:{target.port}"


def connect(node: NodeConfig, cluster: ClusterConfig, *, timeout: Optional[float] = None) -> paramiko.SSHClient:
    """Open an authenticated SSH connection to ``node``; raise :class:`SshError` with a hint on failure.

    ``timeout`` defaults to ``cluster.ssh_connect_timeout_s`` and bounds the TCP connect, the banner
    and authentication. Keepalive is set to ``cluster.ssh_keepalive_s`` so a cut link is noticed. The
    caller closes the client.
    """
    target = resolve_target(node, cluster)
    timeout = cluster.ssh_connect_timeout_s if timeout is None else timeout
    for key in target.key_files[:1] if node.ssh_key else []:
        if not os.path.isfile(key):
            raise SshError(
                node.name,
                f"ssh_key {node.ssh_key} not found",
                f"fix ssh_key in [[nodes]] {node.name}, or create one: ssh-keygen -t ed25519 -f {node.ssh_key}",
                kind="key_file",
            )
    client = paramiko.SSHClient()
    for path in target.known_hosts:
        try:
            client.load_system_host_keys(path)  # system keys are never written back
        except (OSError, paramiko.SSHException) as exc:
            raise SshError(node.name, f"cannot read known_hosts {path}: {exc}", f"fix or remove the bad line in {path}", kind="ssh") from None
    policy = _RejectUnknown()
    client.set_missing_host_key_policy(policy)
    sock = paramiko.ProxyCommand(target.proxy_command) if target.proxy_command else None
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            key_filename=target.key_files or None,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=True,
            look_for_keys=True,
            sock=sock,
        )
    except BaseException as exc:
        client.close()
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise _explain(exc, node, target, policy) from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(max(1, round(cluster.ssh_keepalive_s)))
    return client


def _explain(exc: BaseException, node: NodeConfig, target: SshTarget, policy: _RejectUnknown) -> SshError:
    """Map a paramiko/socket exception to an :class:`SshError` with the exact fix."""
    where = f"{target.user}@{target.hostname}:{target.port}"
    if policy.offered is not None:
        key = policy.offered
        return SshError(
            node.name,
            f"unknown SSH host key for {_known_name(target)} ({key.get_name()} {key.fingerprint}); refusing to connect",
            keyscan_hint(target, key),
            kind="unknown_host_key",
        )
    if isinstance(exc, paramiko.BadHostKeyException):
        return SshError(
            node.name,
            f"SSH host key of {_known_name(target)} CHANGED (got {exc.key.get_name()} {exc.key.fingerprint}); "
            "this can be a reinstalled node or an attack",
            f"verify the new fingerprint out of band, then: ssh-keygen -R '{_known_name(target)}' -f {target.user_known_hosts} && "
            + keyscan_hint(target, exc.key),
            kind="host_key_changed",
        )
    if isinstance(exc, paramiko.PasswordRequiredException):
        key = target.key_files[0] if target.key_files else "your key"
        return SshError(node.name, f"the private key {key} is encrypted", f"load it into ssh-agent: ssh-add {key}", kind="auth")
    if isinstance(exc, paramiko.AuthenticationException):
        pub = f"{target.key_files[0]}.pub" if target.key_files else "~/.ssh/id_ed25519.pub"
        return SshError(
            node.name,
            f"SSH authentication failed for {where} (tried ssh-agent and keys: {', '.join(target.key_files) or 'defaults'})",
            f"ssh-copy-id -i {pub} -p {target.port} {target.user}@{target.hostname}, or set ssh_user/ssh_key for "
            f"{node.name} in ftwiz.toml",
            kind="auth",
        )
    if isinstance(exc, socket.gaierror):
        return SshError(
            node.name,
            f"cannot resolve {target.hostname!r}: {exc.strerror or exc}",
            f"fix host for {node.name} in ftwiz.toml (or HostName in ~/.ssh/config)",
            kind="unresolvable",
        )
    if isinstance(exc, (socket.timeout, TimeoutError)) or "timed out" in str(exc).lower():
        return SshError(
            node.name,
            f"SSH connection to {where} timed out",
            f"check the node is up and port {target.port} is open from here: nc -vz {shlex.quote(target.hostname)} {target.port}",
            kind="timeout",
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) or isinstance(exc, ConnectionRefusedError):
        return SshError(
            node.name,
            f"SSH connection to {target.hostname}:{target.port} refused",
            f"start sshd on {node.name} (sudo systemctl start ssh) or fix ssh_port in ftwiz.toml",
            kind="refused",
        )
    if isinstance(exc, OSError):
        return SshError(
            node.name,
            f"cannot reach {target.hostname}:{target.port}: {exc.strerror or exc}",
            f"check the network path to {target.hostname}: nc -vz {shlex.quote(target.hostname)} {target.port}",
            kind="refused",
        )
    return SshError(node.name, f"SSH to {where} failed: {exc}", f"try by hand: ssh -p {target.port} {target.user}@{target.hostname}", kind="ssh")


def run(
    client: paramiko.SSHClient,
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Optional[str] = None,
) -> CommandResult:
    """Run ``argv`` on the node through the login shell, every word quoted; wait at most ``timeout`` s.

    ``cwd`` is entered first (``~`` expands on the node, the rest is quoted). Raises :class:`TimeoutError`
    when the command does not finish in time.
    """
    command = shlex.join(list(argv))
    if cwd:
        command = f"cd {_quote_home(cwd)} && {command}"
    channel = client.get_transport().open_session(timeout=timeout)
    try:
        channel.exec_command(command)
        channel.shutdown_write()
        status, out, err = read_to_end(channel, timeout=timeout, what=f"command {command}")
    finally:
        channel.close()
    return CommandResult(argv=list(argv), exit_status=status, stdout=out, stderr=err)


OUTPUT_END_GRACE_S = 5.0
"""How long the output may still come after the exit status (see :func:`read_to_end`)."""


def read_to_end(channel: paramiko.Channel, *, timeout: float, what: str) -> tuple[int, str, str]:
    """Drain a started command's stdout and stderr until it has exited and its output has ended; return
    ``(exit status, stdout, stderr)`` (status -1 when the channel closed without one). Raises
    :class:`TimeoutError` naming ``what`` when the command has not exited within ``timeout`` s.

    The exit status is not the end of the output: sshd sends it when the command exits, and what the command
    wrote last may still be in its pipe, or not yet decrypted by paramiko's transport thread (a checklist path
    test on a loaded host once read two of its three lines). The end is the channel's EOF. A command that left a
    child holding its output sends none until that child exits: after the status, the output gets
    :data:`OUTPUT_END_GRACE_S` more, never past the deadline. Both streams drain while waiting, so a chatty command
    never blocks on a full window.
    """
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout
    exited_at: Optional[float] = None
    while True:
        while channel.recv_ready():
            out += channel.recv(65536)
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        now = time.monotonic()
        if exited_at is None and channel.exit_status_ready():
            exited_at = now
        if exited_at is not None and not channel.recv_ready() and not channel.recv_stderr_ready():
            if channel.eof_received or channel.closed or now > min(deadline, exited_at + OUTPUT_END_GRACE_S):
                break
        elif now > deadline:
            raise TimeoutError(f"{what} did not finish in {timeout:g} s")
        time.sleep(0.01)
    return channel.recv_exit_status(), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _quote_home(path: str) -> str:
    """Quote ``path`` for a POSIX shell but let a leading ``~/`` expand to the remote home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)
