"""The compiled class of unsafe characters agrees with ``unsafe_char`` on every code point."""

from __future__ import annotations

from gpuops.textsafe import UNSAFE, unsafe_char


def test_the_compiled_class_is_unsafe_char_for_every_code_point():
    disagree = [hex(c) for c in range(0x110000) if bool(UNSAFE.match(chr(c))) != unsafe_char(chr(c))]
    assert disagree == []
