"""``ftwiz-agent``: serve the node agent (default), or create a token file.

    ftwiz-agent [serve] --token-file F [--host H] [--port 8462] [--node-name N] [--python PY]
                        [--disk-path D ...] [--interval S] [--log-level L] [--gpu-fixture PATH]
    ftwiz-agent token PATH [--force]
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence, cast

if TYPE_CHECKING:
    import asyncio

from shared.version import __version__

from .settings import DEFAULT_PORT, AgentSettings
from .tokens import TokenError, create_token_file, read_token_file

__all__ = ["main", "build_serve_parser", "build_token_parser"]

EXIT_USAGE = 2
DEFAULT_TOKEN_FILE = "~/.config/ftwiz/agent.token"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``ftwiz-agent`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "token":
        return _token(build_token_parser().parse_args(args[1:]))
    if args and args[0] == "serve":
        args = args[1:]
    return _serve(build_serve_parser().parse_args(args))


def build_serve_parser() -> argparse.ArgumentParser:
    """Options of ``ftwiz-agent [serve]``."""
    parser = argparse.ArgumentParser(
        prog="ftwiz-agent",
        description="ftwiz node agent: reports GPU, host, network and software health over token-authenticated HTTP.",
        epilog="Create a token file first with: ftwiz-agent token PATH (copy the same file to every node).",
    )
    parser.add_argument("--version", action="version", version=f"ftwiz-agent {__version__}")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all IPv4 addresses)")
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"TCP port (default: {DEFAULT_PORT})")
    parser.add_argument("--token-file", default=DEFAULT_TOKEN_FILE, help=f"file holding the shared token, mode 0600 (default: {DEFAULT_TOKEN_FILE})")
    parser.add_argument("--node-name", default=None, help="this node's name in the cluster config (default: the hostname)")
    parser.add_argument("--python", default=sys.executable, help="training interpreter whose versions are reported (default: the agent's own)")
    parser.add_argument("--disk-path", action="append", default=None, metavar="PATH", help="report free space here; repeatable (default: home directory)")
    parser.add_argument("--interval", type=_positive_float, default=1.0, metavar="SECONDS", help="seconds between hardware samples (default: 1.0)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info", type=str.lower, help="log level (default: info)")
    parser.add_argument("--gpu-fixture", type=Path, default=None, metavar="PATH", help="serve GPUs from a constructed NVML fixture (GPU-less tests and demos)")
    parser.add_argument(
        "--probe-allow", action="append", type=_network, default=None, metavar="CIDR",
        help="connect/bandwidth probes only reach IP addresses in these networks; repeatable (default: anywhere)",
    )
    parser.add_argument("--stop-grace", type=_positive_float, default=5.0, metavar="SECONDS", help="SIGTERM-to-SIGKILL grace when stopping a run (default: 5)")
    parser.add_argument("--tls-cert", default=None, metavar="PATH",
                        help="serve HTTPS only, with this PEM certificate (chain); needs --tls-key (installers/install-agent.sh --tls makes one)")
    parser.add_argument("--tls-key", default=None, metavar="PATH", help="the certificate's private key (PEM, mode 0600)")
    parser.add_argument("--tls-ca", default=None, metavar="PATH",
                        help="PEM bundle to verify peer agents against in bandwidth probes (default: the system's CAs)")
    return parser


def build_token_parser() -> argparse.ArgumentParser:
    """Options of ``ftwiz-agent token``."""
    parser = argparse.ArgumentParser(prog="ftwiz-agent token", description="Create a random agent token file with mode 0600.")
    parser.add_argument("path", help="where to write the token (parent folders are created with mode 0700)")
    parser.add_argument("--force", action="store_true", help="replace an existing token file")
    return parser


def _token(args: argparse.Namespace) -> int:
    try:
        path = create_token_file(args.path, force=args.force)
    except TokenError as error:
        print(f"ftwiz-agent: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"ftwiz-agent: cannot write {args.path}: {error.strerror or error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote a new agent token to {path} (mode 0600); copy this file to every node and to the controller")
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        token = read_token_file(args.token_file)
    except TokenError as error:
        print(f"ftwiz-agent: {error}", file=sys.stderr)
        return EXIT_USAGE
    tls_problem = _tls_problem(args)
    if tls_problem:
        print(f"ftwiz-agent: {tls_problem}", file=sys.stderr)
        return EXIT_USAGE
    port_problem = _listen_problem(args.host, args.port)
    if port_problem:
        print(f"ftwiz-agent: {port_problem}", file=sys.stderr)
        return EXIT_USAGE
    settings = AgentSettings(
        node_name=args.node_name or socket.gethostname(),
        token=token,
        python=args.python,
        disk_paths=tuple(args.disk_path or [os.path.expanduser("~")]),
        interval_s=args.interval,
        gpu_fixture=args.gpu_fixture,
        probe_allow=tuple(args.probe_allow or ()),
        stop_grace_s=args.stop_grace,
        tls=args.tls_cert is not None,
        tls_ca_file=args.tls_ca,
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Imported here so `ftwiz-agent token` and `--help` stay fast.
    import uvicorn

    from .main import create_app
    from .probes.gpu_fixture import FixtureError
    from .sinkpath import sink_fast_path_protocol

    try:
        app = create_app(settings)
    except FixtureError as error:
        print(f"ftwiz-agent: {error}", file=sys.stderr)
        return EXIT_USAGE
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        # The bandwidth sink at socket speed; all else is uvicorn's. A BufferedProtocol: uvicorn annotates
        # Protocol, but only hands the class to loop.create_server, which takes either.
        http=cast("type[asyncio.Protocol]", sink_fast_path_protocol(token=settings.token)),
        access_log=args.log_level == "debug",  # an access line per request costs more CPU than the request
        server_header=False,
        proxy_headers=False,
        # uvicorn's own TLS (node_exporter's model): with a certificate the port speaks HTTPS only.
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
    )
    server = _quiet_server_class()(config)
    # The sampler threads run Python between NVML/psutil calls; at the default 5 ms switch interval a
    # request arriving then waits up to 5 ms for the GIL. 1 ms bounds that wait (p99 of /v1/report).
    sys.setswitchinterval(0.001)
    server.run()  # a bind that fails anyway (taken since the check) ends in uvicorn's sys.exit(3), its log line saying why
    return 0 if server.started else 1


def _listen_problem(host: str, port: int) -> Optional[str]:
    """Why the agent could not listen on ``host:port``, found by binding it as uvicorn will and letting go (None: it can).

    Checked before the app starts its samplers, so a second agent on a taken port (the systemd unit's, a test's)
    says so in one line with the fix, instead of uvicorn's bare errno after a lifespan start and stop."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        return f"--host {host}: {error.strerror}"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's create_server does
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as error:
                where = f"{host}:{port}"
                if error.errno == errno.EADDRINUSE:
                    return (f"cannot listen on {where}: address already in use. Another ftwiz-agent (systemctl status "
                            f"ftwiz-agent) or another program holds the port (ss -ltnp 'sport = :{port}' names it): stop it, "
                            "or give this agent another --port (and the node's agent_port in ftwiz.toml)")
                if error.errno == errno.EADDRNOTAVAIL:
                    return f"cannot listen on {where}: --host {host} is not an address of this machine"
                if error.errno == errno.EACCES:
                    return f"cannot listen on {where}: ports below 1024 need root; use the default --port {DEFAULT_PORT}"
                return f"cannot listen on {where}: {error.strerror or error}"
    return None


def _tls_problem(args: argparse.Namespace) -> Optional[str]:
    """Why the TLS options cannot work (None when they can, or are not given)."""
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together: give both (installers/install-agent.sh --tls prints their paths)"
    for option, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--tls-ca", args.tls_ca)):
        if path is not None and not os.access(path, os.R_OK):
            return f"{option} {path}: cannot read it (missing, or not readable by this user)"
    if args.tls_cert is not None:
        import ssl

        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(args.tls_cert, args.tls_key)
        except (ssl.SSLError, OSError) as error:
            return f"--tls-cert {args.tls_cert} / --tls-key {args.tls_key}: not a certificate and its key ({error})"
    return None


def _quiet_server_class() -> type:
    import asyncio

    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn's server, woken once a second instead of ten times while idle.

        uvicorn's main loop sleeps 0.1 s between checks of ``should_exit``: ten wake-ups a second, most
        of an idle agent's main-thread CPU (measured here: 0.3 % of a core, 0.07 % with this loop). Here
        the loop waits on an event that a signal sets (so stopping stays immediate) and otherwise ticks
        once a second, which is as often as the Date header changes.
        """

        _wake: "asyncio.Event | None" = None
        _loop: "asyncio.AbstractEventLoop | None" = None

        async def main_loop(self) -> None:
            self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
            while not await self.on_tick(0):  # counter 0: the Date header is refreshed on every tick
                try:
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            if self._loop is not None and self._wake is not None:
                self._loop.call_soon_threadsafe(self._wake.set)

        async def shutdown(self, sockets=None) -> None:
            """uvicorn's shutdown, less its fixed 0.1 s grace for open connections when none is open (a local
            agent that ``ftwiz`` started is stopped as ftwiz exits, and ftwiz waits for it)."""
            if self.server_state.connections or self.server_state.tasks or self.force_exit:
                await super().shutdown(sockets)
                return
            logging.getLogger("uvicorn.error").info("Shutting down")
            for server in self.servers:
                server.close()
            for sock in sockets or []:
                sock.close()
            await self.lifespan.shutdown()

    return QuietServer


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (0-65535)")
    return port


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def _network(text: str):
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a network like 10.0.0.0/8 or 127.0.0.1/32") from None
