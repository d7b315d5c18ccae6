"""A lesson's performance page for students, written from the code and the newest committed measurement: the ladder's
table (one row per entry of the lesson's ``VERSIONS``, in its order), its figure, why each step helps (the step's
own docstring), where each step sits under the roofline, and what the library peer does differently.

    from gpukernels.viz.notes import lesson_page
    print(lesson_page("softmax"))               # Markdown
    python -m gpukernels.viz.notes              # rewrite docs/performance/LESSON.md, one per lesson (the site's)

The pages are committed (so that their links work on GitHub and in Jupyter too); tests/test_site_notes.py fails,
naming the command above, when one differs from what the code and the committed results give now.

Nothing here is typed in by hand but the peers' paragraphs (`PEERS`): the numbers are the report's (`load_bench`,
the README's reference run), the ideas are the steps' docstrings. The engineering log (benchmarks/NOTES.md: each
prediction beside its measurement, in the order the work happened) stays in the repository for the next engineer.
"""

from __future__ import annotations

from pathlib import Path

from ._common import _lessons

#: What the library each lesson is measured against does that its ladder does not (or not yet): one paragraph each.
PEERS = {
    "matmul": "cuBLAS picks, per shape and GPU, one of many kernels compiled ahead of time and tuned at the level of "
              "machine code: register allocation and instruction order are its own, where a Numba kernel leaves "
              "them to the compiler. The ladder's last step makes the same kind of choice with a handful of kernels "
              "(`matmul.optimized.choose(M, N, K)` says which and why).",
    "softmax": "PyTorch's softmax chooses between a kernel with a warp per row, its values held in registers, for "
               "rows of up to 1,024 elements, and a kernel with a block per row for longer ones, both with "
               "vectorized loads -- the split `softmax.optimized` makes too. Both are bound by memory bandwidth: "
               "what is left is how close each gets to reading and writing every element once.",
    "cbr": "cuDNN chooses a convolution algorithm per shape (implicit GEMM, Winograd, FFT and others, measured or "
           "guessed by heuristics) and then runs ReLU as a kernel of its own, so the output makes a second round "
           "trip through memory. The fused steps here never write the output before ReLU: that one pass is their "
           "advantage, the algorithm choice is cuDNN's.",
    "tensor_core": "cuBLAS's FP16 GEMM on Hopper uses the same instruction the `wgmma` step does, fed by TMA copies "
                   "and a deeper pipeline of shared-memory stages, with warps that only copy beside warps that "
                   "only multiply, and tiles chosen per shape; the steps here add those ideas one at a time.",
    "attention": "PyTorch's scaled_dot_product_attention in float32 runs a FlashAttention-style fused kernel (the "
                 "memory-efficient backend): tiles of K and V through shared memory with the online softmax, as the "
                 "`tiled` step does, but with its products on the tensor cores. The float32 steps here use the CUDA "
                 "cores' FMAs; `tf32x3` moves them to the tensor cores while keeping float32's accuracy.",
}


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _ms(ms: float) -> str:
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _measured_label(report: dict, lesson: str) -> str:
    env = report.get("environment", {})
    notes = {r.get("note", "") for r in report.get("results", []) if r.get("lesson") == lesson}
    date = (env.get("date") or "")[:10]
    if notes and all(n.startswith("run of ") for n in notes) and len({n[7:17] for n in notes}) == 1:
        date = next(iter(notes))[7:17]
    return (f"{env.get('device', 'a GPU')} on {date} (`benchmarks/results/{Path(report.get('_path', '')).name}`, "
            f"{report.get('method', 'median of many runs')})")


def lesson_rows(lesson: str, report: dict | None) -> list[dict]:
    """One row per version of ``lesson``, in ``VERSIONS`` order: its idea and, where the report measured it at the
    lesson's bench shape, its time, throughput, speed-up over the step before, share of the peer's speed and of its
    roofline."""
    from .performance import _memory_bound, bench_results

    mod = _lessons()[lesson]
    shape, rs = bench_results(report, lesson) if report is not None else ((), [])
    by_name = {r["name"]: r for r in rs if r["kind"] == "kernel" and r.get("ok", True)}
    peer = next((r for r in rs if r["kind"] == "peer"), None)
    ceil = (report or {}).get("ceilings") or {}
    memory = _memory_bound(lesson)
    half = set(getattr(mod, "FLOAT16_VERSIONS", ()))
    rows, before = [], {}  # the step before, per precision: a float32 step is compared with a float32 one
    for i, (name, v) in enumerate(mod.VERSIONS.items(), 1):
        row = {"step": i, "name": name, "idea": v.idea, "float16": name in half, "measured": name in by_name}
        r = by_name.get(name)
        if r is not None:
            ms = r["median_ms"]
            row["ms"] = ms
            row["tflops"] = r["flops"] / (ms * 1e-3) / 1e12
            row["gbps"] = r["bytes"] / (ms * 1e-3) / 1e9
            row["throughput"] = f"{row['gbps']:,.0f} GB/s" if memory else f"{row['tflops']:.3g} TFLOP/s"
            prev = before.get(row["float16"])
            row["vs_before"] = prev["ms"] / ms if prev else None
            row["vs_peer"] = peer["median_ms"] / ms if peer and not row["float16"] else None
            # the float32 roofline: not for steps that multiply on the tensor cores (their peak is another one)
            if ceil.get("copy_GBps") and ceil.get("sgemm_TFLOPs") and r["bytes"] and not row["float16"] \
                    and lesson != "tensor_core":
                intensity = r["flops"] / r["bytes"]
                roof = min(ceil["sgemm_TFLOPs"], intensity * ceil["copy_GBps"] / 1000)
                row.update(intensity=intensity, roof=roof, of_roof=row["tflops"] / roof if roof else None,
                           bound="memory" if intensity * ceil["copy_GBps"] / 1000 < ceil["sgemm_TFLOPs"] else "compute")
            before[row["float16"]] = row
        rows.append(row)
    return rows


def lesson_page(lesson: str, report: dict | None = None, figures: str = "../figures") -> str:
    """The lesson's performance page as Markdown (MyST), its figures linked from ``figures``."""
    from .performance import bench_results, load_bench

    report = load_bench() if report is None else report
    mod = _lessons()[lesson]
    title = {"cbr": "convolution + bias + ReLU", "tensor_core": "matmul on tensor cores"}.get(lesson, lesson)
    lines = [f"# Performance notes: {title}", ""]
    if report is None or not bench_results(report, lesson)[1]:
        return "\n".join(lines + ["No GPU measurement of this lesson is committed yet (`gpukernels bench --json "
                                  "benchmarks/results/NAME.json` on a GPU writes one).", ""])
    shape, rs = bench_results(report, lesson)
    peer = next((r for r in rs if r["kind"] == "peer"), None)
    rows = lesson_rows(lesson, report)
    ceil = report.get("ceilings") or {}
    lines += [f"Every step of the lesson at {' x '.join(map(str, shape))}, measured on {_measured_label(report, lesson)}"
              f"; the peer is {peer['name'] if peer else 'not measured'}. Each step is checked against a float64 "
              "reference before it is timed. The notebook shows the code of each step; this page shows what each "
              "one bought.", ""]
    # the ladder's table, one row per entry of VERSIONS
    lines += ["## The ladder", "",
              "| step | version | time | throughput | vs the step before | vs the peer | of its roofline |",
              "|---:|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        name = f"`{row['name']}`" + (" (float16)" if row["float16"] else "")
        if not row["measured"]:
            lines.append(f"| {row['step']} | {name} | not in this run | | | | |")
            continue
        fx = lambda x: f"{x:.2f}x" if x else ""  # noqa: E731
        roof = f"{row['of_roof']:.0%}" if row.get("of_roof") else ""
        lines.append(f"| {row['step']} | {name} | {_ms(row['ms'])} | {row['throughput']} | {fx(row['vs_before'])} "
                     f"| {fx(row['vs_peer'])} | {roof} |")
    if peer:
        lines.append(f"| | {_md_cell(peer['name'])} (peer) | {_ms(peer['median_ms'])} | | | 1.00x | |")
    missing = [r["name"] for r in rows if not r["measured"]]
    lines += ["", "*vs the step before*: the previous measured step's time (of the same precision) over this one's (above 1: "
              "faster). "
              "*vs the peer*: the peer's time over this one's (1.00x: as fast as the library; float16 steps are not "
              "compared with a float32 peer)." + (f" Not in this run (added since): {', '.join(f'`{m}`' for m in missing)}."
                                                 if missing else ""), ""]
    lines += [f"![{lesson}: every step measured]({figures}/{lesson}_performance.png)", ""]
    # why each step helps: its own docstring
    lines += ["## Why each step helps", ""]
    for row in rows:
        lines.append(f"{row['step']}. **`{row['name']}`** -- {_md_cell(row['idea'])}")
    lines.append("")
    # the roofline
    if ceil.get("copy_GBps") and ceil.get("sgemm_TFLOPs"):
        ridge = ceil["sgemm_TFLOPs"] * 1e12 / (ceil["copy_GBps"] * 1e9)
        lines += ["## Under the roofline", "",
                  f"A kernel can go no faster than its *roofline*: the GPU's arithmetic peak, or its memory bandwidth "
                  f"times the kernel's *arithmetic intensity* (FLOPs per byte it must move), whichever is lower. This "
                  f"run measured a copy at {ceil['copy_GBps']:,.0f} GB/s and the library's float32 GEMM at "
                  f"{ceil['sgemm_TFLOPs']:.1f} TFLOP/s, so the two roofs meet at {ridge:.1f} FLOP/byte: below that a "
                  "kernel is bound by memory, above it by arithmetic.", ""]
        measured = [r for r in rows if r.get("intensity")]
        if measured:
            r0 = measured[0]
            kind = "memory" if r0["bound"] == "memory" else "arithmetic"
            lines.append(f"At this shape the lesson's minimum traffic gives {r0['intensity']:.3g} FLOP/byte: "
                         f"{'below' if kind == 'memory' else 'above'} the ridge, so the roof is "
                         f"{'bandwidth' if kind == 'memory' else 'the arithmetic peak'} "
                         f"({r0['roof']:.3g} TFLOP/s). *of its roofline* in the table is each step's share of it.")
            best = max(measured, key=lambda r: r["of_roof"] or 0)
            lines += ["", f"The closest step, `{best['name']}`, reaches {best['of_roof']:.0%} of it.", ""]
        lines += [f"![every lesson's versions under the roofline]({figures}/roofline.png)", ""]
    # the peer
    if lesson in PEERS:
        lines += ["## What the peer does differently", "", PEERS[lesson], ""]
    lines += [f"Step through the kernels themselves in the lesson's notebook and on its classroom page; "
              f"`gpukernels bench {lesson}` measures them again on your GPU.", ""]
    del mod
    return "\n".join(lines)


PAGES_DIR = Path(__file__).resolve().parent.parent.parent / "docs" / "performance"


def write_pages(folder: Path = PAGES_DIR) -> list[Path]:
    """Write every lesson's page into ``folder`` (docs/performance/LESSON.md); returns them in the course's order."""
    from .performance import load_bench

    folder.mkdir(parents=True, exist_ok=True)
    report = load_bench()
    out = []
    for lesson in _lessons():
        path = folder / f"{lesson}.md"
        path.write_text(lesson_page(lesson, report))
        out.append(path)
    return out


if __name__ == "__main__":
    for written in write_pages():
        print(f"wrote {written.relative_to(PAGES_DIR.parent.parent)}")
