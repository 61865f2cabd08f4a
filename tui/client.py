"""Talking to every node's ftwiz-agent at once.

:class:`AgentClient` keeps one keep-alive :class:`httpx.AsyncClient` per agent (so a 64-node poll stays
linear: httpcore's pool scans all its connections per request) and polls every agent concurrently, each with its own timeout
(``cluster.agent_timeout_s``). A node that does not answer is a *state* (:class:`NodeState`), never an
exception: callers get a :class:`NodeStatus` for reports and an :class:`AgentReply` for every other call,
each with a message and the fix.

Usage::

    async with AgentClient(config) as client:
        statuses = await client.poll()            # {node name: NodeStatus}
        reply = await client.probe_connect("node1", "10.0.0.1", 29500)
        if reply.ok: print(reply.value.latency_ms)
"""

from __future__ import annotations

import asyncio
import enum
import os
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Optional, TypeVar, Union

import httpx
from pydantic import BaseModel, ValidationError

from shared.config import FtwizConfig, NodeConfig
from shared.models import (
    SCHEMA_VERSION,
    BandwidthProbeResult,
    ComputeProbeResult,
    ConnectManyResult,
    ConnectProbeResult,
    Health,
    KernelOomRecord,
    ListenProbeResult,
    NodeReport,
    RefreshResult,
    RunStopResult,
)
from shared.version import __version__
from tui.client_errors import certificate_error, peer_certificate
from tui.client_errors import network_message as _network_message
from tui.client_errors import response_detail as _detail

__all__ = ["AgentClient", "AgentReply", "NodeState", "NodeStatus", "read_token", "reports_of"]

T = TypeVar("T", bound=BaseModel)
NodeRef = Union[str, NodeConfig]


class NodeState(str, enum.Enum):
    """What the controller knows about a node's agent."""

    UP = "up"
    """Answered with a valid report."""
    DOWN = "down"
    """No answer (refused, timed out, unresolvable) or a server error."""
    UNAUTHORIZED = "unauthorized"
    """Answered, but rejected our token (or we have none)."""
    INCOMPATIBLE = "incompatible"
    """Answered with a different wire-schema major version, or not like an ftwiz agent."""


@dataclass
class NodeStatus:
    """One node's state after a report request."""

    node: str
    """Node name."""
    url: str
    """The agent's base URL."""
    state: NodeState
    """up / down / unauthorized / incompatible."""
    message: str = ""
    """What happened, for a node that is not up."""
    hint: str = ""
    """The fix, for a node that is not up."""
    report: Optional[NodeReport] = None
    """The report, when up."""
    sent_at: Optional[float] = None
    """Controller wall clock (time.time) when the request was sent."""
    received_at: Optional[float] = None
    """Controller wall clock when the answer arrived."""
    rtt_s: Optional[float] = None
    """Round-trip time of the request."""

    @property
    def up(self) -> bool:
        """The node answered with a valid report."""
        return self.state is NodeState.UP

    @property
    def clock_offset_s(self) -> Optional[float]:
        """Agent clock minus controller clock, corrected by half the round trip."""
        if self.report is None or self.sent_at is None or self.received_at is None:
            return None
        return self.report.time_unix - (self.sent_at + self.received_at) / 2.0


@dataclass
class AgentReply(Generic[T]):
    """The answer to one agent call: a value, or the node's state and why not."""

    node: str
    """Node name."""
    state: NodeState
    """UP when the agent answered (even with an HTTP error such as 409)."""
    value: Optional[T] = None
    """The decoded response, when the call succeeded."""
    status_code: Optional[int] = None
    """HTTP status, when an answer arrived."""
    error: Optional[str] = None
    """Why there is no value."""
    hint: str = ""
    """The fix, when there is one."""

    @property
    def ok(self) -> bool:
        """The call succeeded and ``value`` is set."""
        return self.value is not None


def reports_of(statuses: Mapping[str, NodeStatus]) -> dict[str, NodeReport]:
    """The reports of the nodes whose agent answered, by node name (what planning and the launch read)."""
    return {name: s.report for name, s in statuses.items() if s.report is not None}


def read_token(path: str) -> tuple[Optional[str], Optional[str]]:
    """Read the agents' bearer token: ``(token, None)`` or ``(None, why not)``."""
    expanded = os.path.expanduser(path)
    try:
        with open(expanded, encoding="utf-8") as handle:
            token = handle.read().strip()
    except FileNotFoundError:
        return None, f"token file {path} not found"
    except OSError as exc:
        return None, f"cannot read token file {path}: {exc.strerror or exc}"
    if not token:
        return None, f"token file {path} is empty"
    return token, None


def _schema_major(version: Any) -> Optional[str]:
    return str(version).split(".", 1)[0] if version is not None else None


class AgentClient:
    """Concurrent, keep-alive HTTP client for every agent of a cluster.

    ``token`` overrides ``cluster.agent_token_file``; ``transport`` lets tests pass a real alternative
    transport. Use as an async context manager (or call :meth:`aclose`).
    """

    def __init__(
        self,
        config: FtwizConfig,
        *,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self.config = config
        self.timeout = timeout if timeout is not None else config.cluster.agent_timeout_s
        self.token_error: Optional[str] = None
        if token is None:
            token, self.token_error = read_token(config.cluster.agent_token_file)
        self._token = token
        self._headers = {"User-Agent": f"ftwiz/{__version__}"}
        #: Sent per request, never as a client default: the unauthenticated ``/healthz`` greeting must not carry it.
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        #: Plain-HTTP agents that answered ``/healthz`` in HTTP (see :meth:`_greet`).
        self._greeted: set[str] = set()
        self._transport = transport
        # One keep-alive AsyncClient per agent rather than one for the cluster: httpcore's pool scans
        # every connection for every queued request, which makes a 64-node poll quadratic.
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._ssl: Optional[ssl.SSLContext] = None
        #: ``[cluster] agent_tls``: every call is HTTPS, verified against ``agent_ca_file``.
        self.tls = config.cluster.agent_tls
        self.ca_file = os.path.expanduser(config.cluster.agent_ca_file) if config.cluster.agent_ca_file else None
        self.tls_error: Optional[str] = None
        if self.tls:
            try:
                # Built once: httpx would load the CA bundle again for every client (~35 ms each).
                self._ssl = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                self.tls_error = (f"[cluster] agent_ca_file {config.cluster.agent_ca_file}: cannot load it as a PEM bundle "
                                  f"({getattr(exc, 'strerror', None) or exc})")

    async def __aenter__(self) -> "AgentClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection."""
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

    def _http(self, url: str) -> httpx.AsyncClient:
        """The keep-alive client for one agent's base URL."""
        client = self._clients.get(url)
        if client is None:
            # trust_env=False: a corporate HTTP(S)_PROXY must never see the token or intercept node traffic.
            if self._ssl is None:
                # Built once: httpx would load the CA bundle again for every client (~35 ms each). Over plain HTTP it
                # is never used: a context without the bundle (loading it costs ~20 ms) would refuse any server.
                self._ssl = ssl.create_default_context() if self.tls else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            client = httpx.AsyncClient(base_url=url, headers=self._headers, transport=self._transport, trust_env=False,
                                       verify=self._ssl, limits=httpx.Limits(max_connections=8, max_keepalive_connections=4))
            self._clients[url] = client
        return client

    # ------------------------------------------------------------------ addressing

    def _node(self, node: NodeRef) -> NodeConfig:
        return node if isinstance(node, NodeConfig) else self.config.node(node)

    def base_url(self, node: NodeRef) -> str:
        """``http://host:port`` of ``node``'s agent, ``https://`` with ``agent_tls`` (IPv6 literals bracketed)."""
        cfg = self._node(node)
        host = f"[{cfg.host}]" if ":" in cfg.host and not cfg.host.startswith("[") else cfg.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.config.agent_port(cfg)}"

    def _down_hint(self, cfg: NodeConfig) -> str:
        port = self.config.agent_port(cfg)
        if self.tls:
            return (
                f"start the agent on {cfg.name} with TLS: ftwiz-agent --host 0.0.0.0 --port {port} --token-file "
                f"{self.config.cluster.agent_token_file} --node-name {cfg.name} --tls-cert CERT --tls-key KEY "
                f"(check with: curl --cacert {self.config.cluster.agent_ca_file or 'CA'} https://{cfg.host}:{port}/healthz)"
            )
        return (
            f"start the agent on {cfg.name}: ftwiz-agent --host 0.0.0.0 --port {port} --token-file "
            f"{self.config.cluster.agent_token_file} --node-name {cfg.name} (check with: curl http://{cfg.host}:{port}/healthz)"
        )

    def _certificate_hint(self, cfg: NodeConfig) -> str:
        path = self.config.cluster.agent_ca_file
        bundle = f"[cluster] agent_ca_file ({path})" if path else "a PEM bundle named by [cluster] agent_ca_file"
        return (f"append {cfg.name}'s certificate (installers/install-agent.sh --tls printed its path) to {bundle}, or "
                f"give the agent a certificate for {cfg.host} signed by a CA in it")

    async def _unreachable(self, cfg: NodeConfig, url: str, exc: httpx.HTTPError, wait: float) -> tuple[str, str]:
        """The message and fix for a call that got no HTTP answer; a certificate that did not verify is named."""
        if certificate_error(exc) is None:
            return _network_message(exc, url, wait), self._down_hint(cfg)
        presented = await asyncio.to_thread(peer_certificate, cfg.host, self.config.agent_port(cfg), wait)
        against = f"[cluster] agent_ca_file {self.config.cluster.agent_ca_file}" if self.ca_file else "the system's CAs"
        return (f"{_network_message(exc, url, wait)}; {cfg.name}'s agent presented certificate {presented}, "
                f"which does not verify against {against}"), self._certificate_hint(cfg)

    async def _greet(self, cfg: NodeConfig, url: str, wait: float) -> Optional[tuple[str, str]]:
        """Without ``agent_tls``: ``GET /healthz`` (no token) before the first authenticated call to an agent.

        An agent started with ``--tls-cert`` answers a plain-HTTP request with a TLS alert or a closed
        connection; the token is then never sent in clear, and the node's error says to set ``agent_tls``.
        Returns ``None`` when the agent speaks HTTP, else the message and fix.
        """
        if self.tls or url in self._greeted:
            return None
        try:
            await self._http(url).get("/healthz", timeout=wait)
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            return (f"{url}/healthz got no HTTP answer ({detail[:160]}): {cfg.name}'s agent may serve HTTPS only; "
                    "the token was not sent"), (
                f"set [cluster] agent_tls = true and agent_ca_file = a PEM bundle of the agents' certificates "
                f"(installers/install-agent.sh --tls printed its path), or start {cfg.name}'s agent without --tls-cert")
        except httpx.HTTPError as exc:
            return await self._unreachable(cfg, url, exc, wait)
        self._greeted.add(url)
        return None

    def _token_hint(self, cfg: NodeConfig) -> str:
        path = self.config.cluster.agent_token_file
        return (
            f"use the same token everywhere: copy {path} from {cfg.name} (scp {cfg.host}:{path} {path}; chmod 600 {path}), "
            "or create one with `ftwiz-agent token PATH` and restart every agent with --token-file PATH"
        )

    # ------------------------------------------------------------------ reports

    async def poll(self) -> dict[str, NodeStatus]:
        """Every node's report, fetched concurrently; keys in config order."""
        statuses = await asyncio.gather(*(self.report(n) for n in self.config.nodes))
        return {s.node: s for s in statuses}

    async def report(self, node: NodeRef) -> NodeStatus:
        """``GET /v1/report`` of one node, as a :class:`NodeStatus` (never raises for network errors)."""
        cfg = self._node(node)
        url = self.base_url(cfg)
        if self._token is None:
            return NodeStatus(cfg.name, url, NodeState.UNAUTHORIZED, self.token_error or "no token", self._token_hint(cfg))
        if self.tls_error is not None:
            return NodeStatus(cfg.name, url, NodeState.DOWN, self.tls_error, "point agent_ca_file at the agents' certificates (PEM)")
        refused = await self._greet(cfg, url, self.timeout)
        if refused is not None:
            return NodeStatus(cfg.name, url, NodeState.DOWN, *refused)
        sent = time.time()
        start = time.perf_counter()
        try:
            response = await self._http(url).get("/v1/report", headers=self._auth, timeout=self.timeout)
        except httpx.HTTPError as exc:
            return NodeStatus(cfg.name, url, NodeState.DOWN, *await self._unreachable(cfg, url, exc, self.timeout))
        rtt = time.perf_counter() - start
        received = time.time()
        status = NodeStatus(cfg.name, url, NodeState.UP, sent_at=sent, received_at=received, rtt_s=rtt)
        problem = self._classify(cfg, response)
        if problem is not None:
            status.state, status.message, status.hint = problem
            return status
        invalid: Optional[ValidationError] = None
        try:
            # pydantic parses the JSON itself: several times faster than json() + model_validate.
            report: Optional[NodeReport] = NodeReport.model_validate_json(response.content)
        except ValidationError as exc:
            report, invalid = None, exc
        if report is not None and _schema_major(report.schema_version) == _schema_major(SCHEMA_VERSION):
            status.report = report
            return status
        status.state = NodeState.INCOMPATIBLE
        status.hint = f"install the same ftwiz version on this machine and on {cfg.name} (pip install ftwiz=={__version__})"
        try:
            body = response.json()
        except ValueError:
            status.message = f"{url}/v1/report did not return JSON: not an ftwiz agent?"
            status.hint = f"check that port {self.config.agent_port(cfg)} on {cfg.name} is ftwiz-agent"
            return status
        body = body if isinstance(body, dict) else {}
        theirs = body.get("schema_version")
        if _schema_major(theirs) != _schema_major(SCHEMA_VERSION):
            status.message = (f"agent speaks wire schema {theirs or '?'} (agent {body.get('agent_version', '?')}); "
                              f"this ftwiz {__version__} speaks {SCHEMA_VERSION}")
        elif invalid is not None:
            first = invalid.errors()[0]
            status.message = f"report does not match schema {SCHEMA_VERSION}: {first['msg']} at {'.'.join(map(str, first['loc']))}"
        return status

    def _classify(self, cfg: NodeConfig, response: httpx.Response) -> Optional[tuple[NodeState, str, str]]:
        """Map an HTTP error status to a node state, message and hint (None when 2xx)."""
        code = response.status_code
        if code < 400:
            return None
        detail = _detail(response)
        if code in (401, 403):
            return NodeState.UNAUTHORIZED, f"agent rejected the token from {self.config.cluster.agent_token_file} (HTTP {code})", self._token_hint(cfg)
        if code == 404 and response.request.url.path.endswith("/v1/report"):
            return NodeState.INCOMPATIBLE, f"{self.base_url(cfg)} has no /v1/report: not an ftwiz agent, or a very old one", (
                f"check that port {self.config.agent_port(cfg)} on {cfg.name} is ftwiz-agent {__version__}"
            )
        return NodeState.DOWN, f"agent error HTTP {code}: {detail}", f"see the agent's log on {cfg.name}"

    # ------------------------------------------------------------------ calls

    async def _call(
        self,
        node: NodeRef,
        method: str,
        path: str,
        model: type[T],
        *,
        json: Optional[dict[str, Any]] = None,
        timeout: Optional[float] = None,
        auth: bool = True,
    ) -> AgentReply[T]:
        cfg = self._node(node)
        url = self.base_url(cfg)
        if auth and self._token is None:
            return AgentReply(cfg.name, NodeState.UNAUTHORIZED, error=self.token_error or "no token", hint=self._token_hint(cfg))
        if self.tls_error is not None:
            return AgentReply(cfg.name, NodeState.DOWN, error=self.tls_error, hint="point agent_ca_file at the agents' certificates (PEM)")
        wait = timeout if timeout is not None else self.timeout
        if auth:
            refused = await self._greet(cfg, url, wait)
            if refused is not None:
                return AgentReply(cfg.name, NodeState.DOWN, error=refused[0], hint=refused[1])
        try:
            response = await self._http(url).request(method, path, json=json, headers=self._auth if auth else None, timeout=wait)
        except httpx.HTTPError as exc:
            error, hint = await self._unreachable(cfg, url, exc, wait)
            return AgentReply(cfg.name, NodeState.DOWN, error=error, hint=hint)
        if response.status_code >= 400:
            problem = self._classify(cfg, response)
            state, message, hint = problem if problem else (NodeState.DOWN, "", "")
            if response.status_code not in (401, 403) and response.status_code < 500:
                # The agent is fine; the request was refused (409 port taken, 422 bad input, 404 unknown run).
                state, message, hint = NodeState.UP, f"HTTP {response.status_code}: {_detail(response)}", ""
            return AgentReply(cfg.name, state, status_code=response.status_code, error=message, hint=hint)
        try:
            value = model.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            return AgentReply(cfg.name, NodeState.INCOMPATIBLE, status_code=response.status_code, error=f"unexpected answer to {path}: {exc}")
        return AgentReply(cfg.name, NodeState.UP, value=value, status_code=response.status_code)

    async def health(self, node: NodeRef) -> AgentReply[Health]:
        """``GET /healthz`` (no token needed)."""
        return await self._call(node, "GET", "/healthz", Health, auth=False)

    async def probe_connect(self, node: NodeRef, host: str, port: int, timeout_s: float = 3.0) -> AgentReply[ConnectProbeResult]:
        """Ask ``node``'s agent to open a TCP connection to ``host:port`` (the agent caps timeout_s at 10)."""
        body = {"host": host, "port": port, "timeout_s": min(timeout_s, 10.0)}
        return await self._call(node, "POST", "/v1/probe/connect", ConnectProbeResult, json=body, timeout=self.timeout + timeout_s)

    async def probe_connect_many(self, node: NodeRef, targets: list[tuple[str, int]], *, tries: int = 3,
                                 timeout_s: float = 3.0) -> AgentReply[ConnectManyResult]:
        """Ask ``node``'s agent to connect to every ``(host, port)``, best of ``tries`` each (one request)."""
        body = {"targets": [{"host": h, "port": p} for h, p in targets], "tries": tries, "timeout_s": min(timeout_s, 10.0)}
        # The agent starts no connect after 20 s; one running then ends within its timeout.
        return await self._call(node, "POST", "/v1/probe/connect-many", ConnectManyResult, json=body,
                                timeout=self.timeout + 20.0 + min(timeout_s, 10.0))

    async def probe_listen(self, node: NodeRef, port: int, ttl_s: float = 10.0) -> AgentReply[ListenProbeResult]:
        """Ask ``node``'s agent to listen on ``port`` for ``ttl_s`` s; status_code 409 means the port is taken."""
        return await self._call(node, "POST", "/v1/probe/listen", ListenProbeResult, json={"port": port, "ttl_s": min(ttl_s, 120.0)})

    async def probe_unlisten(self, node: NodeRef, port: int) -> AgentReply[ListenProbeResult]:
        """Ask ``node``'s agent to close its test listener on ``port`` now; status_code 404 means none was held."""
        return await self._call(node, "DELETE", f"/v1/probe/listen/{int(port)}", ListenProbeResult)

    async def probe_bandwidth(self, node: NodeRef, peer_url: str, seconds: float = 1.0) -> AgentReply[BandwidthProbeResult]:
        """Ask ``node``'s agent to stream to ``peer_url`` (another agent) for ``seconds`` (≤ 10)."""
        body = {"peer_url": peer_url, "seconds": min(seconds, 10.0)}
        return await self._call(node, "POST", "/v1/probe/bandwidth", BandwidthProbeResult, json=body, timeout=self.timeout + 2 * seconds + 2)

    async def probe_compute(self, node: NodeRef, *, gpus: Optional[list[int]] = None, threads: Optional[int] = None,
                            timeout_s: float = 60.0) -> AgentReply[ComputeProbeResult]:
        """``POST /v1/probe/compute``: matmul TFLOP/s on ``gpus`` (NVML indices), or on the CPU with ``threads``
        torch threads when ``gpus`` is None; the agent answers from its cache when it measured the same before."""
        body: dict[str, Any] = {"device": "cuda", "gpus": gpus} if gpus is not None else {"device": "cpu", "threads": threads}
        body["timeout_s"] = min(timeout_s, 300.0)
        # a probe already running on that agent (another checklist) is waited for, then answered from the cache
        return await self._call(node, "POST", "/v1/probe/compute", ComputeProbeResult, json=body,
                                timeout=self.timeout + 2 * min(timeout_s, 300.0) + 5)

    async def refresh(self, node: NodeRef) -> AgentReply[RefreshResult]:
        """``POST /v1/refresh``: re-probe the training interpreter now."""
        return await self._call(node, "POST", "/v1/refresh", RefreshResult, timeout=max(self.timeout, 100.0))

    async def stop_run(self, node: NodeRef, run_id: str) -> AgentReply[RunStopResult]:
        """``POST /v1/runs/{run_id}/stop?node=NAME``: signal every process of the run that the launcher tagged
        with ``node``'s configured name (the agent's own ``--node-name`` may differ from it)."""
        from urllib.parse import quote

        name = self._node(node).name
        path = f"/v1/runs/{quote(run_id, safe='')}/stop?node={quote(name, safe='')}"
        return await self._call(node, "POST", path, RunStopResult, timeout=max(self.timeout, 15.0))

    async def kernel_oom(self, node: NodeRef, pid: int, at: Optional[float] = None) -> AgentReply[KernelOomRecord]:
        """``GET /v1/kernel/oom/{pid}``: the kernel's OOM-kill record of ``pid`` on ``node`` (the failure doctor),
        counted only near ``at`` (unix time of the kill) when given."""
        query = f"?at={float(at):.3f}" if at is not None else ""
        return await self._call(node, "GET", f"/v1/kernel/oom/{int(pid)}{query}", KernelOomRecord, timeout=max(self.timeout, 25.0))

    async def stop_run_everywhere(self, run_id: str) -> dict[str, AgentReply[RunStopResult]]:
        """:meth:`stop_run` on every node concurrently."""
        replies = await asyncio.gather(*(self.stop_run(n, run_id) for n in self.config.nodes))
        return {r.node: r for r in replies}

