"""gpuops/cli_values.py: plain option values coerced without pydantic read exactly as typer's own
coercion reads them (value, type, and error message for what it refuses)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import gpuops.cli.app  # noqa: F401  (installs the fast path)
from gpuops import cli_values

SAMPLES = {
    str: ["", "x", "sqlite:///a b.db", "  spaced  ", "é", b"bytes", 3],
    float: ["0", "1", "-1", "+1", "1.5", "01", "007", "1e3", "1E-3", "+1.25e+2", "-0", "0.0", "1e308", "1e309",
            "1.", ".5", " 1", "1_0", "inf", "-inf", "nan", "0x1", "abc", "", 30.0, 2, True],
    int: ["0", "7", "-7", "+7", "007", "-0", "123456789012345678", "1234567890123456789012", "1.0", "1e3", " 7", "7_0",
          "abc", "", 5, 5.0, True],
    bool: [True, False, "true", "yes", "0", "maybe", 1],
}


def _typer_parts():
    from typer import _coercion, core
    from typer.models import OptionInfo

    return _coercion, core, OptionInfo


def _outcome(runtime, value):
    param = SimpleNamespace(multiple=False, nargs=1, name="opt", opts=["--opt"], human_readable_name="--opt",
                            get_error_hint=lambda ctx: "'--opt'")
    try:
        return ("ok", type(runtime.coerce(value, param=param, ctx=None)), runtime.coerce(value, param=param, ctx=None))
    except Exception as e:  # BadParameter: compare its message
        return ("error", type(e).__name__, getattr(e, "message", str(e)))


def _same(a, b) -> bool:
    """Equal outcomes; floats also by sign (-0.0) and nan."""
    if a[0] == b[0] == "ok" and a[1] is b[1] is float:
        x, y = a[2], b[2]
        return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
    return a == b


@pytest.mark.parametrize("annotation", list(SAMPLES), ids=lambda t: t.__name__)
def test_plain_values_read_as_typer_reads_them(annotation):
    _coercion, core, OptionInfo = _typer_parts()
    assert cli_values.install() is True
    descriptor = _coercion.resolve_type_descriptor(annotation, OptionInfo())
    ours = core.build_runtime_param(descriptor)
    theirs = _coercion.build_runtime_param(descriptor)  # typer's own, unwrapped
    assert type(ours).__name__ == "PlainRuntimeParam"
    for value in SAMPLES[annotation] + [None]:
        got, want = _outcome(ours, value), _outcome(theirs, value)
        assert _same(got, want), (annotation, value, got, want)


def test_ranged_parser_and_path_options_keep_typer_coercion():
    from pathlib import Path

    _coercion, core, OptionInfo = _typer_parts()
    for annotation, info in ((int, OptionInfo(min=1)), (float, OptionInfo(max=2.0)), (str, OptionInfo(parser=str.upper)),
                             (Path, OptionInfo())):
        descriptor = _coercion.resolve_type_descriptor(annotation, info)
        assert type(core.build_runtime_param(descriptor)).__name__ != "PlainRuntimeParam", (annotation, info)


def test_a_bad_number_still_gets_typers_message(cli):
    r = cli("watchdog", "--once", "--interval", "soon")
    assert r.returncode == 2
    assert r.stderr.startswith("error: Invalid value for '--interval': Input should be a valid number, unable to parse string as a number")
