"""How the controller talks to one node: over SSH (paramiko) or, for the local node, as subprocesses.

Both links take *shell command strings* that the caller built from quoted pieces only
(:mod:`tui.launch.plan`), run them through the node's shell, and offer the same three operations:
:meth:`exec` (run, collect), :meth:`stream` (a long-running command read line by line with a
timeout, whose stdin the caller may write: that is how the job files travel, see
:func:`nodeside.helper.cmd_launch`) and :meth:`close`. No SFTP: one exec per node carries the
upload, the start and the log stream, and works where an sshd has no sftp subsystem.
A link belongs to the thread that created it; nothing here is shared across threads.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Optional, Protocol

from shared.config import ClusterConfig, NodeConfig

__all__ = ["ExecResult", "LineStream", "LinkLost", "LocalLink", "NodeGone", "NodeLink", "ProcessLines", "SshLink", "open_link"]


class LinkLost(Exception):
    """The node stopped answering (channel or transport closed, or the command could not start)."""


class NodeGone(LinkLost):
    """The transport knows nothing of the run can be left on the node: its allocation ended (a Slurm job
    that is over has had every process killed by Slurm). Stopping there is done, not retried."""


@dataclass
class ExecResult:
    """A finished command."""

    status: int
    """Exit status (-1 when none came back)."""
    stdout: str
    """Decoded standard output."""
    stderr: str
    """Decoded standard error."""


class LineStream(Protocol):
    """Lines from a long-running command."""

    def readline(self, timeout: float) -> Optional[str]:
        """The next line without its newline; ``None`` when none arrived within ``timeout``.

        Raises :class:`EOFError` when the command ended and every line was read.
        """

    def send(self, data: bytes) -> None:
        """Write ``data`` to the command's stdin."""

    def close(self) -> None:
        """Stop reading and end the command's channel (never the run itself)."""


class NodeLink(Protocol):
    """One node, reachable."""

    node: str

    def exec(self, command: str, *, timeout: float) -> ExecResult:
        """Run a shell command and wait at most ``timeout`` s (TimeoutError beyond; LinkLost when gone)."""

    def stream(self, command: str) -> LineStream:
        """Start a long-running shell command whose stdout is read line by line."""

    def close(self) -> None:
        """Release the connection."""


# ------------------------------------------------------------------------------------------- SSH


class _ChannelLines:
    def __init__(self, channel) -> None:
        self._channel = channel
        self._buffer = b""
        self._eof = False

    def readline(self, timeout: float) -> Optional[str]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self._eof:
                if self._buffer:
                    line, self._buffer = self._buffer, b""
                    return line.decode("utf-8", "replace")
                raise EOFError
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._channel.settimeout(min(remaining, 0.5))
            try:
                chunk = self._channel.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:  # socket.timeout is TimeoutError; anything else means the transport died
                if "timed out" in str(exc):
                    continue
                self._eof = True
                continue
            if not chunk:
                self._eof = True
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def send(self, data: bytes) -> None:
        try:
            self._channel.sendall(data)
        except Exception as exc:
            raise LinkLost(f"cannot send to the node: {exc}") from None

    def close(self) -> None:
        try:
            self._channel.close()
        except Exception:
            pass


TRANSPORT_END_S = 2.0
"""How long a channel closed without an exit status waits for its transport to say whether it is ending."""


def _ending(transport) -> bool:
    """Whether ``transport`` is going away, for a channel that closed without an exit status.

    That happens two ways: the command was killed by a signal (sshd sends ``exit-signal``, which paramiko does not
    read: status -1, the connection stays), or the connection died. paramiko's transport thread closes its channels
    first and marks itself inactive just after, so a dead connection becomes visible here within moments.
    """
    deadline = time.monotonic() + TRANSPORT_END_S
    while transport.is_active():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class SshLink:
    """A node over one paramiko client, opened with :func:`tui.ssh.connect`."""

    def __init__(self, node: NodeConfig, cluster: ClusterConfig, *, timeout: Optional[float] = None) -> None:
        from tui.ssh import connect  # deferred: paramiko is slow to import and the CLI's --help must stay fast

        self.node = node.name
        self._client = connect(node, cluster, timeout=timeout)
        self._timeout = cluster.ssh_connect_timeout_s

    def _transport(self):
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise LinkLost(f"{self.node}: SSH connection closed")
        return transport

    def exec(self, command: str, *, timeout: float) -> ExecResult:
        transport = self._transport()
        try:
            channel = transport.open_session(timeout=min(timeout, self._timeout))
        except Exception as exc:
            raise LinkLost(f"{self.node}: cannot open an SSH channel: {exc}") from None
        from tui.ssh import read_to_end

        try:
            channel.exec_command(command)
            channel.shutdown_write()
            status, out, err = read_to_end(channel, timeout=timeout, what=f"{self.node}: command")  # -1: closed without a status
        finally:
            channel.close()
        if status == -1 and _ending(transport):
            raise LinkLost(f"{self.node}: the SSH connection closed during the command")
        return ExecResult(status, out, err)

    def stream(self, command: str) -> LineStream:
        try:
            channel = self._transport().open_session(timeout=self._timeout)
            channel.exec_command(command)
        except LinkLost:
            raise
        except Exception as exc:
            raise LinkLost(f"{self.node}: cannot start streaming: {exc}") from None
        return _ChannelLines(channel)

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:
            pass


# ------------------------------------------------------------------------------------------- local


class ProcessLines:
    """A subprocess as a :class:`LineStream`: its stdout read line by line by a thread, its stdin to send to.

    ``what`` names the process in errors ("the local helper", "the job step"); ``close`` gives it
    ``close_grace_s`` after SIGTERM before SIGKILL.
    """

    def __init__(self, proc: subprocess.Popen, *, what: str = "the local helper", close_grace_s: float = 3.0) -> None:
        self._proc = proc
        self._what = what
        self._close_grace_s = close_grace_s
        self._lines: list[bytes] = []
        self._eof = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._pump, daemon=True, name="ftwiz-process-stream")
        self._reader.start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            with self._cond:
                self._lines.append(raw)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def readline(self, timeout: float) -> Optional[str]:
        with self._cond:
            if not self._lines and not self._eof:
                self._cond.wait(timeout)
            if self._lines:
                return self._lines.pop(0).rstrip(b"\n").decode("utf-8", "replace")
            if self._eof:
                raise EOFError
            return None

    def send(self, data: bytes) -> None:
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise LinkLost(f"cannot send to {self._what}: {exc}") from None

    def close(self) -> None:
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(self._close_grace_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()


class LocalLink:
    """The local node (``local = true``): the same commands as subprocesses, no SSH."""

    def __init__(self, node: NodeConfig) -> None:
        self.node = node.name

    def exec(self, command: str, *, timeout: float) -> ExecResult:
        try:
            done = subprocess.run(["sh", "-c", command], capture_output=True, timeout=timeout, start_new_session=True, check=False)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.node}: command did not finish within {timeout:g} s") from None
        return ExecResult(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))

    def stream(self, command: str) -> LineStream:
        proc = subprocess.Popen(
            ["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
        )
        return ProcessLines(proc)

    def close(self) -> None:
        pass


def open_link(node: NodeConfig, cluster: ClusterConfig, *, timeout: Optional[float] = None) -> NodeLink:
    """A link to ``node``: local subprocesses for ``local = true``, SSH otherwise (raises ``SshError``)."""
    if node.local:
        return LocalLink(node)
    return SshLink(node, cluster, timeout=timeout)

