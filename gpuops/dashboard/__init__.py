"""`gpuops dashboard`: the month's costs as a read-only web page (or one offline HTML file).

Nothing here loads at CLI start-up: ``command`` imports the server (Starlette, uvicorn) and the
template engine (Jinja2) only when the command runs; they come with the ``dashboard`` extra.
The page's figures are ``gpuops.accounting.ledger_service.month``'s report, the one ``gpuops ledger month --json``
prints (see ``data.py``).
"""

from __future__ import annotations

from pathlib import Path

from gpuops.errors import BadInput

EXTRA_FIX = "install the dashboard extra: pip install -e '.[dashboard]' (starlette, uvicorn, jinja2)"


def _need(*modules: str) -> None:
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise BadInput(f"gpuops dashboard needs {', '.join(missing)}, which is not installed", EXTRA_FIX)


def command(
    settings, month: str | None = None, tz: str | None = None, port: int = 8765, html: Path | None = None
) -> None:
    """Serve the dashboard on 127.0.0.1:``port``, or write the page for ``month`` to ``html``.

    Serve the dashboard on 127.0.0.1:``port`` until stopped, or with ``html`` write the page for
    ``month`` in ``tz`` to that file (self-contained, offline) and return. Raises BadInput for a bad
    month, zone, port or a missing extra (exit 2)."""
    if not 0 <= port <= 65535:
        raise BadInput(f"--port must be 0..65535, got {port}", "e.g. --port 8765, or 0 for any free port")
    if html is not None:
        _need("jinja2")
        from gpuops.accounting import dashboard as data
        from gpuops.render.dashboard import page

        text = page.render(data.build(settings, month, tz), inline=True, tz_value=tz)
        out = Path(html)
        if out.is_dir():
            raise BadInput(f"--html {html} is a directory", "pass a file name, e.g. --html costs.html")
        tmp = out.with_name(out.name + ".tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(out)
        except OSError as e:  # no such folder, read-only, disk full: the user's path, a one-line fix
            if tmp.parent.is_dir():
                tmp.unlink(missing_ok=True)
            raise BadInput(
                f"cannot write --html {html}: {e.strerror or e}",
                "pass a file in an existing, writable folder, e.g. --html costs.html",
            ) from None
        print(f"wrote {out} ({len(text.encode()):,} bytes, opens offline)")
        return
    _need("starlette", "uvicorn", "jinja2")
    from gpuops.accounting.ledger_service import _tz_checked
    from gpuops.dashboard import server

    _tz_checked(tz)
    if month is not None:
        from ledger.reports import month_bounds

        try:
            month_bounds(month, tz)
        except ValueError as e:
            raise BadInput(str(e), "pass the month as YYYY-MM, e.g. 2026-11") from None
    server.serve(settings, month, tz, port)
