"""Assemble the agent's FastAPI application: lifespan, middleware and routers."""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Any, AsyncIterator, Optional

from fastapi import Depends, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.version import __version__

from .bodylimit import BodyLimitMiddleware
from .dependencies import require_token
from .routers import UNAUTHORIZED, health, kernel, metrics, probes, report, runs, sink
from .sampler import Sampler
from .settings import AgentSettings
from .state import AgentState, default_sampler

__all__ = ["create_app"]

_SINK_PATH = "/v1/sink"


def create_app(settings: AgentSettings, *, sampler: Optional[Sampler] = None) -> FastAPI:
    """The agent application; ``sampler`` defaults to the one ``settings`` describe."""
    state = AgentState(settings=settings, sampler=sampler or default_sampler(settings))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.sampler.start()
        # Beside the first requests, not before them: a local agent's start-up is on the path of every ftwiz start.
        threading.Thread(target=_settle, args=(app,), name="ftwiz-settle", daemon=True).start()
        try:
            yield
        finally:
            state.listeners.close_all()
            state.sampler.stop()

    app = FastAPI(
        title="ftwiz-agent",
        version=__version__,
        summary="Node health over authenticated HTTP: GPUs, host, network, software; network probes; run stop.",
        lifespan=lifespan,
        docs_url=None,  # no browser UI assets on a GPU node; the schema is at /openapi.json
        redoc_url=None,
    )
    app.state.agent = state
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_json_body_bytes, exempt_paths=[_SINK_PATH])
    app.add_exception_handler(StarletteHTTPException, _http_error)
    protected: dict[str, Any] = {"dependencies": [Depends(require_token)], "responses": UNAUTHORIZED}
    app.include_router(health.router)
    for router in (report.router, metrics.router, probes.router, sink.router, runs.router, kernel.router):
        app.include_router(router, **protected)
    return app


def _settle(app: FastAPI) -> None:
    """Build the OpenAPI schema now, not on the first ``/openapi.json`` request; then keep the start-up objects (FastAPI,
    pydantic schemas, that schema), which never die, out of the collector's scans, so a full collection does not stall
    a request."""
    app.openapi()
    gc.collect()
    gc.freeze()


async def _http_error(request: Request, error: Exception) -> Response:
    """FastAPI answers 400 for a body that is not even UTF-8; to callers that is bad input: 422."""
    assert isinstance(error, StarletteHTTPException), "registered for StarletteHTTPException only"
    if error.status_code == 400:
        detail = [{"type": "json_invalid", "loc": ["body"], "msg": f"request body is not valid JSON: {error.detail}", "input": None}]
        return JSONResponse(status_code=422, content={"detail": detail})
    return await http_exception_handler(request, error)
