"""What every figure family shares: the figure factory, the greyscale-safe palette, the lesson registry,
the one-line "cannot be drawn here" figure, and saving small PNGs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure


# Greyscale-safe: a perceptually uniform colormap for quantities, hatching and markers for categories.
CMAP = "viridis"
CMAP_DIVERGE = "cividis"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
HATCHES = ["", "///", "...", "xxx", "\\\\\\", "++", "ooo", "---"]
GREYS = ["0.15", "0.45", "0.7", "0.9", "0.3", "0.6", "0.8", "0.05"]
LIMIT_MARKERS = {"threads": "o", "blocks": "D", "registers": "s", "shared memory": "^", "barriers": "v"}

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"

# How a figure is shown: a notebook's PNG at gpukernels.notebook.DPI = 80 dots per inch (cropped to its contents),
# the gallery's (``make plots``, `_save_png`) at 90, each at its own size up to DISPLAY_PX wide -- the course site's
# column and a notebook's output area -- and scaled down to that beyond. Every text is sized with `text_pt` so that
# it is at least LEAST_PX tall as displayed; tests/test_viz.py checks every figure's texts, and that none overlap.
DISPLAY_PX = 940
LEAST_PX = 10
SHOWN_DPI = (80, 90)


def text_pt(fig: Figure, pt: float = 0.0) -> float:
    """A font size in points, at least ``pt``, that ``fig``'s PNG displays at LEAST_PX or more however it is shown
    (9 pt for a figure up to 11.5 inches wide, more for a wider one, which is scaled down)."""
    w = fig.get_figwidth() + 0.2  # a notebook's PNG is cropped to its contents, padded 0.1 inch a side
    px_per_pt = min(min(dpi, DISPLAY_PX / w) for dpi in SHOWN_DPI) / 72
    return max(pt, math.ceil(10 * LEAST_PX / px_per_pt) / 10)


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    fig.gpukernels_data = {}
    return fig


def _lessons():
    import gpukernels

    return gpukernels.LESSONS


def _versions(lesson: str) -> list[str]:
    return list(_lessons()[lesson].VERSIONS)


def _naive_and_best(lesson: str) -> tuple[str, str]:
    names = _versions(lesson)
    return names[0], names[-1]


def _not_available(title: str, why: str) -> Figure:
    """A figure that says, in one line, why it cannot be drawn here (a notebook's Run All goes on past it);
    ``unavailable(fig)`` returns the line, so that ``gpukernels plots`` and the demo skip it instead of saving it."""
    import textwrap

    fig = _figure(9, 1.6)
    fig.text(0.01, 0.5, textwrap.fill(f"{title}: {why}", 100), fontsize=text_pt(fig), va="center", family="monospace")
    fig.gpukernels_data = {"unavailable": why}
    return fig


def _suptitle(fig: Figure, *lines: str, fontsize: float = 10) -> None:
    """The figure's title, left-aligned, each line wrapped to the figure's width (a figure of two panels is
    narrower than one of four): what it shows, then what to notice."""
    import textwrap

    fontsize = text_pt(fig, fontsize)
    width = max(40, int(fig.get_figwidth() * 72 / (0.6 * fontsize)))
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in lines if line), fontsize=fontsize, x=0.01,
                 ha="left")


def unavailable(fig: Figure) -> str | None:
    """Why ``fig`` is only a note (the compiler is not installed here), or None for a real figure."""
    return (getattr(fig, "gpukernels_data", None) or {}).get("unavailable")


def _pct(x: float) -> str:
    """12.5 % stays 12.5 %, 75 % stays 75 %."""
    v = 100 * x
    return f"{v:.0f}%" if abs(v - round(v)) < 0.05 else f"{v:.1f}%"


def _shades(n: int) -> list:
    """n colours from viridis, dark to light: distinct in colour and in grey."""
    import matplotlib

    return [matplotlib.colormaps[CMAP](x) for x in np.linspace(0.0, 0.8, max(n, 1))]


def _trace_module():
    """The module gpukernels.trace (``gpukernels.trace`` the attribute is its context manager)."""
    import importlib

    return importlib.import_module("gpukernels.trace")


def tracer_available() -> bool:
    try:
        _trace_module()
    except ImportError:
        return False
    return True


def _rect(x, y, w, h, face, hatch=""):
    import matplotlib.patches as mpatches

    return mpatches.Rectangle((x, y), w, h, facecolor=face, edgecolor="black", lw=0.6, hatch=hatch)



def _save_png(fig: Figure, path: Path, dpi: int = 90) -> int:
    """Save small: 90 dpi, then a 256-colour palette (figures are line art and viridis ramps)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    try:
        from PIL import Image

        buf.seek(0)
        img = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        img.save(path, format="PNG", optimize=True)
    except ImportError:
        path.write_bytes(buf.getvalue())
    return path.stat().st_size

