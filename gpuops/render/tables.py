"""The one rule every gpuops table follows: a number or an id is never cut.

Every table (``ledger month / experiments / show / sessions / sync``, ``plan``, ``plan --model all``,
``offers``, ``ps``) is described as columns (``Col``) and rows of cells and printed by ``print_table``:

- ``num`` and ``id`` columns (amounts, hours, tokens, counts, session and offer ids) get a fixed
  width equal to their longest cell: they never wrap and are never cut;
- ``name`` columns (experiment, card, model) and ``text`` columns (conclusion, formula, detail)
  wrap at spaces and fold inside a long word: every character is still shown;
- a header is never broken inside a word: each column is at least as wide as its header's longest
  word (``$/Mtok all-in`` may stand on two lines, ``experiment`` never becomes ``experim/ent``);
- when the columns do not fit the terminal, columns are left out in their stated priority order
  (highest ``drop`` first; ``drop=0`` is never left out) and one line under the table names them,
  or, with ``fold=True``, they are shown in a continuation table keyed by the table's first column.

The width is the console's (``COLUMNS`` when stdout is not a terminal; rich's default is 80).
rich is imported inside the functions (CLI start-up is a hot path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import JustifyMethod

NUM, ID, NAME, TEXT = "num", "id", "name", "text"
# Narrowest a wrapping column gets before columns are left out, in terminal cells: a name up to
# NAME_MIN cells (a card, a model, most experiment names) is kept on one line; a conclusion gets
# two or three words a line.
NAME_MIN = 20
TEXT_MIN = 16
LEFT_OUT_HINT = "a wider terminal or --format json shows them"


@dataclass(frozen=True)
class Col:
    """One column.

    ``kind``: ``num``/``id`` (never wrapped or cut), ``name``/``text`` (wrap, fold). ``drop``: 0
    never left out; otherwise the higher, the earlier it is left out when too narrow. ``justify``:
    default right for ``num``, left for the rest. ``style``: a rich style name."""

    header: str
    kind: str = NUM
    drop: int = 0
    justify: JustifyMethod | None = None
    style: str | None = None


def _cell(cell: Any) -> str:
    """A cell's text: literal, with control and bidi characters shown escaped.

    (``gpuops.textsafe.safe``: notes, names and provider text never act on the terminal)."""
    from gpuops.textsafe import safe

    return "" if cell is None else safe(cell if type(cell) is str else str(cell))


def _header_min(header: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(w) for w in header.split()), default=1)


def _line_len(text: str) -> int:
    """Terminal cells of the longest line of ``text``."""
    from rich.cells import cell_len

    if "\n" not in text:
        return cell_len(text)
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _bounds(col: Col, cells: list) -> tuple[int, int]:
    """(minimum, preferred) content width of a column, in terminal cells."""
    from rich.cells import cell_len

    head = _header_min(col.header)
    longest = max((_line_len(c) for c in cells), default=0)
    if col.kind in (NUM, ID):  # exactly its longest cell (or header word): never wrapped, never cut
        w = max(head, longest)
        return w, w
    floor = NAME_MIN if col.kind == NAME else TEXT_MIN
    lo = max(head, min(floor, longest))
    return lo, max(lo, longest, cell_len(col.header))


def overhead(n_cols: int) -> int:
    """Cells a rich table with a box adds to its columns.

    A bar per column plus one, and one space of padding either side of every cell."""
    return 3 * n_cols + 1


def layout(cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int) -> tuple[list[int], list[int], list[int]]:
    """Which columns fit in ``width`` terminal cells, and how wide each is.

    (indices of the columns shown, their content widths, indices left out, in the order they were
    left out) for ``width`` terminal cells. Columns go in descending ``drop`` (ties: the rightmost
    first) until the minimum widths fit; ``drop=0`` columns always stay. Wrapping columns share what
    is left, up to their longest line."""
    texts = [[_cell(r[i]) for r in rows] for i in range(len(cols))]
    bounds = [_bounds(c, texts[i]) for i, c in enumerate(cols)]
    shown = list(range(len(cols)))
    order = sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: (-cols[i].drop, -i))
    left: list[int] = []
    for i in order:
        if sum(bounds[j][0] for j in shown) + overhead(len(shown)) <= width:
            break
        shown.remove(i)
        left.append(i)
    widths = {j: bounds[j][0] for j in shown}
    spare = width - overhead(len(shown)) - sum(widths.values())
    for kind in (NAME, TEXT):  # names get spare cells first (short), then text shares the rest
        grow = [j for j in shown if cols[j].kind == kind and bounds[j][1] > widths[j]]
        while spare > 0 and grow:  # one cell each round
            for j in list(grow):
                if spare <= 0:
                    break
                widths[j] += 1
                spare -= 1
                if widths[j] >= bounds[j][1]:
                    grow.remove(j)
    return shown, [widths[j] for j in shown], left


class _Line:
    """A cell that fits on one line of its column, drawn as one segment with its padding.

    ``text`` is ``cells`` terminal cells wide; the table gives the cell its column's width and
    justification (``options``), the padding is one space either side, as rich's own ``Padding``
    would draw it. A column narrowed below the text (a table wider than the terminal, which rich
    shrinks) gets rich's Padding and Text after all."""

    __slots__ = ("cells", "text")

    def __init__(self, text: str, cells: int) -> None:
        self.text, self.cells = text, cells

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        room = options.max_width - 2 - self.cells
        if room < 0:  # the table was narrowed below its columns' widths: rich wraps it, as it would have
            from rich.padding import Padding
            from rich.text import Text

            yield from Padding(Text(self.text), (0, 1)).__rich_console__(console, options)
            return
        if options.justify == "right":
            yield Segment(" " * (room + 1) + self.text + " ")
        elif options.justify == "center":
            yield Segment(" " * (room // 2 + 1) + self.text + " " * (room - room // 2 + 1))
        else:
            yield Segment(" " + self.text + " " * (room + 1))

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement(self.cells + 2, self.cells + 2)


def _drawn(text: str, width: int):
    """A cell of a column ``width`` cells wide, as the table draws it.

    A ``_Line`` when it fits on one line, else its Text inside rich's Padding (wrapped and folded
    by rich)."""
    from rich.padding import Padding
    from rich.text import Text

    if "\n" not in text:
        n = _line_len(text)
        if n <= width:
            return _Line(text, n)
    return Padding(Text(text), (0, 1))


def build(
    title: str | None,
    cols: Sequence[Col],
    rows: Sequence[Sequence[Any]],
    width: int,
    fold: bool = False,
    _continued: bool = False,
    header: bool = True,
) -> tuple[list, list[str]]:
    """The rich tables for ``rows`` at ``width`` cells and the headers left out.

    With ``fold``, left-out columns go to continuation tables that repeat the first column (give it
    ``drop=0``); only what fits in no table at all is left out."""
    from rich.table import Table

    if fold:  # every column but the key may move to a continuation table, the rightmost first
        cols = [c if i == 0 or c.drop else Col(c.header, c.kind, 1, c.justify, c.style) for i, c in enumerate(cols)]
        cols[0] = Col(cols[0].header, cols[0].kind, 0, cols[0].justify, cols[0].style)
    rows = [[_cell(c) for c in r] for r in rows]  # each cell made safe once: measured, then drawn
    shown, widths, left = layout(cols, rows, width)
    if _continued and len([j for j in shown if j != 0]) == 0:
        return [], [c.header for c in cols[1:]]
    from rich.padding import Padding
    from rich.text import Text

    # The padding (one cell either side) is drawn by each cell, not by the table: a cell that fits
    # on one line is one ready segment (``_Line``: no wrapping, measuring or padding pass per cell,
    # which were most of a 200-row table's cost), the rest (headers, cells that wrap) rich's own
    # Padding around the Text, what the table itself would have made of them.
    t = Table(title=title, title_justify="left", show_header=header, padding=(0, 0))
    for j, w in zip(shown, widths):
        c = cols[j]
        # Widths are set here: a num/id column is as wide as its longest cell, so wrapping is
        # allowed everywhere (headers wrap at spaces; a cell of a wrapping column folds).
        t.add_column(
            Padding(Text(c.header), (0, 1)),
            justify=c.justify or ("right" if c.kind == NUM else "left"),
            width=w + 2,
            overflow="fold",
            style=c.style,
        )
    for r in rows:
        t.add_row(*[_drawn(r[j], w) for j, w in zip(shown, widths)])
    out = [t]
    if not left or not fold:
        return out, [cols[i].header for i in left]
    rest = [0] + sorted(i for i in left if i != 0)
    more, names = build(
        title if _continued else (title or "") + " (continued)",
        [cols[i] for i in rest],
        [[r[i] for i in rest] for r in rows],
        width,
        fold=True,
        _continued=True,
        header=header,
    )
    return out + more, names


def print_table(
    console,
    title: str | None,
    cols: Sequence[Col],
    rows: Sequence[Sequence[Any]],
    fold: bool = False,
    hint: str = LEFT_OUT_HINT,
    header: bool = True,
) -> list[str]:
    """Print the table on ``console`` at its width, then, when columns were left out, one line naming them and ``hint``.

    ``header=False``: a key/value table. Returns the headers left out (empty when everything is
    shown)."""
    tables, left = build(title, cols, rows, console.width, fold=fold, header=header)
    for t in tables:
        console.print(t)
    if left:
        console.print(f"left out for width: {', '.join(left)} ({hint})", markup=False, highlight=False)
    return left


def console(stderr: bool = False):
    """A console for tables.

    User text literal (no markup, no highlighting), lines never soft- wrapped by the console itself
    (the table wraps its own cells)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False, markup=False)


def ranked(cols: Sequence[Col], drop_order: Sequence[str]) -> list[Col]:
    """``cols`` with ``drop`` set from ``drop_order`` (headers, the first one left out first).

    A header not in ``drop_order`` is never left out."""
    rank = {h: len(drop_order) - i for i, h in enumerate(drop_order)}
    return [Col(c.header, c.kind, rank.get(c.header, 0), c.justify, c.style) for c in cols]
