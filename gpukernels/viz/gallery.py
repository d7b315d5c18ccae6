"""The gallery: every figure of every lesson, built from the lesson registry (``figure_specs``), written by
``gpukernels plots`` (``make plots``) to ``docs/figures/`` and ``docs/gallery.md``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from matplotlib.figure import Figure

from ._common import ROOT, _lessons, _naive_and_best, _save_png, tracer_available, unavailable
from .maps import access_map, grid_map, reuse_heatmap, tile_phases
from .memory import warp_banks, warp_sectors
from .occupancy import occupancy_bars, occupancy_vs_block_size
from .performance import bench_results, load_bench, performance_bars, roofline, suite_heatmap

# ----------------------------------------------------------------------------------------------------------
# make plots: every figure of every lesson, and docs/gallery.md
# ----------------------------------------------------------------------------------------------------------


#: Which versions each gallery figure compares (editorial choices; names missing from VERSIONS are dropped,
#: and a figure falls back to naive vs fastest).
GALLERY = {
    "matmul": {"grid": ("naive", "coalesced", "tiled", "regblock_1d"), "access": ("naive", "coalesced", "tiled"),
               "reuse": ("naive", "tiled", "regblock_1d"), "sectors": ("naive", "coalesced"),
               "phases": ("tiled", None), "banks": (("regblock_2d", "conflict_free"), (128, 128, 8))},
    "cbr": {"phases": ("fused_direct", (1, 8, 16, 64, 4, 3, 3))},
    # one launch each that reads q, k and v (naive's first launch reads no v; tf32x3's first splits k)
    "attention": {"grid": ("naive", "fused_rows", "tiled"), "access": ("fused_rows", "tiled"),
                  "reuse": ("fused_rows", "tiled"), "sectors": ("fused_rows", "tiled")},
}


def _attention_specs() -> list[FigureSpec]:
    from .attention import attention_traffic, online_rescaling
    from .pingpong import pingpong_timeline

    sec = "Lesson: attention"
    return [FigureSpec("attention_traffic", sec,
                       "Global-memory bytes against S, measured by the tracer: naive stores the S x S scores (16 bytes "
                       "each), which leave the fused steps' S * D (attention.min_bytes) behind as S^2; beside it, the "
                       "same model at training sizes, labelled as a model.", attention_traffic, needs="tracer"),
            FigureSpec("attention_online_softmax", sec,
                       "The online softmax on one row, tile by tile: the running max before and after, the factor "
                       "exp(m_old - m_new), the running sum and one accumulator, ending at the full softmax's result.",
                       online_rescaling),
            FigureSpec("attention_pingpong_timeline", sec,
                       "attention.ping_pong's two consumer warpgroups in one block, as the simulator ran them: their "
                       "turns at the tensor cores handed back and forth by two named barriers, the products S and P V "
                       "of each K/V tile, each warp's softmax -- one warpgroup's softmax while the other issues its "
                       "products -- and the producer's TMA copies of K and V.", pingpong_timeline, needs="tracer")]


def _tensor_core_specs() -> list[FigureSpec]:
    from .hopper import ring_timeline, tma_box

    sec = "Lesson: tensor_core"
    return [FigureSpec("tensor_core_tma_box", sec,
                       "One TMA copy on the simulator: a 16 x 64 box of a float16 matrix, partly past its edge, lands "
                       "in shared memory with the 128-byte swizzle -- chunk c of row r in slot c XOR (r mod 8), and "
                       "the elements past the edge as zeros.", tma_box),
            FigureSpec("tensor_core_ring_timeline", sec,
                       "The ring of 4 stages of tensor_core.persistent, one block walking 3 tiles of C, as the "
                       "simulator ran it: for each use of a stage, the producer's wait for it to be empty, its TMA "
                       "copies in flight, the consumers' wgmmas and their release, with the phase bit each wait "
                       "names; shaded, the epilogue of a tile while the next tile's copies fly.", ring_timeline,
                       needs="tracer")]


#: Figures of a lesson beyond the ones every lesson gets: drawn after that lesson's, or, for a lesson that is not in
#: the registry (gpukernels.LESSONS), after every lesson's when no lessons are named.
LESSON_FIGURES: dict[str, Callable[[], list]] = {"tensor_core": _tensor_core_specs, "attention": _attention_specs}


def _existing(lesson: str, versions) -> list[str]:
    names = [v for v in versions if v in _lessons()[lesson].VERSIONS]
    return names if len(names) >= 2 else list(_naive_and_best(lesson))


@dataclass
class FigureSpec:
    """One figure of the gallery: file stem, section, one sentence for the gallery, and how to make it."""

    name: str
    section: str
    caption: str
    make: Callable[[], Figure]
    needs: str = ""  # "tracer" when it needs gpukernels.trace


def figure_specs(arch: str = "sm_90", report: dict | None = None, lessons=None) -> list[FigureSpec]:
    """The gallery, built from the lesson registry: every lesson and version appears without being listed."""
    named = lessons
    lessons = list(lessons or _lessons())
    measured = report is not None
    specs: list[FigureSpec] = []
    suite = load_bench(suite=True)
    for lesson in lessons:
        naive, best = _naive_and_best(lesson)
        sec = f"Lesson: {lesson}"
        specs += [
            FigureSpec(f"{lesson}_occupancy", sec,
                       f"Resident warps per SM on {arch} for each {lesson} kernel, and the budget (threads, blocks, "
                       "registers, shared memory) that stops one more block from fitting.",
                       lambda lesson=lesson: occupancy_bars(lesson, arch)),
            FigureSpec(f"{lesson}_occupancy_vs_block_size", sec,
                       "Occupancy if the same kernels were launched with other block sizes: a staircase set by "
                       "whole blocks, capped by registers.",
                       lambda lesson=lesson: occupancy_vs_block_size(lesson, arch)),
        ]
        g = {k: _existing(lesson, v) for k, v in GALLERY.get(lesson, {}).items() if k in ("grid", "access", "reuse",
                                                                                         "sectors")}
        g.setdefault("grid", list(_naive_and_best(lesson)))
        for key in ("access", "reuse", "sectors"):
            g.setdefault(key, list(_naive_and_best(lesson)))
        extra = GALLERY.get(lesson, {})
        specs += [
            FigureSpec(f"{lesson}_grid_map", sec,
                       f"Who computes which output element in {', '.join(g['grid'])}: colour per block, and in the "
                       "zoom the thread index that writes each element, shaded by warp.",
                       lambda lesson=lesson, v=g["grid"]: grid_map(lesson, v), needs="tracer"),
            FigureSpec(f"{lesson}_access_map", sec,
                       f"The global elements warp 0 of block 0 reads in {', '.join(g['access'])}: the footprint "
                       "that decides coalescing and reuse.",
                       lambda lesson=lesson, v=g["access"]: access_map(lesson, v, who="warp"), needs="tracer"),
            FigureSpec(f"{lesson}_reuse", sec,
                       f"Global loads per input element over the whole launch in {', '.join(g['reuse'])}: the reuse "
                       "factor that tiling and blocking buy.",
                       lambda lesson=lesson, v=g["reuse"]: reuse_heatmap(lesson, v), needs="tracer"),
            FigureSpec(f"{lesson}_sectors", sec,
                       f"One warp's global access in {' and '.join(g['sectors'])}: lanes mapped to the 32-byte "
                       "sectors they need.",
                       lambda lesson=lesson, v=g["sectors"]: warp_sectors(lesson, v), needs="tracer"),
        ]
        if "phases" in extra and extra["phases"][0] in _lessons()[lesson].VERSIONS:
            ver, shp = extra["phases"]
            specs.append(FigureSpec(f"{lesson}_tile_phases", sec,
                                    f"{lesson}.{ver}: what one block's shared tiles hold in each barrier interval, "
                                    "next to the block's output region.",
                                    lambda lesson=lesson, ver=ver, shp=shp: tile_phases(lesson, ver, shape=shp),
                                    needs="tracer"))
        if "banks" in extra and all(v in _lessons()[lesson].VERSIONS for v in extra["banks"][0]):
            vers, shp = extra["banks"]
            specs.append(FigureSpec(f"{lesson}_banks", sec,
                                    f"One warp's shared-memory access in {' and '.join(vers)}: lanes mapped to "
                                    "banks, conflicts stacked.",
                                    lambda lesson=lesson, vers=vers, shp=shp: warp_banks(lesson, vers, shape=shp),
                                    needs="tracer"))
        if measured and bench_results(report, lesson)[1]:
            specs.append(FigureSpec(f"{lesson}_performance", sec,
                                    f"Measured speed of every {lesson} version next to the library peer, with each "
                                    "version's speed-up over naive.",
                                    lambda lesson=lesson: performance_bars(lesson, report, arch=arch)))
        else:
            specs.append(FigureSpec(f"{lesson}_performance", sec,
                                    f"MODEL, not a measurement: the roofline bound of each {lesson} version from "
                                    "its traced global traffic.",
                                    lambda lesson=lesson: performance_bars(lesson, None if measured else {"results": []},
                                                                           arch=arch), needs="tracer"))
        if suite and any(r["lesson"] == lesson for r in suite["results"]):  # in the lesson's own section
            specs.append(FigureSpec(f"{lesson}_suite", sec,
                                    f"Every {lesson} step timed on the suite's real shapes, as a fraction of the "
                                    "library's speed in the same run: which step wins depends on the shape.",
                                    lambda lesson=lesson: suite_heatmap(lesson, suite)))
        specs += LESSON_FIGURES[lesson]() if lesson in LESSON_FIGURES else []
    for lesson, more in LESSON_FIGURES.items():
        if lesson not in _lessons() and (named is None or lesson in named):
            specs += more()
    specs.append(FigureSpec("occupancy_all", "All lessons",
                            f"Every kernel of every lesson on one occupancy chart ({arch}).",
                            lambda: occupancy_bars(None, arch)))
    specs.append(FigureSpec("roofline", "All lessons",
                            "Every version of every lesson under the FP32 and bandwidth ceilings (and, for the "
                            "tensor-core and attention steps, the FP16 tensor-core ceiling)" +
                            (" (measured)." if measured else " (a MODEL from traced traffic, not a measurement)."),
                            lambda: roofline(report if measured else {"results": []}, arch, lessons),
                            needs="" if measured else "tracer"))
    return specs


GALLERY_HEADER = """# Gallery

Every figure below is measured from the real kernels: the launch configuration their launchers make
(`Version.launches`), the compiler's resource report (`gpukernels resources`), the memory tracer
(`gpukernels.trace`) and, where a GPU ran them, the benchmark (`benchmarks/results/*.json`).
Regenerate with `make plots` (or `gpukernels plots`); each figure is one function of `gpukernels.viz`,
which returns a matplotlib Figure -- call it in a notebook to draw any lesson, version, thread or block.
"""


CITES = "Source lines shown: "
_CITE = re.compile(r"([\w./-]+\.py):(\d+)")


def cited_lines(fig: Figure) -> list[str]:
    """The source lines a figure names in its text (``gpukernels/softmax/k01_naive.py:26``), in order, once each."""
    from matplotlib.text import Text

    found = [m.group(0) for t in fig.findobj(Text) for m in _CITE.finditer(t.get_text())]
    return list(dict.fromkeys(found))


def _page_cites(path: Path) -> dict[str, list[str]]:
    """figure name -> the source lines a gallery page says it shows (kept for figures a ``--only`` run leaves)."""
    cites, name = {}, None
    for line in (path.read_text().splitlines() if path.exists() else []):
        if line.startswith("### "):
            name = line[4:].strip()
        elif name and line.startswith(CITES):
            cites[name] = re.findall(r"`([^`]+)`", line)
    return cites


def write_gallery(specs_done: list[tuple[FigureSpec, str]], skipped: list[tuple[FigureSpec, str]], path: Path,
                  figures_dir: Path, source: str, cites: dict | None = None) -> None:
    """The gallery page; ``cites``: figure name -> the source lines it shows (`cited_lines`), listed under it so
    that a reader finds them (and tests/test_outputs_registry.py checks that they exist)."""
    cites = cites or {}
    lines = [GALLERY_HEADER, f"_Performance data: {source}._", ""]
    section = None
    for spec, fname in specs_done:
        if spec.section != section:
            section = spec.section
            lines += [f"## {section}", ""]
        rel = Path(os.path.relpath(Path(figures_dir).absolute() / fname, Path(path).absolute().parent))
        lines += [f"### {spec.name}", "", spec.caption, ""]
        if cites.get(spec.name):
            lines += [CITES + ", ".join(f"`{c}`" for c in cites[spec.name]) + ".", ""]
        lines += [f"![{spec.caption}]({rel.as_posix()})", ""]
    if skipped:
        lines += ["## Not drawn in this run", ""]
        lines += [f"- `{spec.name}`: {why}" for spec, why in skipped]
        lines.append("")
    path.write_text("\n".join(lines))


def plots_main(argv: list[str]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from ..cli import ArgumentParser, input_json, output_dir, output_file
    from ..resources import get_arch

    parser = ArgumentParser(prog="gpukernels plots", description="write every lesson's figures and the gallery page")
    parser.add_argument("lessons", nargs="*", metavar="LESSON", help="only these lessons (default: all)")
    parser.add_argument("--out", type=Path, default=None, help="figure folder (default: the repository's "
                                                               "docs/figures, with its docs/gallery.md)")
    parser.add_argument("--gallery", type=Path, default=None, help="gallery page (default: docs/gallery.md, or "
                                                                   "OUT/gallery.md with --out: nothing is written "
                                                                   "outside --out)")
    parser.add_argument("--arch", default="sm_90", help="architecture for resources and occupancy")
    parser.add_argument("--bench", type=Path, help="benchmark JSON (default: newest benchmarks/results/*.json)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only figures whose name contains one of these")
    args = parser.parse_args(argv)
    unknown = [l for l in args.lessons if l not in _lessons()]
    if unknown:
        parser.error(f"unknown lesson {unknown[0]!r}; choose from {', '.join(_lessons())}")
    try:
        get_arch(args.arch)
    except ValueError as err:
        parser.error(f"--arch: {err}")
    if args.bench is not None:  # a benchmark report: its results are what the performance figures draw
        input_json(args.bench, "--bench", key="results", what="a `gpukernels bench --json` report",
                   report="bench")
    if args.only:  # every name must match a figure: a typo would otherwise draw nothing and say it succeeded
        names = [spec.name for spec in figure_specs(args.arch, None, args.lessons or None)]
        for only in args.only:
            if not any(only in name for name in names):
                parser.error(f"--only {only!r} matches no figure; choose from {', '.join(names)}")
    if args.gallery is None:
        args.gallery = ROOT / "docs" / "gallery.md" if args.out is None else args.out / "gallery.md"
    out = ROOT / "docs" / "figures" if args.out is None else args.out
    if Path(args.gallery).absolute().parent != Path(out).absolute():  # checked before --out is made: a refused
        output_file(args.gallery, "--gallery")  # page leaves no empty folder behind
    args.out = output_dir(out, "--out")
    output_file(args.gallery, "--gallery")  # (again) a page inside the folder --out has just made
    report = load_bench(args.bench)
    source = (f"measured, from `{Path(report.get('_path', args.bench or '')).relative_to(ROOT) if report.get('_path') else args.bench}`"
              if report else "no benchmark results yet, so performance figures are a labelled MODEL")
    has_tracer = tracer_available()
    done, skipped = [], []
    cites = _page_cites(args.gallery) if args.only else {}
    for spec in figure_specs(args.arch, report, args.lessons or None):
        if args.only and not any(o in spec.name for o in args.only):
            continue
        if spec.needs == "tracer" and not has_tracer:
            skipped.append((spec, "needs gpukernels.trace, which is not installed yet"))
            continue
        fig = spec.make()
        why = unavailable(fig)
        if why:  # the PNG already there, if any, is left as it is
            skipped.append((spec, why))
            print(f"  {spec.name} not drawn: {why}")
            continue
        size = _save_png(fig, args.out / f"{spec.name}.png")
        cites[spec.name] = cited_lines(fig)
        done.append((spec, f"{spec.name}.png"))
        print(f"  {args.out / (spec.name + '.png')}  ({size / 1024:.0f} KB)")
    if args.only:  # the page lists every figure of the registry whose file exists
        done_names = {spec.name for spec, _ in done}
        done = [(spec, f"{spec.name}.png") for spec in figure_specs(args.arch, report, args.lessons or None)
                if spec.name in done_names or (args.out / f"{spec.name}.png").exists()]
    write_gallery(done, skipped, args.gallery, args.out, source, cites)
    size = sum((args.out / f).stat().st_size for _, f in done)
    print(f"wrote {args.gallery} with {len(done)} figures ({size / 1e6:.2f} MB)"
          + (f"; {len(skipped)} not drawn (see the page)" if skipped else ""))
    return 0
