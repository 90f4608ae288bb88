"""The dashboards: one page (dashboard.html) for a silo and for the federation's server.

The page holds no data and needs no credentials to load; its script reads ``/v1/status`` (and a
silo's ``/v1/series``) with the bearer token given in the address's fragment (``#token=...``, which
browsers never send to the server) or typed into the page, every 2 s.  It shows the reward rate and
decisions per second over time, latency, the sync history and the privacy spent.  Content Security
Policy: the page's own inline script and style, requests to its own origin only.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse

TEMPLATE = Path(__file__).with_name("dashboard.html")
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@cache
def page(kind: str) -> str:
    title = "serving silo" if kind == "silo" else "federation"
    return TEMPLATE.read_text(encoding="utf-8").replace("__KIND__", kind).replace("__TITLE__", title)


def endpoint(kind: str):  # type: ignore[no-untyped-def]
    async def dashboard(request: Request) -> HTMLResponse:
        return HTMLResponse(page(kind), headers=HEADERS)

    return dashboard
