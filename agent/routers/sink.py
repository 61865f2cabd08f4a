"""``POST /v1/sink``: count and discard a streamed body (the far end of a bandwidth probe)."""

from fastapi import APIRouter, HTTPException, Request

from shared.models import SinkResult

from ..probes.bandwidth import SINK_MAX_BYTES, SinkLimitExceeded, drain
from . import TOO_LARGE

router = APIRouter(prefix="/v1", tags=["probes"])


@router.post(
    "/sink",
    response_model=SinkResult,
    summary="Receive a bandwidth-probe stream",
    responses=TOO_LARGE,
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def sink(request: Request) -> SinkResult:
    """Reads the body as it arrives and keeps only its length; bounded in bytes and time."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > SINK_MAX_BYTES:
        raise HTTPException(status_code=413, detail=f"body exceeds the sink's cap of {SINK_MAX_BYTES} bytes")
    try:
        return await drain(request.stream())
    except SinkLimitExceeded as error:
        raise HTTPException(status_code=413, detail=str(error)) from None
