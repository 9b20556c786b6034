"""Option values of the plain types (str, float, int, bool) coerced without importing pydantic.

typer 0.29 coerces every option and argument value through a pydantic ``TypeAdapter`` built on the
parameter's first use (``typer/core.py`` ``_TyperParameter.get_runtime_param`` ->
``typer/_coercion.py`` ``build_runtime_param`` -> ``typer/_adapters.py``), even for ``--config
PATH`` given as text or left unset. Importing pydantic for that costs ~60 ms, about what
`gpuops --help` takes in all, on every command with such an option (`ps`, `watchdog --once`,
`ledger month`). typer offers no setting for it (``click_type`` is gone in 0.29; a ``parser=``
is wrapped in a TypeAdapter too).

``install()`` wraps typer's ``build_runtime_param`` so that a parameter annotated exactly ``str``,
``float``, ``int`` or ``bool`` (no parser, range, choices, path or file options) first tries the
unambiguous spellings, with the result typer's adapter gives for them (``typer/_adapters.py``:
``_parse_cli_str`` returns a ``str`` as is; pydantic's lax ``float``/``int`` from the canonical
decimal text; a ``bool`` or ``float`` value as is). Any other value goes to the runtime typer
itself builds (then, lazily), so every error message and every unusual spelling (``" 1_000 "``,
``"inf"``, ``"yes"``) is typer's and pydantic's own. tests/core/test_cli_values.py checks both
against typer's adapters. A typer without these internals is left alone (slower, same results).
"""

from __future__ import annotations

import re
from typing import Any

_MISS = object()
# Decimal text both float() and pydantic read alike (no blanks, underscores, inf/nan, hex).
_FLOAT_TEXT = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?")
_INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")


def _str(value: Any) -> Any:
    return value if type(value) is str else _MISS


def _float(value: Any) -> Any:
    if type(value) is float:
        return value
    if type(value) is str and _FLOAT_TEXT.fullmatch(value):
        return float(value)
    return _MISS


def _int(value: Any) -> Any:
    if type(value) is int:
        return value
    if type(value) is str and _INT_TEXT.fullmatch(value):
        return int(value)
    return _MISS


def _bool(value: Any) -> Any:
    return value if type(value) is bool else _MISS


PLAIN = {str: _str, float: _float, int: _int, bool: _bool}


def plain_coercer(descriptor: Any):
    """The fast coercion for a typer ``TypeDescriptor``, or None when typer's own is needed."""
    info = descriptor.parameter_info
    fast = PLAIN.get(descriptor.annotation) if isinstance(descriptor.annotation, type) else None
    if fast is None or descriptor.file_annotation is not None:
        return None
    if getattr(info, "parser", None) is not None or getattr(info, "min", None) is not None or getattr(info, "max", None) is not None:
        return None
    return fast


def install() -> bool:
    """Wrap typer's runtime-parameter builder (once). Returns whether the fast path is in place."""
    try:
        from typer import _coercion, core
    except ImportError:  # pragma: no cover  (another typer layout: its own coercion, unchanged)
        return False
    build = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if build is None or base is None:  # pragma: no cover
        return False
    if getattr(build, "gpuops_plain", False):
        return True
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):  # type: ignore[misc, valid-type]
        """str/float/int/bool: canonical spellings here, anything else through typer's own runtime."""

        descriptor: Any = None
        fast: Any = None
        slow: list = field(default_factory=list)  # typer's runtime, built on the first unusual value

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            out = self.fast(value)
            if out is not _MISS:
                return out
            if not self.slow:
                self.slow.append(build(self.descriptor))
            return self.slow[0]._coerce_value(value, param=param, ctx=ctx)

    def build_plain_first(descriptor: Any):
        fast = plain_coercer(descriptor)
        if fast is None:
            return build(descriptor)
        return PlainRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                                 descriptor=descriptor, fast=fast)

    build_plain_first.gpuops_plain = True  # type: ignore[attr-defined]
    core.build_runtime_param = build_plain_first
    return True
