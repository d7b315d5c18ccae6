"""Execute the notebooks top to bottom with nbclient; fail on the first cell error.

    python notebooks/run_all.py                      # every notebook in this folder, outputs discarded
    python notebooks/run_all.py --inplace            # ... and write the executed notebooks back (to commit them)
    python notebooks/run_all.py 01_matmul.ipynb      # only some
    python notebooks/run_all.py --timings            # ... and each cell's seconds as it finishes

The kernel inherits this process's environment, so ``GPUKERNELS_DEVICE=sim`` or ``=gpu`` chooses where the
kernels run (unset: a GPU if there is one). The kernel is the ``python3`` kernel of the Python running this
script, started in this folder, as in JupyterLab.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELL_TIMEOUT = 600  # seconds per cell


def notebooks(names=None) -> list[Path]:
    """The notebooks to run: ``names`` (paths or file names in this folder), default every course notebook here (NN_*.ipynb, and a second part NNb_*.ipynb)."""
    if not names:
        return sorted(HERE.glob("[0-9][0-9]*_*.ipynb"))
    out = []
    for name in names:
        p = Path(name)
        out.append(p if p.exists() else HERE / p.name)
    return out


def execute(path: Path, timeout: int = CELL_TIMEOUT, inplace: bool = False, timings: bool = False):
    """Execute one notebook; raises nbclient's CellExecutionError (with the cell and traceback) on an error.
    Returns the executed notebook. ``timings``: print each code cell's seconds as soon as it finishes, so that a
    run stopped from outside (a time limit) still says where its time went."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    hooks = {}
    if timings:
        started = {}

        def start(cell, cell_index, **_):
            started[cell_index] = time.perf_counter()

        def done(cell, cell_index, **_):
            first = cell.source.splitlines()[0] if cell.source else ""
            print(f"  {path.stem} cell {cell_index:3d} {time.perf_counter() - started.pop(cell_index):7.1f} s  "
                  f"{first[:70]}", flush=True)

        hooks = {"on_cell_start": start, "on_cell_executed": done}
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}}, **hooks)
    client.execute()
    if inplace:
        nbformat.write(nb, path)
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: every NN_*.ipynb in notebooks/)")
    parser.add_argument("--inplace", action="store_true", help="write the executed notebooks back, with outputs")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds per cell (default %(default)s)")
    parser.add_argument("--timings", action="store_true", help="print each code cell's seconds as it finishes")
    args = parser.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    failed = []
    for path in notebooks(args.notebooks):
        start = time.perf_counter()
        try:
            execute(path, args.timeout, args.inplace, args.timings)
        except CellExecutionError as err:
            failed.append(path.name)
            print(f"FAILED  {path.name} after {time.perf_counter() - start:.0f} s\n{err}", file=sys.stderr, flush=True)
            continue
        print(f"ok      {path.name}  {time.perf_counter() - start:.0f} s" + ("  (written back)" if args.inplace else ""),
              flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
