"""The federation server's status page and API (``fedbandits serve server --port P``).

    GET /v1/status   open round, rounds closed, silos unreachable at the last tick, epsilon spent,
                     the closed rounds (time, completed decisions) and the last ticks
    GET /dashboard   the federation's dashboard (no data in the page; it reads /v1/status with the token)
    GET /healthz     200 "ok"

``/v1/status`` needs ``Authorization: Bearer <token>`` with the server's viewing token (not the
sync token, which asks silos for releases).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from fedbandits.serve import dashboard


def federation_app(status_of: Callable[[], dict[str, Any]], token: str) -> Starlette:
    """The app; ``status_of()`` gives the coordinator's last status
    (:meth:`fedbandits.serve.coordinator.Coordinator.status`)."""
    if not token:
        raise ValueError("token must be non-empty (credentials are required)")
    expected = ("Bearer " + token).encode()

    async def status(request: Request) -> Response:
        if not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            return JSONResponse({"error": "authorization: a valid 'Bearer <token>' header is required"}, 401)
        return JSONResponse(status_of())

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    return Starlette(
        routes=[
            Route("/v1/status", status, methods=["GET"]),
            Route("/dashboard", dashboard.endpoint("federation"), methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )
