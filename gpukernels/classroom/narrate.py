"""``gpukernels demo LESSON --classroom``: a narrated sequence in the terminal, one screen per idea, advancing
when the teacher presses Enter (``--no-wait``, or stdin not a terminal: straight through).

The screens: the grid map, coalescing, tiling and its phases, the missing barrier, occupancy, on a GPU the
measured speed against the library, and the demo's summary table. Every number is the tracer's (or the
compiler's, or the GPU's), from the same runs as the page: ``gpukernels.classroom.page_data``.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from .._tables import Table
from .._terminal import fit, percent


class Narrator:
    def __init__(self, console: Console, wait: bool):
        self.console, self.wait, self.n = console, wait, 0

    def screen(self, title: str, text: str, *renderables) -> None:
        self.n += 1
        self.console.rule(f"[bold]{self.n}. {title}")
        self.console.print(Panel(text, expand=False))
        for r in renderables:
            self.console.print(r)
        if self.wait:
            try:
                input("press Enter for the next step ")
            except EOFError:
                self.wait = False


def _grid_map(v: dict) -> str:
    """Which block computes which part of the output, as text: one character per block."""
    lines = []
    for launch in v["launches"]:
        gx, gy = launch["grid"][0], launch["grid"][1] if len(launch["grid"]) > 1 else 1
        lines.append(f"{launch['kernel']}: {gx} x {gy} blocks of {' x '.join(map(str, launch['block']))} threads")
        for y in range(min(gy, 8)):
            lines.append("  " + " ".join(f"{y * gx + x:>2}" for x in range(min(gx, 16))))
    return "\n".join(lines)


def run(lesson: str, versions=None, shape=None, wait: bool = True, console: Console | None = None) -> int:
    import gpukernels

    from . import PAGES, page_data_anywhere

    console = console or Console()  # the terminal's width: every table below is drawn to fit it
    wait = wait and sys.stdin.isatty()
    n = Narrator(console, wait)
    names = list(versions or PAGES[lesson][0])
    console.print(f"[bold]gpukernels classroom: {lesson}[/] -- {escape(' vs '.join(names))}, traced on the simulator")
    data = page_data_anywhere(lesson, names, shape)
    a, b = data["versions"]
    shape_txt = "x".join(map(str, data["shape"]))

    n.screen("The grid map", f"Each launch is a grid of blocks; each block owns a part of the output "
             f"({lesson} {shape_txt}).", *(Panel(_grid_map(v), title=v["name"], expand=False) for v in (a, b)))

    numbers = ("warp accesses", "sectors", "minimum", "efficiency")
    t = Table("Coalescing: 32-byte sectors per warp access (the tracer's count)",
              ["version", "line", "access", *numbers], right=numbers)
    for v in (a, b):
        for line in v["lines"]:
            if line["space"] == "global":  # the efficiency rounded as the page rounds it (12.5%, not 12% here)
                t.rows.append([v["name"], _short(line["location"]), f"{line['array']} {line['kind']}",
                               f"{line['requests']:,}", f"{line['sectors']:,}", f"{line['min_sectors']:,}",
                               percent(line["efficiency"], 1)])
    n.screen("Coalescing", "A warp's 32 lanes load together: when they read neighbouring words, a few 32-byte "
             "sectors serve them all; when they read a column, every lane pays its own sector.",
             fit(t, console.width, prose=["line"], more=f"gpukernels trace {lesson} names every line"))

    inputs = [g["name"] for g in a["global"] if not g["written"]]
    t = Table("Tiling: global loads per step (all blocks)", ["version", "step", *inputs], right=tuple(inputs))
    for v in (a, b):
        for s in v["steps"]:
            t.rows.append([v["name"], s["label"], *(f"{sum(s['loads'].get(g, [])):,}" for g in inputs)])
    numbers = ("loads", "elements", "loads / element")
    reuse = Table("Loads per element over the whole run (tracer)", ["version", "array", *numbers], right=numbers)
    for v in (a, b):
        for g in v["global"]:
            size = 1
            for d in g["shape"]:
                size *= d
            if g["loads"]:
                reuse.rows.append([v["name"], g["name"], f"{g['loads']:,}", f"{size:,}", f"{g['loads'] / size:.1f}"])
    n.screen("Tiling and its phases", "A block stages tiles in shared memory, waits at a barrier, and reuses each "
             "staged value many times: each row below is one step of the run, the loads it made. (The page, "
             f"`gpukernels demo {lesson} --html FILE`, draws these steps one by one.)",
             fit(t, console.width, prose=["step"]), fit(reuse, console.width))

    br = data["broken"]
    if br:
        t = Table(f"Races in {br['name']} (the tracer's hazards)",
                  ["hazard", "array", "elements", "first", "then"], right=("elements",))
        code: dict = {}  # each line of the races, once, under the table: code is not cut to fit a column
        for r in br["races"]:
            t.rows.append([r["hazard"], r["array"], f"{r['elements']:,}",
                           *(f"{_short(r[s]['location'])} {r[s]['kind']}" for s in ("first", "second"))])
            for s in ("first", "second"):
                code.setdefault(_short(r[s]["location"]), r[s]["source"].strip())
        listing = Text("\n".join(f"  {where}  {src}" for where, src in code.items()))
        n.screen("The missing barrier", f"The same kernel with {data['missing']} removed: threads read the tile "
                 "while others are still writing it.", fit(t, console.width, prose=["first", "then"]), listing)
    else:
        n.screen("The missing barrier", f"{lesson} has no broken variant here: see `gpukernels demo --classroom "
                 "matmul`.")

    try:
        from .. import resources

        rows = resources.report([lesson], versions={lesson: names}, what="the occupancy screen")
        occ = Console(width=console.width, record=True, file=_Null())
        resources.print_table(rows, occ)
        n.screen("Occupancy", "Registers and shared memory per block decide how many blocks an SM holds at once "
                 "(compiled for sm_90, no GPU needed).", occ.export_text())
    except Exception as err:  # no compiler here (a Mac): say so and go on
        n.screen("Occupancy", f"not available here: {escape(str(err).splitlines()[0] if str(err) else repr(err))}")

    from ..demo import demo_gpu, demo_sim, print_gpu_table, print_sim_table

    if gpukernels.MODE == "gpu":
        n.screen("Measured speed", "Every version timed on this GPU beside the library (cuBLAS / torch / cuDNN); "
                 "the summary below is that table.")
        big = tuple(gpukernels.LESSONS[lesson].SHAPES["demo_gpu"])
        rows = demo_gpu(lesson, big)
        console.rule("[bold]Summary")
        print_gpu_table(console, rows, lesson, big)
    else:
        n.screen("Measured speed", "On a GPU this screen times every version against the library; the simulator "
                 "has no speed to measure, so the summary counts traffic instead.")
        rows = demo_sim(lesson, tuple(data["shape"]))
        console.rule("[bold]Summary")
        print_sim_table(console, rows)
    return 0 if all(r["ok"] for r in rows) else 1


def _short(location: str) -> str:
    """``k01_naive.py:28`` for ``gpukernels/matmul/k01_naive.py:28``: the file and line, which is what a terminal
    column has room for (the page shows the whole path)."""
    return location.replace("\\", "/").rsplit("/", 1)[-1]


class _Null:
    def write(self, *_):
        pass

    def flush(self):
        pass
