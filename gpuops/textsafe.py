"""The one terminal sanitizer.

Text that came from a user, a box, a provider or a CSV file is printed with its control and bidi
characters shown escaped, never interpreted by the terminal.

``safe(text)`` is applied by every renderer that prints such text (``gpuops.render.ui``: ``ps``, the `up`
reporter's stage/step/warning lines, notes; ``gpuops.render.ledger``: ``ledger month / experiments /
show / sync`` tables; ``ledger note``). JSON output needs nothing (``json.dumps`` escapes them), and
CSV output stays byte-exact (it is data; the import must read back what the export wrote).
The job's own log lines are the user's program output and pass through unchanged.
``check_name(text, flag)`` refuses such characters in names (``--experiment``, card/provider/
experiment names from an imported CSV) with a one-line error.

Which characters: Unicode category Cc (C0 controls such as ESC and BEL, DEL, C1 controls such as
U+009B CSI, which some terminals honour like ESC [), line/paragraph separators (Zl, Zp), and the
bidirectional formatting characters of Unicode UAX #9 (U+061C, U+200E/F, U+202A-U+202E,
U+2066-U+2069), which reorder what follows (Trojan Source, CVE-2021-42574). Standard library only.
"""

from __future__ import annotations

import re
import unicodedata

# UAX #9 explicit directional formatting characters and marks.
BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])

# ``unsafe_char`` as one character class, for scanning many cells in C (``ledger import``): Cc is
# U+0000-U+001F and U+007F-U+009F, Zl is U+2028, Zp U+2029 (fixed by Unicode's stability policy),
# plus BIDI. tests/core/test_textsafe.py checks it against ``unsafe_char`` for every code point.
UNSAFE_CLASS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
UNSAFE = re.compile(f"[{UNSAFE_CLASS}]")


def unsafe_char(ch: str) -> bool:
    """True for a character a terminal would act on or reorder instead of showing."""
    return ord(ch) in BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp")


def _escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def safe(text: object) -> str:
    """``text`` (str() of it) with every unsafe character written as ``\\xNN`` / ``\\uNNNN``.

    Ordinary text, including non-Latin scripts and emoji, is unchanged."""
    s = text if isinstance(text, str) else str(text)
    if UNSAFE.search(s) is None:
        return s  # nearly every cell: one scan in C
    return UNSAFE.sub(lambda m: _escape(m.group()), s)


def safe_tree(obj):
    """``obj`` (dicts, lists, tuples, scalars) with every string passed through ``safe``."""
    if isinstance(obj, str):
        return safe(obj)
    if isinstance(obj, dict):
        return {k: safe_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(safe_tree(v) for v in obj) if isinstance(obj, list) else tuple(safe_tree(v) for v in obj)
    return obj


def bad_chars(text: str) -> list[str]:
    """The unsafe characters of ``text``, escaped (e.g. ``['\\u202e']``); empty when clean."""
    return [_escape(c) for c in text if unsafe_char(c)]


def check_name(text: str, what: str, example: str = "llama-sweep") -> str:
    """``text`` when it has no unsafe character, else BadInput naming them (exit 2)."""
    bad = bad_chars(text)
    if bad:
        from gpuops.errors import BadInput

        raise BadInput(
            f"{what} contains control or bidi characters ({', '.join(dict.fromkeys(bad))}): {safe(text)}",
            f"use visible text only, e.g. {example}",
        )
    return text
