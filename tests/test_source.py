"""gpukernels.source: a step's code is read from the package, and a diff shows what a step changes --
for factory-built steps, the factory arguments. Bad lesson or step names end in one line on the command line."""

import os
import subprocess
import sys

import pytest

import gpukernels
from gpukernels import LESSONS, matmul
from gpukernels.source import RELATED, StepError, diff, source

ENV = dict(os.environ, GPUKERNELS_DEVICE="sim")
STEPS = [(lesson, name) for lesson, mod in gpukernels.LESSONS.items() for name in mod.VERSIONS]


@pytest.mark.parametrize("lesson, step", STEPS, ids=[f"{a}-{b}" for a, b in STEPS])
def test_every_step_has_its_launcher_in_its_source(lesson, step):
    src = source(lesson, step)
    assert f"def {step}(" in src.text  # the registry's plan function, whatever else the step needs
    assert src.path.startswith("gpukernels/") and src.lines
    html, text = src._repr_html_(), str(src)
    assert "<span style=" in html, "not highlighted"
    assert f"def {step}(" in text and src.idea in text


def test_source_is_the_package_code_not_a_copy():
    src = source("matmul", "tiled")
    with open(os.path.join(os.path.dirname(matmul.__file__), "k03_tiled.py")) as f:
        file_lines = f.read().splitlines()
    for first, last in src.lines:  # every shown line is the file's line, at the line number the header gives
        assert "\n".join(file_lines[first - 1:last]) in src.text
    assert "def tiled_kernel(a, b, c):" in src.text and "TILE = 16" in src.text
    assert "from __future__" not in src.text  # imports are not the step's code


def test_steps_by_number_and_by_name_agree():
    names = list(matmul.VERSIONS)
    assert source("matmul", 8).step == names[7] == "vectorized"
    assert source("matmul", "8").text == source("matmul", "vectorized").text
    assert source("matmul", len(names)).step == "optimized"


def test_diff_of_tiled_and_regblock_1d_is_the_change():
    d = diff("matmul", "tiled", "regblock_1d")
    a, b = set(d.a.text.splitlines()), set(d.b.text.splitlines())
    removed = [ln[1:] for ln in d.text.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:] for ln in d.text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert any(ln in a and ln not in b for ln in removed) and any(ln in b and ln not in a for ln in added)
    assert "+def regblock_1d_kernel(a, b, c):" in d.text and "-def tiled_kernel(a, b, c):" in d.text


def test_diff_of_neighbours_keeps_what_they_share_as_context():
    # conflict_free imports regblock_2d's constants: they are common context, and the few changed lines show
    d = diff("matmul", "regblock_2d", "conflict_free")
    lines = d.text.splitlines()
    assert "B2_BM, B2_BN, B2_BK, B2_TM, B2_TN = 128, 128, 8, 8, 8" in d.b.text
    assert not [ln for ln in lines if ln.startswith(("-B2_", "+B2_"))], "shared constants shown as changed"
    assert "+                a_reg[i] = a_tile[kk, trow + 16 * i]" in d.text
    assert d.ratio > 0.6


def test_factory_steps_diff_by_their_arguments():
    d = diff("matmul", "interior", "deep_k")
    (call, base, changes), = d.arg_changes
    assert (call.kernel, base.kernel) == ("deep_k_kernel", "interior_kernel")
    assert changes == {"bk": (16, 8), "launch_bounds": (None, (256, 2))}
    assert "bk: 8 -> 16" in str(d) and "bk: 8 -&gt; 16" in d._repr_html_()
    assert not d.new_factories  # both use make_interior_kernel: its source is not repeated
    # thread_16x8's new tiles against the closest kernels vector_loads launches (one of them imported from step 12)
    bases = {c.kernel: (b.kernel, set(ch)) for c, b, ch in diff("matmul", "vector_loads", "thread_16x8").arg_changes}
    assert bases["wide_kernel"] == ("swizzled_kernel", {"bm", "bk", "rows"})
    assert bases["wide_vec_kernel"][1] >= {"bm", "rows"}


def test_the_factory_source_is_shown_once_where_it_first_appears():
    first = diff("matmul", "unrolled", "interior")
    assert list(first.new_factories) == ["make_interior_kernel"]
    assert "def make_interior_kernel(" in first.new_factories["make_interior_kernel"][2]
    assert "New in <code>interior</code>: the factory <code>make_interior_kernel</code>" in first._repr_html_()
    assert not diff("matmul", "deep_k", "swizzled").new_factories


def test_a_step_over_an_earlier_steps_kernel_diffs_against_it():
    # split_c is a new launcher over implicit_gemm's kernel: that kernel is context, the launcher the change
    d = diff("cbr", "implicit_gemm", "split_c")
    assert d.ratio > 0.8 and "+def split_c(x, w, b, y, padding=1):" in d.text
    assert "def igemm_launches(" in d.b.text and "def igemm_launches(" not in source("cbr", "split_c").text


def test_unrelated_steps_show_the_newer_code_whole():
    d = diff("matmul", "thread_16x8", "skinny")  # a matrix-vector kernel, not a tile of the factory
    assert d.ratio < RELATED and "def skinny(" in d.b.text
    assert "<code>skinny</code>'s code whole" in d._repr_html_()
    assert "code whole" not in diff("matmul", "regblock_2d", "conflict_free")._repr_html_()
    assert not diff("matmul", "interior", "deep_k").whole()  # 9 lines, and the argument list says what changed


@pytest.mark.parametrize("lesson, step, wanted", [
    ("matmull", "8", f"LESSON: expected one of {', '.join(LESSONS)}; got 'matmull'"),
    ("matmul", "22", "step: expected a matmul step, 1-21 or one of naive, coalesced"),
    ("matmul", "0", "got '0'"),
    ("softmax", "tiled", "one of naive, block_row, online, registers, warp_rows, vector_rows, split_row, optimized; "
                         "got 'tiled'"),
])
def test_bad_names_say_what_was_expected(lesson, step, wanted):
    with pytest.raises(StepError, match=wanted.replace("(", r"\(")):
        source(lesson, step)


def gk(*args):
    return subprocess.run([sys.executable, "-m", "gpukernels", *args], capture_output=True, text=True, env=ENV,
                          timeout=120)


def test_command_line_diff_and_source():
    proc = gk("diff", "matmul", "8", "9")
    assert proc.returncode == 0, proc.stderr
    assert "+def unrolled_kernel(a, b, c):" in proc.stdout and "-def vectorized_kernel(a, b, c):" in proc.stdout
    proc = gk("source", "softmax", "naive")
    assert proc.returncode == 0 and "def naive_kernel(x, y):" in proc.stdout


@pytest.mark.parametrize("args, wanted", [
    (("diff", "matmul", "8", "99"), "gpukernels diff: error: B: expected a matmul step, 1-21 or one of naive"),
    (("diff", "conv", "1", "2"), f"gpukernels diff: error: LESSON: expected one of {', '.join(LESSONS)}; got 'conv'"),
    (("source", "cbr", "fastest"), "gpukernels source: error: STEP: expected a cbr step, 1-6"),
    (("source", "attention", "99"), "gpukernels source: error: STEP: expected an attention step, 1-12"),
])
def test_command_line_errors_are_one_line(args, wanted):
    proc = gk(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith(wanted), proc.stderr
