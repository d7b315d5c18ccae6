"""Tables drawn to the terminal's width. rich measures the terminal (``COLUMNS``, or 80 when the output is piped);
left to itself it squeezes every column of a wide table alike, so that a 21-row table of prose wrapped each row over
six to nine lines at 80 columns. Here the columns a reader scans -- names, numbers -- keep their full width, and the
columns of prose (what a step changes, why a kernel is limited) take what is left, one line per row, cut with an
ellipsis; where too little is left for them they are left out, and the table says which command shows them."""

from __future__ import annotations

from typing import Iterable

#: The narrowest a prose column is still worth drawing at (characters).
MIN_PROSE = 12
#: Columns of a rich table with ``box.SIMPLE_HEAD``, no edge and no edge padding: each column after the first adds
#: its padding (2) and a separator (1).
GAP = 3


def _width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in str(text).splitlines()), default=0)


def fit(table, width: int, prose: Iterable[str] = (), drop_constant: Iterable[str] = (), more: str = "",
        keep_end: Iterable[str] = ()):
    """``table`` (a `gpukernels._tables.Table`) as a rich table at most ``width`` characters wide, one line per row.

    ``prose``: the columns that take the width left over (cut with "..." to one line, or left out when less than
    `MIN_PROSE` is left); ``drop_constant``: columns left out when every row holds the same value (the lesson of a
    one-lesson table); ``more``: where the reader finds a prose column that was cut or left out, for the caption;
    ``keep_end``: prose columns cut at their start instead (a source location keeps its file and line:
    ``...k03_tiled.py:34``)."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    from ._tables import cell

    prose = [c for c in prose if c in table.columns]
    rows = [[cell(v) for v in row] for row in table.rows]
    keep = [i for i, c in enumerate(table.columns)
            if not (c in drop_constant and len({row[i] for row in rows}) <= 1 and rows)]
    # a key column is as wide as its longest cell, or its header's longest word (the header wraps, not the cells)
    key = {i: max([_width(row[i]) for row in rows] + [max(map(len, str(table.columns[i]).split()), default=1)])
           for i in keep if table.columns[i] not in prose}
    cells = {i: max([_width(row[i]) for row in rows] + [1]) for i in key}
    spent = sum(key.values()) + GAP * (len(key) - 1)
    while spent > width:  # still too wide: a header longer than its cells breaks inside a word (blocks/ SM)
        i = max(key, key=lambda i: key[i] - cells[i])
        if key[i] <= max(cells[i], 4):
            break
        key[i] -= 1
        spent -= 1
    free = [i for c in prose for i in keep if table.columns[i] == c]  # in the order of `prose`: the first kept longest
    natural = {i: max([_width(row[i]) for row in rows] + [len(str(table.columns[i]))]) for i in free}
    while free and width - spent - GAP * len(free) < sum(min(natural[i], MIN_PROSE) for i in free):
        free.pop()  # too little room for them all: the last of `prose` is left out first
    room = width - spent - GAP * len(free)
    widths = dict(key)
    for n, i in enumerate(sorted(free, key=lambda i: natural[i])):  # the narrowest first: what it leaves goes on
        widths[i] = min(natural[i], room // (len(free) - n))
        room -= widths[i]
    cut = len(free) < len(prose) or any(widths[i] < natural[i] for i in free)
    # cells and titles as Text: a line of source (``a_tile[ty, tx]``) is not rich markup
    t = RichTable(title=Text(table.title) if table.title else None, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False)
    shown = [i for i in keep if i in widths]
    for i in shown:
        name = table.columns[i]
        if i in key:
            t.add_column(name, justify="right" if name in table.right else "left", width=widths[i],
                         overflow="fold")  # the header wraps (or folds inside a word); the cells fit
        else:
            t.add_column(name, width=widths[i], no_wrap=True, overflow="ellipsis")
    for row in rows:
        for i in free:
            if table.columns[i] in keep_end and _width(row[i]) > widths[i]:
                row[i] = "…" + row[i][len(row[i]) - widths[i] + 1:]
        t.add_row(*(Text(row[i]) for i in shown))
    caption = [table.caption] if table.caption else []
    if cut and more:
        left_out = [c for c in prose if c not in [table.columns[i] for i in free]]
        shortened = [table.columns[i] for i in free if widths[i] < natural[i]]
        what = "; ".join(f"{' and '.join(repr(c) for c in names)} {verb}" for names, verb in
                         ((left_out, "left out"), (shortened, "cut")) if names)
        caption.append(f"({what} at this width: {more})")
    if caption:
        t.caption = " ".join(caption)
        t.caption_justify = "left"
    return t


def percent(x: float, digits: int = 0) -> str:
    """``x`` (a share, 0.125) as a percentage with ``digits`` decimals, rounded as the classroom page rounds it
    (JavaScript's ``toFixed``: the nearest, a half up -- 12.5% to 13%), so that the terminal and the page show one
    number. Python's own ``f"{x:.0%}"`` rounds a half to even: 12%."""
    from decimal import ROUND_HALF_UP, Decimal

    value = Decimal(100 * x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return f"{value}%"
