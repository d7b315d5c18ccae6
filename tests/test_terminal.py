"""The command line as a person at a terminal meets it: tables that fit the terminal's width (80 columns: no row
wrapped over many lines), steps named by name or number everywhere, refusals before anything runs or is announced,
exit statuses that say whether anything was done, and the terminal and the classroom page agreeing on a number.
Everything runs in this process (tests/_cli.py): no second's start-up per case."""

from __future__ import annotations

import pytest
from rich.console import Console

import gpukernels
from gpukernels import LESSONS
from gpukernels._tables import Table
from gpukernels._terminal import fit, percent

from ._cli import one_line, run_main

SIM_ONLY = pytest.mark.skipif(gpukernels.MODE != "sim", reason="the simulator's table and time limit")


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


@pytest.fixture
def columns(monkeypatch):
    """A terminal of N columns, as rich measures it (COLUMNS)."""
    def set_width(n: int) -> None:
        monkeypatch.setenv("COLUMNS", str(n))
    return set_width


def test_a_table_of_prose_fits_80_columns_one_line_per_row():
    ideas = ["word " * 30] * 21  # the demo's "what it changes": ~150 characters a row
    t = Table("title", ["version", "what it changes", "correct", "loads"],
              [[f"step_{i:02d}_name", ideas[i], "yes", f"{i * 1000:,}"] for i in range(21)], right=("loads",))
    for width in (60, 80, 120, 200):
        console = Console(width=width, record=True, file=open("/dev/null", "w"))
        console.print(fit(t, width, prose=["what it changes"], more="help() says more"))
        lines = _lines(console.export_text())
        assert max(map(len, lines)) <= width, (width, lines)
        body = [line for line in lines if line.startswith("step_")]
        assert len(body) == 21  # one line per row, every name whole
        assert all(line.split()[0].startswith("step_") for line in body)
        if width < 200:
            assert "help() says more" in " ".join(lines)  # a cut column says where to read it whole


@SIM_ONLY
def test_demo_fits_the_terminal_and_every_row_is_one_line(capsys, columns):
    columns(80)
    code, out, err = run_main(capsys, ["demo", "softmax", "--size", "4x40"])
    assert code == 0, err
    lines = _lines(out)
    assert max(map(len, lines)) <= 80, "\n".join(lines)
    rows = [line for line in lines if line.split() and line.split()[0] in LESSONS["softmax"].VERSIONS]
    assert [r.split()[0] for r in rows] == list(LESSONS["softmax"].VERSIONS)  # one line each, in order


def test_percentages_round_as_the_page_rounds_them():
    # the page: (100 * x).toFixed(n), a half rounded up; Python's format rounds it to even (12% beside 13%)
    assert percent(0.125) == "13%" and f"{0.125:.0%}" == "12%"
    assert percent(0.125, 1) == "12.5%" and percent(1.0, 1) == "100.0%" and percent(0.0) == "0%"


@pytest.mark.parametrize("args, fragment", [
    # --version takes a step's name or its number everywhere (trace and demo took names only)
    (["trace", "matmul", "--version", "22"], "--version '22': matmul has no such step; expected a matmul step, "
                                            "1-21 or one of naive, coalesced"),  # source's words for a step
    (["trace", "softmax", "--version", "0"], "--version '0': softmax has no such step"),
    (["demo", "matmul", "--classroom", "--no-wait", "--version", "1", "--version", "naive"],
     "--version 'naive' given twice"),  # 1 is naive
    (["demo", "matmul", "--html", "x.html", "--version", "3", "--version", "tild"], "--version 'tild': matmul has"),
    # what was silently ignored, or did something else than asked
    (["trace", "matmul", "--events"], "--events writes every access into the --json FILE; give --json FILE"),
    (["demo", "--classroom", "--no-wait"], "--classroom narrates one lesson; name it"),
    (["demo", "all", "--classroom"], "--classroom narrates one lesson; name it"),
    # a folder where a file is expected: it said "no such file"
    (["bench", "--update-readme", "TMP"], "--update-readme 'TMP': is a folder; expected a Markdown file"),
])
def test_refusals_are_one_line_naming_the_option(capsys, tmp_path, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    args = [str(tmp_path) if a == "TMP" else a for a in args]
    code, out, err = run_main(capsys, args)
    assert code == 2, (code, out, err)
    one_line(err, fragment.replace("TMP", str(tmp_path)))
    assert not any(tmp_path.iterdir())


@SIM_ONLY
def test_steps_are_named_by_number_as_by_name(capsys, columns):
    columns(200)
    code, out, err = run_main(capsys, ["trace", "matmul", "--version", "3", "--size", "8"])
    assert code == 0, err
    assert "matmul.tiled shape (8, 8, 8)" in out


@SIM_ONLY
def test_a_run_past_the_limit_is_refused_without_announcing_the_wait(capsys, monkeypatch):
    """It said "the progress bar shows the time left" and then refused: the refusal alone now."""
    from gpukernels import _simtime

    monkeypatch.setenv("GPUKERNELS_SIM_LIMIT", "3")
    monkeypatch.setattr(_simtime, "NOTE_S", 0.5)  # any launch longer than this would be announced
    code, out, err = run_main(capsys, ["trace", "matmul", "--version", "naive", "--size", "96"])
    assert code == 2
    one_line(err, "--size 96: matmul.naive 96x96x96 would take")
    assert "time left" not in out + err


@SIM_ONLY
def test_bench_that_measured_nothing_exits_non_zero(capsys):
    code, out, err = run_main(capsys, ["bench", "softmax"])
    assert code == 1 and not out
    assert "it measured nothing" in err and "Traceback" not in err


def test_a_lesson_named_twice_is_reported_once(monkeypatch, capsys):
    from gpukernels import resources

    asked = []
    monkeypatch.setattr(resources, "report", lambda lessons, *a, **k: asked.append(lessons) or [])
    code, out, err = run_main(capsys, ["resources", "softmax", "softmax"])
    assert code == 0, err
    assert asked == [["softmax"]]


def test_demo_help_promises_figures_only_with_save(capsys):
    code, out, err = run_main(capsys, ["demo", "--help"])
    assert code == 0
    text = " ".join(out.split())
    assert "--save DIR also writes the lesson's figures" in text
    code, out, err = run_main(capsys, ["--help"])
    demo_line = next(line for line in out.splitlines() if line.strip().startswith("demo "))
    assert "figures" not in demo_line.replace("(--save DIR: its figures)", "")


@SIM_ONLY
def test_the_classroom_sequence_fits_80_columns_and_speaks_of_the_terminal(capsys, columns):
    """The terminal mode spoke of "the slider of the page" and ended with a table whose description column wrapped
    each row over 6-9 lines; it also drew at 120 columns whatever the terminal's width."""
    columns(80)
    code, out, err = run_main(capsys, ["demo", "softmax", "--classroom", "--no-wait", "--size", "2x32"])
    assert code == 0, err
    lines = _lines(out)
    assert max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    assert "slider" not in out
    summary = lines[next(i for i, line in enumerate(lines) if "Summary" in line):]
    rows = [line.split()[0] for line in summary if line.split() and line.split()[0] in LESSONS["softmax"].VERSIONS]
    assert rows == list(LESSONS["softmax"].VERSIONS)  # one line per version
    coalescing = lines[next(i for i, line in enumerate(lines) if line.startswith("Coalescing:")):]
    assert any(line.endswith("100.0%") for line in coalescing[:12])  # rounded as the page rounds its lines
