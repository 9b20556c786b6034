"""The dashboard's ASGI app (Starlette) and its server (uvicorn), on 127.0.0.1 only.

Read-only: GET routes only; every page load reads the ledger afresh. Routes: ``/`` the page
(``?month=YYYY-MM&tz=Zone``), ``/api/dashboard.json`` the same data as JSON, ``/api/open.json`` the
open boxes' running figures (from the ledger alone; the page polls it), ``/static/...`` the
vendored chart library and the page script. A bad month or zone is a 400 page with the one-line
error. Responses carry a Content-Security-Policy that allows only this origin's scripts. Only the
Host headers ``127.0.0.1`` and ``localhost`` (any port) are served (Starlette's
``TrustedHostMiddleware``; anything else is a 400): a page on another site that re-points its DNS
name at 127.0.0.1 (DNS rebinding) cannot read the books through the browser.
"""

from __future__ import annotations

import socket
import sys

from gpuops.errors import BadInput

HOST = "127.0.0.1"
# The Host header values served; the port is not part of the match (TrustedHostMiddleware strips it).
ALLOWED_HOSTS = ("127.0.0.1", "localhost")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


def make_app(settings, month: str | None = None, tz: str | None = None, read_status=None):
    """The Starlette app. ``month``/``tz``: what ``/`` shows without query parameters."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import HTMLResponse, JSONResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    import gpuops.accounting.dashboard as dashboard_data
    import gpuops.render.dashboard.page as page

    headers = {
        "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }

    def _params(request) -> tuple[str | None, str | None]:
        m = request.query_params.get("month") or month
        z = request.query_params.get("tz")
        return m, (z.strip() or None) if z is not None else tz

    def _build(m, z):
        return dashboard_data.build(settings, m, z, read_status=read_status)

    async def index(request):
        m, z = _params(request)
        try:
            d = await run_in_threadpool(_build, m, z)
        except BadInput as e:
            return HTMLResponse(_error_page(str(e)), status_code=400, headers=headers)
        return HTMLResponse(page.render(d, inline=False, tz_value=z), headers=headers)

    async def api(request):
        m, z = _params(request)
        try:
            d = await run_in_threadpool(_build, m, z)
        except BadInput as e:
            return JSONResponse({"error": str(e)}, status_code=400, headers=headers)
        return JSONResponse(d, headers=headers)

    async def open_boxes(request):
        _, z = _params(request)
        try:
            d = await run_in_threadpool(dashboard_data.live, settings, None, z)
        except BadInput as e:
            return JSONResponse({"error": str(e)}, status_code=400, headers=headers)
        return JSONResponse(page.with_live_text(d), headers=headers)

    return Starlette(
        routes=[
            Route("/", index, methods=["GET"]),
            Route("/api/dashboard.json", api, methods=["GET"]),
            Route("/api/open.json", open_boxes, methods=["GET"]),
            Mount("/static", app=StaticFiles(directory=str(page.STATIC)), name="static"),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(ALLOWED_HOSTS), www_redirect=False)],
    )


def _error_page(message: str) -> str:
    from markupsafe import escape

    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        f"<title>gpuops dashboard: bad request</title></head><body><p>error: {escape(message)}</p>"
        f'<p><a href="./">back to this month</a></p></body></html>'
    )


def serve(settings, month: str | None, tz: str | None, port: int) -> None:
    """Serve until Ctrl-C or SIGTERM.

    Binds ``127.0.0.1:port`` first (0: a free port) and prints the URL on stdout, so a caller knows
    where it is before the first request."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as e:
        sock.close()
        raise BadInput(
            f"cannot listen on {HOST}:{port}: {e.strerror}", "pick another --port, or --port 0 for any free one"
        ) from None
    sock.listen(64)
    url = f"http://{HOST}:{sock.getsockname()[1]}/"
    print(f"gpuops dashboard: {url} (read-only; Ctrl-C stops it)", flush=True)
    config = uvicorn.Config(make_app(settings, month, tz), log_level="warning", access_log=False, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
    sys.stdout.flush()
