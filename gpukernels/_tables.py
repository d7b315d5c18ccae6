"""A table as plain data, drawn two ways: as a rich table (terminals: ``gpukernels trace``, the demo) and as
Markdown (notebooks, where a Table displays itself). One definition of the columns and cells, so a notebook and
the command line show the same table."""

from __future__ import annotations

from dataclasses import dataclass, field


#: Rows past which a table's Markdown is folded under a <details> line: 01_matmul's tables of 21 versions (and 23
#: kernels) open one after another made the notebook dozens of screens long.
LONG = 15


def cell(v) -> str:
    """How a value reads in a table: '-' for None or NaN, 3 significant digits, thousands separated."""
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


@dataclass
class Table:
    """``title``, ``columns``, ``rows`` (of values: ``cell`` formats those that are not strings yet) and an
    optional ``caption``; ``right``: the columns justified right in the rich rendering."""

    title: str
    columns: list
    rows: list = field(default_factory=list)
    caption: str = ""
    right: tuple = ()

    def __rich__(self):
        from rich.table import Table as RichTable

        t = RichTable(title=self.title or None, title_justify="left")
        for col in self.columns:
            t.add_column(col, justify="right" if col in self.right else "left")
        for row in self.rows:
            t.add_row(*(cell(v) for v in row))
        if self.caption:
            t.caption = self.caption
        return t

    def markdown(self) -> str:
        def esc(v) -> str:
            return cell(v).replace("|", "\\|").replace("\n", " ")

        lines = [f"**{self.title}**", ""] if self.title else []
        table = ["| " + " | ".join(map(esc, self.columns)) + " |", "|" + "---|" * len(self.columns)]
        table += ["| " + " | ".join(esc(v) for v in row) + " |" for row in self.rows]
        if len(self.rows) > LONG:  # folded: the reader opens it (Jupyter, GitHub and the course site alike)
            table = [f"<details><summary>{len(self.rows)} rows: show the table</summary>", "", *table, "",
                     "</details>"]
        lines += table
        if self.caption:
            lines += ["", f"_{self.caption}_"]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.markdown()


__all__ = ["Table", "cell"]
