"""Text a student reads says what is true, in plain words: no spill where nothing spilled, no markup shown as
characters (RST's double backticks in --help, Markdown's backticks in an HTML header), no sentence cut at a line
break of its docstring, no "1 outputs", and no noise in the committed notebooks -- warning blocks, paths of the
machine that ran them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import gpukernels
from gpukernels import resources as R

ROOT = Path(__file__).resolve().parent.parent


def _row(local: int, stack: int, spills: int) -> R.ResourceRow:
    res = R.KernelResources(registers=255, shared_bytes=0, local_bytes=local, stack_bytes=stack, spill_stores=spills,
                            spill_loads=spills, barriers=1)
    occ = R.occupancy("sm_90", 256, 255)
    return R.ResourceRow("matmul", "async_copy", "k", 0, (1,), (256,), 0, "sm_90", (64, 64, 64), res, occ)


def test_lmem_says_what_spilled():
    """The linker reports "0 bytes lmem" for a kernel whose 8 spilled bytes live in its 8-byte stack frame: the
    column said "0 B (spills!)". It shows the frame and how much of it is spills; nothing spilled, no remark."""
    lmem = R.table([_row(0, 8, 8)]).columns.index("lmem")
    assert R.table([_row(0, 8, 8)]).rows[0][lmem] == "8 B (8 B spilled)"
    assert R.table([_row(0, 0, 0)]).rows[0][lmem] == "0 B"
    assert R.table([_row(16, 16, 0)]).rows[0][lmem] == "16 B"


def test_an_idea_is_its_whole_first_paragraph():
    """A version's idea is the first paragraph of its docstring: split_c's wraps onto a second line, and its first
    line alone ended mid-sentence at "by atomics, then"."""
    for lesson, mod in gpukernels.LESSONS.items():
        for name, v in mod.VERSIONS.items():
            assert v.idea.rstrip().endswith((".", ")")), f"{lesson}.{name}: {v.idea!r} reads as cut short"
            assert "\n" not in v.idea
    assert gpukernels.LESSONS["cbr"].VERSIONS["split_c"].idea.endswith("(batch 1, deep layers).")


def test_ideas_in_html_show_code_not_backticks():
    from gpukernels.source import _inline, diff, source

    assert _inline("the step `choose` <picks>") == "the step <code>choose</code> &lt;picks&gt;"
    for lesson in ("matmul", "softmax"):
        html = source(lesson, "optimized")._repr_html_() + diff(lesson, 1, 2)._repr_html_()
        head = html.split("<div class=\"highlight\"", 1)[0]  # the header, before the highlighted code
        assert "`" not in head, head


def _help(capsys, argv) -> str:
    from gpukernels import cli

    with pytest.raises(SystemExit):
        cli.main(argv)
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [["demo", "--help"], ["trace", "--help"], ["bench", "--help"],
                                  ["bench", "--overhead", "--help"], ["resources", "--help"], ["plots", "--help"],
                                  ["source", "--help"], ["diff", "--help"], ["grade", "--help"]])
def test_help_has_no_markup(capsys, argv):
    text = _help(capsys, argv)
    assert "usage:" in text
    assert "`" not in text, f"markup in `gpukernels {' '.join(argv)}`:\n{text}"


def test_never_written_counts_in_words():
    from gpukernels.grade.gates import POISON_BITS, _nan_note

    ref = np.zeros(4, np.float32)
    out = np.zeros(4, np.float32)
    out.view(np.uint32)[0] = POISON_BITS
    assert "1 output was never written" in _nan_note(out, ref)
    out.view(np.uint32)[1] = POISON_BITS
    assert "2 outputs were never written" in _nan_note(out, ref)


def test_dispatcher_reasons_count_in_words():
    from gpukernels import matmul

    assert "1 tile of " in matmul.optimized.choose(64, 64, 65536, sms=132).why
    assert "1 tiles" not in matmul.optimized.choose(64, 64, 65536, sms=132).why


def test_the_simulator_is_silent_on_inf_like_a_gpu():
    """A kernel given inf computes inf and NaN as a GPU does, without NumPy's "overflow encountered" warnings from
    every simulated thread (they reached students running softmax without its max subtraction)."""
    import warnings

    from numba import cuda

    if not gpukernels.is_simulator():
        pytest.skip("the simulator's arithmetic")

    @cuda.jit
    def kernel(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = (x[i] * np.float32(1e30) * np.float32(1e30)) - x[i] / (x[i] - x[i])

    x = np.array([1.0, np.inf, -np.inf, 0.0], np.float32)
    y = np.zeros_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel[1, 32](x, y)
    assert not np.isfinite(y).any()  # inf and NaN, as on a GPU


NOISE = re.compile(r"NumbaPerformanceWarning|RuntimeWarning|(?<![\w.])/(?:opt|home|tmp|root|Users)/\S")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")), ids=lambda p: p.stem)
def test_committed_outputs_have_no_warnings_or_machine_paths(path):
    """NumbaPerformanceWarning blocks ("Grid size 3 will likely result in GPU under-utilization", naming a file of
    the GPU machine's Python) are silenced at the source now (`gpukernels.notebook.where_and_when`)."""
    nb = json.loads(path.read_text())
    found = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items() if k.startswith("text/")]
            for text in texts:
                m = NOISE.search("".join(text) if isinstance(text, list) else text)
                if m:
                    found.append(f"cell {i}: {m.group(0)!r}")
    assert not found, found


def test_notebooks_silence_performance_warnings():
    import warnings

    from gpukernels.notebook import quiet_performance_warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_performance_warnings()
        warnings.warn("\x1b[1mGrid size 3 will likely result in GPU under-utilization due to low occupancy.\x1b[0m")
        try:
            from numba.core.errors import NumbaPerformanceWarning
        except ImportError:
            NumbaPerformanceWarning = None
        if NumbaPerformanceWarning is not None:
            warnings.warn(NumbaPerformanceWarning("host array used in kernel launch"))
    assert not caught, [str(w.message) for w in caught]
