"""`gpuops check`: one line per check, its verdict first, the fix after an arrow.

::

    ok    keys.runpod         runpod key from $RUNPOD_API_KEY (account runpod:1a2b3c4d)
    warn  open.20261201-...   runpod p-12 of session ... open since ...: it may be billing  -> gpuops down ...

Anything of ours billing comes first (the service orders it); a summary line ends the table.
"""

from __future__ import annotations

import sys

from gpuops.textsafe import safe

MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "pending": "wait", "info": "info", "skip": "skip"}


def lines(doc: dict) -> list[str]:
    """The table's lines for ``doc`` (``gpuops.check.check.report``): verdict, check, detail, fix."""
    width = max([len(c["check"]) for c in doc["checks"]] + [10])
    out = []
    for c in doc["checks"]:
        fix = f"  -> {c['fix']}" if c.get("fix") else ""
        out.append(
            f"{MARK.get(c['verdict'], c['verdict']):<5} {safe(c['check']):<{width}}  {safe(c['detail'])}{safe(fix)}"
        )
    what = "check" + (" --live" if doc["live"] else "") + (" --rent" if doc["rent"] else "")
    skipped = [c["check"] for c in doc["checks"] if c["verdict"] == "skip"]
    # A check not run (no API key) holds nothing: named, never counted as holding.
    skips = f"; {len(skipped)} skipped ({safe(', '.join(skipped))}: no API key)" if skipped else ""
    if doc.get("nothing_live") and not doc["failed"]:
        out.append(f"{what}: nothing was checked live: no provider has an API key{skips}")
    elif doc["failed"]:
        out.append(f"{what}: {doc['failed']} failed, {doc['warnings']} warning(s){skips}")
    elif skipped:
        out.append(f"{what}: nothing failed" + (f" ({doc['warnings']} warning(s))" if doc["warnings"] else "") + skips)
    else:
        out.append(f"{what}: every check holds" + (f" ({doc['warnings']} warning(s))" if doc["warnings"] else ""))
    return out


def render(doc: dict) -> None:
    """Print ``doc`` as the table (stdout)."""
    sys.stdout.write("\n".join(lines(doc)) + "\n")
    sys.stdout.flush()
