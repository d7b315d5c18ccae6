"""Every notebook runs top to bottom without a cell error (nbclient), in the mode of this test run (the
simulator in CI). Each cell has a time limit; the whole notebook should take well under 3 minutes on 2 cores."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "notebooks"))

run_all = pytest.importorskip("run_all")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = run_all.notebooks()
CELL_TIMEOUT = 300  # seconds


def test_there_are_notebooks():
    names = [p.name for p in NOTEBOOKS]
    assert names[0] == "00_start_here.ipynb" and len(names) >= 4, names


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = run_all.execute(path, timeout=CELL_TIMEOUT)  # raises CellExecutionError, naming the cell, on any error
    first = next(c for c in nb.cells if c.cell_type == "code" and c.outputs)
    text = "".join(o.get("text", "") for o in first.outputs)
    assert "Ran on:" in text and "Date:" in text, "the first output must say where and when the notebook ran"
