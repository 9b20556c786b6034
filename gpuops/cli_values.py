"""Option values read without importing pydantic: text as given, a ``parser=`` option through its parser.

typer 0.29 reads every option and argument value through a pydantic ``TypeAdapter`` it builds on
the parameter's first use (``typer/core.py`` ``_TyperParameter.process_value`` ->
``typer/_coercion.py`` ``build_runtime_param`` -> ``typer/_adapters.py``), even for ``--config``
left unset. Importing pydantic for that costs ~90 ms, about what `gpuops ps` takes in all, on every
command with an option that is not a flag. typer has no setting for it.

``install()`` wraps typer's ``build_runtime_param`` for the two kinds of parameter the CLI
declares: one annotated exactly ``str`` (no parser, choices, path or file options: typer's adapter
returns a ``str`` as is) and a number read by its ``parser=`` (``gpuops.cli.options.Number``: the
one way the CLI types a number; typer's adapter only calls the parser). A ``bool`` or ``None``
value passes as is. Anything else (another type or value, a parser's ``ValueError``) goes to the
runtime typer itself builds, lazily, so its message is typer's own. A typer without these
internals is left alone (slower, same results). tests/core/test_cli_values.py checks both.
"""

from __future__ import annotations

from typing import Any

_MISS = object()


def plain_coercer(descriptor: Any):
    """The direct reading for a typer ``TypeDescriptor``, or None when typer's own is needed."""
    info = descriptor.parameter_info
    if (
        descriptor.file_annotation is not None
        or getattr(info, "min", None) is not None
        or getattr(info, "max", None) is not None
    ):
        return None
    parser = getattr(info, "parser", None)
    if parser is not None:
        return _parsed(parser)
    if descriptor.annotation is str:
        return lambda value: value if type(value) is str else _MISS
    if descriptor.annotation is bool:
        return lambda value: value if type(value) is bool else _MISS
    return None


def _parsed(parser):
    def read(value: Any) -> Any:
        try:
            return parser(value)
        except (ValueError, AssertionError):  # typer's own runtime words it (pydantic catches these)
            return _MISS

    return read


def install() -> bool:
    """Wrap typer's runtime-parameter builder (once). Returns whether the direct path is in place."""
    try:
        from typer import _coercion, core
    except ImportError:  # pragma: no cover  (another typer layout: its own coercion, unchanged)
        return False
    build: Any = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if build is None or base is None:  # pragma: no cover
        return False
    if getattr(build, "gpuops_plain", False):
        return True
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):  # type: ignore[misc, valid-type]  # typer's class, found at run time (its internals)
        """Text and parsed numbers here, anything else through typer's own runtime."""

        descriptor: Any = None
        fast: Any = None
        slow: list = field(default_factory=list)  # typer's runtime, built on the first value it must read

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
        return PlainRuntimeParam(
            parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, descriptor=descriptor, fast=fast
        )

    build_plain_first.gpuops_plain = True  # type: ignore[attr-defined]  # a mark on the function: installed once
    core.build_runtime_param = build_plain_first
    return True
