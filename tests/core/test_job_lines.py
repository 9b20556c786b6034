"""The job's output as lines on the terminal: whole UTF-8 characters whatever the read boundaries."""

from __future__ import annotations

import pytest

from gpuops.box.base import MAX_LINE_CHARS, OutputLines

# 2-, 3- and 4-byte characters: a 64 KiB cut lands inside one of them unless the decoder holds it.
TEXT = "é€😀" * 30_000  # 270 000 bytes, 90 000 characters, no newline until the end


def _lines(data: bytes, size: int, max_chars: int = MAX_LINE_CHARS) -> list[str]:
    out: list[str] = []
    lines = OutputLines(out.append, max_chars)
    for i in range(0, len(data), size):
        lines.feed(data[i : i + size])
    lines.close()
    return out


@pytest.mark.parametrize("size", [4093, 64 * 1024, 1 << 20])
def test_a_long_line_of_multibyte_characters_is_never_cut_inside_a_character(size):
    # Seen: a line longer than 64 KiB shown with U+FFFD at each 64 KiB cut (bytes split, then decoded).
    data = (TEXT + "\nafter\n").encode()
    out = _lines(data, size)
    assert "\ufffd" not in "".join(out)
    assert "".join(out[:-1]) == TEXT and out[-1] == "after"
    if size <= 64 * 1024:  # its end not read within 64 Ki characters: the line is shown in pieces of that many
        assert out[:-1] == [TEXT[:MAX_LINE_CHARS], TEXT[MAX_LINE_CHARS:]]
    else:  # one read holds the whole line
        assert out[:-1] == [TEXT]


def test_a_character_read_one_byte_at_a_time_arrives_whole():
    assert _lines("é€😀\n".encode() * 3, 1, max_chars=2) == ["é€", "😀"] * 3


def test_lines_and_a_last_line_without_newline_come_whole_and_in_order():
    assert _lines("a\n\nß b\nend".encode(), 3) == ["a", "", "ß b", "end"]
    assert _lines(b"", 1) == []


def test_bytes_that_are_not_utf8_are_replaced_not_dropped():
    assert _lines(b"ok\xff\n\xe2\x82", 1) == ["ok\ufffd", "\ufffd"]  # a character cut by the end: U+FFFD


def test_pieces_of_a_line_are_bounded_in_characters():
    out = _lines(("x" * 25 + "\n").encode(), 4, max_chars=10)
    assert out == ["x" * 10, "x" * 10, "x" * 5]
