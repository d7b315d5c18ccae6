"""Classroom demos: one self-contained interactive page per lesson, and a narrated sequence in the terminal.

    gpukernels demo matmul --html matmul.html                          # naive beside tiled
    gpukernels demo matmul --version tiled --version conflict_free --size 16 --html tc.html
    gpukernels demo --classroom matmul                                 # the narrated sequence (Enter steps)
    gpukernels.classroom.show("matmul")                                # the same page in a notebook

The page is built from the tracer's recorded accesses of the real, unchanged kernels run on the simulator
(``gpukernels.classroom.data`` says what it embeds and how each number relates to the tracer's). It shows two
versions side by side on the same controls: the grid of blocks and a block's warps (choose a block, a warp or a
thread: the elements it reads and writes light up), a slider over barrier intervals grouped into phases (what the
shared tiles hold, which global elements are loaded, the running count of loads per element), one warp access at
a time (lanes to 32-byte sectors or to banks, with the tracer's efficiency and conflict degree), and a broken
variant with a barrier removed, its racing elements drawn on the tile beside the source lines the tracer names.

Why plain SVG and a page of hand-written JavaScript, not plotly, bokeh or matplotlib's animation
-------------------------------------------------------------------------------------------------------------
* Weight and offline use: the page must open from a USB stick with no network, so any library is inlined into
  every page -- plotly.js is ~3.5 MB, bokeh's inline resources ~1 MB. The script here is ~30 KB; a matmul page
  is a few hundred KB, nearly all of it the traced data.
* The views are linked: one slider, one selection and one keyboard drive two versions and the race view. In
  plotly or bokeh that linking is itself JavaScript (CustomJS callbacks), so we would write the same code and
  ship a library under it. matplotlib's ``to_jshtml`` only plays pre-rendered frames: no clicking a block.
* Testable: every count is a DOM element with an id, so the browser test reads what the student sees and
  compares it with the tracer's numbers.
Nothing is added to the dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: lesson -> (default pair of versions, page size, the word for one phase). Sizes keep the event log small (the
#: tracer's event log holds every access: see data.MAX_EVENTS) and give the slider several steps to walk: a kernel
#: without barriers is one step, so each default has a version with several barrier phases.
PAGES = {
    # K = 64: four K phases of tiled's 16 x 16 tiles (at K = 16 the page has a single step)
    "matmul": (("naive", "tiled"), (32, 32, 64), "K phase"),
    # rows of 1024: optimized is then `registers`, a block per row whose max and sum are block reductions through
    # shared memory (two phases). Rows of up to 128 take vector_rows (16-byte loads, no barrier): one step;
    # --size 32,64 shows its float4 accesses
    "softmax": (("naive", "optimized"), (8, 1024), "phase"),
    # a 3x3 filter with padding 1, so that the staged input tile has its halo; C = 8 is two chunks of fused_direct's
    # CB = 4 channels. ~30 s and ~1.7 GB on 2 busy cores: fused_direct's 256 threads walk PX x KB accumulators in
    # local arrays (~60 accesses per filter tap and thread), which the page's log leaves out (trace(local=False))
    # but the simulator still runs
    "cbr": (("naive", "fused_direct"), (1, 8, 6, 6, 4, 3, 3), "channel chunk"),
    # one warp's mma.sync fragments straight from global memory beside the swizzled shared tiles read by ldmatrix;
    # K = 96: three k tiles of 32 through the shared tiles
    "tensor_core": (("mma_global", "swizzled"), (32, 32, 96), "k tile"),
    # a warp per query row streaming K and V from global memory, beside a block of 32 rows sharing each K/V tile
    # staged in shared memory; Sk = 96 at D = 16: three K/V tiles of 32 keys, two barriers each (one head: a second
    # would draw the same walk again and double the page's tracing)
    "attention": (("fused_rows", "tiled"), (1, 1, 32, 96, 16), "K/V tile"),
}


def page_data(lesson: str, versions=None, shape=None, seed: int = 0, broken: bool = True) -> dict:
    """The data one page embeds: each version traced on the simulator (plus the lesson's broken variant)."""
    import gpukernels

    from ..check import version_inputs
    from . import data, timeline
    from .racy import BROKEN

    mod = gpukernels.LESSONS[lesson]
    default, size, word = PAGES[lesson]
    versions = list(versions or default)
    shape = tuple(shape or size)
    if hasattr(mod, "flops") and mod.flops(shape) // 4 > data.MAX_EVENTS:  # at least one access per 4 FLOPs
        raise data.TooLarge(f"{lesson} at {'x'.join(map(str, shape))} would record millions of accesses (a page "
                            f"holds at most {data.MAX_EVENTS:,}); choose a smaller --size")
    inputs = mod.make_inputs(shape, seed)
    out = {"lesson": lesson, "shape": list(shape), "versions": [],
           "title": f"{lesson} {'x'.join(map(str, shape))}: {' vs '.join(versions)}"}
    for name in versions:
        v = mod.VERSIONS[name]
        # the inputs this version takes (attention's tensor-core steps: float16 copies of the same values)
        t, _ = data.record(v, version_inputs(lesson, name, inputs), f"{lesson}.{name}")
        out["versions"].append(data.version_data(t, name, v.idea, word, kernel_files=_kernel_files(v)))
        out.setdefault("timelines", {})[name] = _timeline(t)
    b = BROKEN.get(lesson) if broken else None
    out["broken"], out["missing"] = None, ""
    if b is not None:
        t, _ = data.record(b.run, inputs, f"{lesson}.{b.name}")
        out["broken"] = data.version_data(t, b.name, f"{b.of} with {b.missing} removed", word, races=True)
        out["missing"] = b.missing
    return out


def _timeline(t) -> str:
    """The SVG timeline of a traced version ('' if none applies): its consumer warpgroups' turns where named barriers
    hand them back and forth (attention 11, ping_pong); else cp.async per commit group, or the TMA ring per stage
    (tensor_core 7-9); else the consumer warpgroups fed by TMA without turns (attention 10, to compare with 11)."""
    from .. import _pplog
    from . import timeline

    events = t.async_events()
    sched = _pplog.schedule(events)
    if sched.turns:
        return timeline.pingpong_svg(sched)
    return timeline.svg(events) or timeline.ring_svg(t.ring()) or timeline.pingpong_svg(sched)


def _kernel_files(v) -> set:
    """The files (as the tracer names them) of a version's kernels: the lines a student wrote."""
    from ..sim._source import short_path

    files = set()
    for k in getattr(v, "kernels", ()) or ():
        code = getattr(getattr(k, "py_func", k), "__code__", None)
        if code is not None:
            files.add(short_path(code.co_filename))
    return files


def build_page(lesson: str, versions=None, shape=None, seed: int = 0, next_page: str | None = None) -> str:
    """The page's HTML (one string, everything inlined), on a simulator or a GPU machine; ``next_page`` links the
    next lesson's page (a file beside it)."""
    from .page import render

    return render(page_data_anywhere(lesson, versions, shape, seed), next_page)


def next_lesson(lesson: str) -> str | None:
    """The lesson whose page follows ``lesson``'s in the course (the order of PAGES), or None after the last."""
    order = list(PAGES)
    i = order.index(lesson) if lesson in order else len(order)
    return order[i + 1] if i + 1 < len(order) else None


def write_page(path, lesson: str, versions=None, shape=None, seed: int = 0, next_page: str | None = None) -> Path:
    path = Path(path)
    path.write_text(build_page(lesson, versions, shape, seed, next_page), encoding="utf-8")
    return path


@dataclass(repr=False)
class Page:
    """A classroom page in a notebook: displays as an iframe holding the page (``srcdoc``)."""

    html: str
    height: int = 1000

    def __repr__(self) -> str:  # the text/plain twin of the iframe in a notebook: not a second copy of the page
        return f"<classroom page, {len(self.html) // 1024} KB: shown as an iframe in a notebook; .save(path) writes it>"

    def _repr_html_(self) -> str:
        import html

        # at most 85% of the window's height: on a 720-px projector the page scrolls inside its frame, the notebook
        # around it stays in view
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" style="width:100%;'
                f'height:min({self.height}px, 85vh);border:1px solid #999" sandbox="allow-scripts"></iframe>')

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(self.html, encoding="utf-8")
        return path


def show(lesson: str, versions=None, shape=None, seed: int = 0, height: int = 1000) -> Page:
    """The lesson's classroom page for a notebook cell: ``gpukernels.classroom.show("matmul")``. The kernels
    are traced on the simulator; on a GPU machine in a simulator child process."""
    from .page import render

    return Page(render(page_data_anywhere(lesson, versions, shape, seed)), height)


def page_data_anywhere(lesson: str, versions=None, shape=None, seed: int = 0) -> dict:
    """`page_data` here on the simulator, or on a GPU machine (numba.cuda picks its target once per process,
    and the tracer needs the simulator) in a simulator child process that sends it back as JSON."""
    import gpukernels

    if gpukernels.MODE != "gpu":
        return page_data(lesson, versions, shape, seed)
    import json

    from .._modes import run_in_mode

    code = ("import json, sys; from gpukernels.classroom import page_data; json.dump(page_data("
            f"{lesson!r}, {list(versions) if versions else None!r}, {tuple(shape) if shape else None!r}, {seed!r}), "
            "sys.stdout)")
    proc = run_in_mode("sim", code)
    if proc.returncode != 0:
        from .._errors import LaunchError
        from .data import TooLarge

        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        if last.startswith(f"{TooLarge.__module__}.TooLarge: "):  # a size too large: the same one line as here
            raise TooLarge(last.split(": ", 1)[1])
        if last.startswith(f"{LaunchError.__module__}.LaunchError: "):  # a shape the kernels refuse: the same
            raise LaunchError(last.split(": ", 1)[1])
        raise RuntimeError(f"tracing in a simulator child failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)
