"""The one emitter of machine output: every ``--format json`` and ``--format csv`` goes through here.

The convention (README, "Output"):

- ``--format table|json|csv`` on every reporting command; ``--json`` (and ``--csv`` where a
  command had it) are shorthands. Two formats at once is bad input (exit 2).
- JSON: one document, indent 2, keys in the order the report builds them (stable from run to
  run: never a set's order), non-ASCII text as ``\\uXXXX`` escapes (a terminal never acts on a
  control or bidi character in it). ``watchdog --format json`` streams JSON lines (one compact
  object per action): a stream has no indent.
- Times: a key ending in ``_at`` that holds epoch seconds is written as ISO-8601 UTC
  (``2026-11-05T09:30:30Z``); a machine output never holds an epoch number.
- CSV: header first, ``\\n`` line ends, RFC 4180 quoting (the ``csv`` module); a list of objects
  is one row each, one object is one row; nested objects flatten to ``parent_child`` columns,
  lists become a JSON cell; None is an empty cell; floats are written with ``repr`` (every digit).

Standard library, ``ledger.csvio`` (formula neutralization) and ``ledger.periods.utc_iso`` only (CLI start-up is a hot path).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from gpuops.errors import BadInput
from ledger.periods import utc_iso  # the one time format of machine output

FORMATS = ("table", "json", "csv")


def pick(fmt: str | None, json_out: bool = False, csv_out: bool = False, allowed: Sequence[str] = FORMATS) -> str:
    """The one format asked for: ``--format`` or a shorthand (``--json``, ``--csv``), default ``table``.

    Raises BadInput for an unknown format, two formats at once, or one the command does not write
    (``allowed``)."""
    asked = [f for f, on in (("json", json_out), ("csv", csv_out)) if on]
    if fmt is not None:
        fmt = fmt.strip().lower()
        if fmt not in FORMATS:
            raise BadInput(f"unknown --format {fmt!r}", f"use one of: {', '.join(allowed)}")
        asked.append(fmt)
    if len(set(asked)) > 1:
        raise BadInput(
            f"--{asked[0]} and --{asked[1]} exclude each other"
            if fmt is None
            else f"--format {fmt} and --{asked[0]} exclude each other",
            "pass one of them",
        )
    out = asked[0] if asked else "table"
    if out not in allowed:
        raise BadInput(f"this command writes no {out}", f"use --format {' or '.join(allowed)}")
    return out


def _is_time_key(key: Any) -> bool:
    return isinstance(key, str) and key.endswith("_at")


def machine(obj: Any, key: Any = None) -> Any:
    """``obj`` ready for JSON/CSV.

    Epoch numbers under ``*_at`` keys as ISO-8601 UTC, tuples as lists, dataclass-like objects
    through their ``as_json()``; everything else unchanged."""
    if hasattr(obj, "as_json") and callable(obj.as_json):
        obj = obj.as_json()
    if isinstance(obj, dict):
        return {k: machine(v, k) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [machine(v) for v in obj]
    if _is_time_key(key) and isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return utc_iso(float(obj))
    return obj


def json_text(obj: Any) -> str:
    """The JSON document for ``obj`` (indent 2, stable key order, ISO-8601 UTC times), with a final newline."""
    return json.dumps(machine(obj), indent=2, default=str) + "\n"


def json_line(obj: Any) -> str:
    """One compact JSON object on one line (for streams such as ``watchdog``)."""
    return json.dumps(machine(obj), default=str, separators=(", ", ": ")) + "\n"


def cell(v: Any) -> str:
    """One CSV cell, formula-neutralized like `ledger export`.

    One CSV cell: None empty, floats with every digit (``repr``), lists/dicts as JSON, text that
    would start a spreadsheet formula (``=``, ``+``, ``-``, ``@``, ...) behind one ``'``
    (``ledger.csvio.neutralize``, the rule `ledger export` and `ledger import` share)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, dict)):
        v = json.dumps(v, ensure_ascii=False, default=str)
    if isinstance(v, str):
        from ledger.csvio import neutralize

        return neutralize(v)
    return str(v)


def flatten(obj: dict, prefix: str = "") -> dict:
    """Nested objects as ``parent_child`` keys, in order; lists stay (one JSON cell)."""
    out: dict = {}
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, name + "_"))
        else:
            out[name] = v
    return out


def csv_text(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """CSV text: ``header`` then ``rows`` (sequences of values, written with ``cell``)."""
    import csv  # here: the table and JSON paths (every `ledger month`) never load it

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(list(header))
    for r in rows:
        w.writerow([cell(v) for v in r])
    return buf.getvalue()


def records_csv(records: Any, columns: Sequence[str] = ()) -> str:
    """CSV of a list of objects (one row each) or of one object (one row).

    Columns are the flattened keys in first-seen order (``columns`` first: the header of an empty
    list), times as ISO-8601 UTC."""
    recs = machine(records)
    if isinstance(recs, dict):
        recs = [recs]
    flat = [flatten(r) if isinstance(r, dict) else {"value": r} for r in recs]
    header: list[str] = list(columns)
    for r in flat:
        header += [k for k in r if k not in header]
    return csv_text(([r.get(k) for k in header] for r in flat), header)


def write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def emit(obj: Any, fmt: str, table=None, csv_records: Any = None, csv_columns: Sequence[str] = ()) -> None:
    """Print ``obj`` as ``fmt``.

    ``json`` (``json_text``), ``csv`` (``records_csv`` of ``csv_records``, default ``obj``, header
    ``csv_columns`` first even with no rows) or ``table`` (calls ``table()``)."""
    if fmt == "json":
        write(json_text(obj))
    elif fmt == "csv":
        write(records_csv(obj if csv_records is None else csv_records, csv_columns))
    elif table is not None:
        table()
    else:
        write(json_text(obj))
