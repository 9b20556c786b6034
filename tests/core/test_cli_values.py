"""gpuops/cli_values.py: option values read without pydantic exactly as typer's own runtime reads
them, and every number on the command line typed the one way (``gpuops.cli.options.Number``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import gpuops.cli.app  # noqa: F401  (installs the direct path)
from gpuops import cli_values
from gpuops.cli.options import Number
from gpuops.errors import BadInput

NUMBERS = [
    "0",
    "7",
    "-7",
    "+7",
    "007",
    "-0",
    "1.5",
    "1e3",
    "4096.0",
    " 7",
    "7_0",
    "123456789012345678901234",
    "inf",
    "nan",
    "abc",
    "",
    5,
    5.0,
    2.5,
]


def _typer_parts():
    from typer import _coercion, core
    from typer.models import OptionInfo

    return _coercion, core, OptionInfo


def _outcome(runtime, value):
    param = SimpleNamespace(
        multiple=False,
        nargs=1,
        name="opt",
        opts=["--opt"],
        human_readable_name="--opt",
        get_error_hint=lambda ctx: "'--opt'",
    )
    try:
        got = runtime.coerce(value, param=param, ctx=None)
        return ("ok", type(got), got)
    except BadInput as e:
        return ("error", "BadInput", str(e))
    except Exception as e:  # typer's BadParameter: compare its message
        return ("error", type(e).__name__, getattr(e, "message", str(e)))


def _same(a, b) -> bool:
    """Equal outcomes; floats also by sign (-0.0) and nan."""
    if a[0] == b[0] == "ok" and a[1] is b[1] is float:
        x, y = a[2], b[2]
        return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
    return a == b


@pytest.mark.parametrize(
    "annotation,info,values",
    [
        (str, {}, ["", "x", "sqlite:///a b.db", "  spaced  ", "é", b"bytes", 3]),
        (int, {"parser": Number("--n", whole=True, fix="e.g. --n 3")}, NUMBERS),
        (float, {"parser": Number("--x", unit="hours", fix="e.g. --x 2")}, NUMBERS),
    ],
    ids=["str", "whole", "float"],
)
def test_values_read_as_typer_reads_them(annotation, info, values):
    _coercion, core, OptionInfo = _typer_parts()
    assert cli_values.install() is True
    descriptor = _coercion.resolve_type_descriptor(annotation, OptionInfo(**info))
    ours = core.build_runtime_param(descriptor)
    theirs = _coercion.build_runtime_param(descriptor)  # typer's own, unwrapped
    assert type(ours).__name__ == "PlainRuntimeParam"
    for value in values + [None]:
        got, want = _outcome(ours, value), _outcome(theirs, value)
        assert _same(got, want), (annotation, value, got, want)


def test_number_words_a_bad_value_with_its_fix():
    whole, hours = (
        Number("--batch", whole=True, fix="e.g. --batch 32"),
        Number("--max-hours", unit="hours", fix="e.g. --max-hours 2"),
    )
    assert (whole("1e3"), whole("4096.0"), whole(" 7"), whole(20), hours("2"), hours(30)) == (
        1000,
        4096,
        7,
        20,
        2.0,
        30.0,
    )
    assert type(hours(30)) is float and type(whole(4.0)) is int
    for bad in ("x", "2.5", "inf", "nan", "1e400"):
        with pytest.raises(BadInput, match=rf"^--batch must be a whole number, got '{bad}' \(e\.g\. --batch 32\)$"):
            whole(bad)
    with pytest.raises(BadInput, match=r"^--max-hours must be a number of hours, got 'two' \(e\.g\. --max-hours 2\)$"):
        hours("two")


def test_ranged_and_path_options_keep_typer_coercion():
    from pathlib import Path

    _coercion, core, OptionInfo = _typer_parts()
    for annotation, info in (
        (int, OptionInfo(min=1)),
        (float, OptionInfo(max=2.0)),
        (int, OptionInfo()),
        (Path, OptionInfo()),
    ):
        descriptor = _coercion.resolve_type_descriptor(annotation, info)
        assert type(core.build_runtime_param(descriptor)).__name__ != "PlainRuntimeParam", (annotation, info)


def _params():
    import typer

    def walk(cmd, path):
        if hasattr(cmd, "commands"):  # a group (typer's own click)
            for name, sub in cmd.commands.items():
                yield from walk(sub, path + [name])
        else:
            for p in cmd.params:
                yield " ".join(path), p

    yield from walk(typer.main.get_command(gpuops.cli.app.app), [])


def test_every_number_is_a_number_option_and_read_without_pydantic():
    from pathlib import Path
    from typing import List, Optional, get_args

    numbers, slow = [], []
    for cmd, p in _params():
        desc = p.type_descriptor
        if desc.annotation in (int, float) or set(get_args(desc.annotation)) & {int, float}:
            numbers.append(f"{cmd} {p.name}")
            assert isinstance(desc.parameter_info.parser, Number), (
                f"{cmd} {p.name}: type it with gpuops.cli.options.number()"
            )
        if cli_values.plain_coercer(desc) is None and desc.annotation not in (
            Path,
            Optional[Path],
            List[str],
            Optional[List[str]],
            list[str],
            list[str] | None,
        ):
            slow.append(f"{cmd} {p.name}: {desc.annotation}")
    assert len(numbers) >= 25 and "plan batch" in numbers and "watchdog interval" in numbers
    assert slow == []


def test_a_bad_number_is_one_line_with_its_fix(cli):
    r = cli("watchdog", "--once", "--interval", "soon")
    assert r.returncode == 2
    assert r.stderr == "error: --interval must be a number of seconds, got 'soon' (e.g. --interval 30)\n"
