"""``POST /v1/probe/{connect,connect-many,listen,bandwidth,compute}``, ``DELETE /v1/probe/listen/{port}``: network checks run from this node."""

import asyncio

from fastapi import APIRouter, Depends, HTTPException, Path

from shared.models import (
    BandwidthProbeRequest,
    BandwidthProbeResult,
    ComputeProbeRequest,
    ComputeProbeResult,
    ConnectManyRequest,
    ConnectManyResult,
    ConnectProbeRequest,
    ConnectProbeResult,
    ErrorBody,
    ListenProbeRequest,
    ListenProbeResult,
)

from ..dependencies import get_state, no_coercion
from ..probes import bandwidth, tcp
from ..state import AgentState
from . import TOO_LARGE

router = APIRouter(prefix="/v1/probe", tags=["probes"], responses=TOO_LARGE)


@router.post("/connect", response_model=ConnectProbeResult, summary="TCP connect from this node", dependencies=[Depends(no_coercion(ConnectProbeRequest))])
async def connect(body: ConnectProbeRequest, state: AgentState = Depends(get_state)) -> ConnectProbeResult:
    """Whether ``host:port`` accepts a TCP connection from here, and how fast."""
    return await tcp.connect(body.host, body.port, body.timeout_s, allow=state.settings.probe_allow)


@router.post("/connect-many", response_model=ConnectManyResult, summary="TCP connects from this node to many peers",
             dependencies=[Depends(no_coercion(ConnectManyRequest))])
async def connect_many(body: ConnectManyRequest, state: AgentState = Depends(get_state)) -> ConnectManyResult:
    """Each target's best connect time of ``tries`` (one request per node for the mesh's all-pairs latency)."""
    targets = [(t.host, t.port) for t in body.targets]
    return ConnectManyResult(results=await tcp.connect_many(targets, body.tries, body.timeout_s, allow=state.settings.probe_allow))


@router.post(
    "/listen",
    response_model=ListenProbeResult,
    summary="Hold a temporary TCP listener",
    dependencies=[Depends(no_coercion(ListenProbeRequest))],
    responses={
        409: {"model": ErrorBody, "description": "The port is taken or cannot be bound."},
        429: {"model": ErrorBody, "description": "Too many listeners held already."},
    },
)
async def listen(body: ListenProbeRequest, state: AgentState = Depends(get_state)) -> ListenProbeResult:
    """Listen on ``port`` (all IPv4 addresses) for ``ttl_s`` seconds, so peers can test it."""
    try:
        return await state.listeners.listen(body.port, body.ttl_s)
    except tcp.ListenError as error:
        raise HTTPException(status_code=error.status, detail=error.detail) from None


@router.delete(
    "/listen/{port}",
    response_model=ListenProbeResult,
    summary="Close a temporary TCP listener before its time to live",
    responses={404: {"model": ErrorBody, "description": "This agent holds no test listener on that port."}},
)
async def unlisten(port: int = Path(ge=1, le=65535), state: AgentState = Depends(get_state)) -> ListenProbeResult:
    """Free ``port`` now (the checklist closes its rendezvous test listener so a launch can bind it at once)."""
    try:
        return await state.listeners.close(port)
    except tcp.ListenError as error:
        raise HTTPException(status_code=error.status, detail=error.detail) from None


@router.post(
    "/bandwidth",
    response_model=BandwidthProbeResult,
    summary="Stream to a peer agent's sink and measure throughput",
    dependencies=[Depends(no_coercion(BandwidthProbeRequest))],
    responses={429: {"model": ErrorBody, "description": "A bandwidth test is already running on this agent."}},
)
async def bandwidth_probe(body: BandwidthProbeRequest, state: AgentState = Depends(get_state)) -> BandwidthProbeResult:
    """One test at a time per agent; the peer must share this agent's token."""
    lock = state.bandwidth_lock
    if lock.locked():
        raise HTTPException(
            status_code=429,
            detail="a bandwidth test is already running on this agent; retry when it ends (at most 10 s)",
            headers={"Retry-After": "10"},
        )
    async with lock:
        return await bandwidth.stream_to_peer(
            body.peer_url, body.seconds, token=state.settings.token, allow=state.settings.probe_allow,
            tls_only=state.settings.tls, ca_file=state.settings.tls_ca_file,
        )


@router.post("/compute", response_model=ComputeProbeResult, summary="Time a matmul on the GPUs or the CPU a run will use",
             dependencies=[Depends(no_coercion(ComputeProbeRequest))])
async def compute(body: ComputeProbeRequest, state: AgentState = Depends(get_state)) -> ComputeProbeResult:
    """TFLOP/s per device from the training interpreter (the checklist's balance row); cached per interpreter and
    device set, one probe at a time (a second waits for the first, then reads its cached answer)."""
    return await asyncio.to_thread(state.compute.measure, body)
