"""Execute the notebooks top to bottom with nbclient; fail on the first cell error.

    python notebooks/run_all.py                      # every notebook in this folder, outputs discarded
    python notebooks/run_all.py --inplace            # ... and write the executed notebooks back (to commit them)
    python notebooks/run_all.py 01_matmul.ipynb      # only some

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
    """The notebooks to run: ``names`` (paths or file names in this folder), default every NN_*.ipynb here."""
    if not names:
        return sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    out = []
    for name in names:
        p = Path(name)
        out.append(p if p.exists() else HERE / p.name)
    return out


def execute(path: Path, timeout: int = CELL_TIMEOUT, inplace: bool = False):
    """Execute one notebook; raises nbclient's CellExecutionError (with the cell and traceback) on an error.
    Returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    if inplace:
        nbformat.write(nb, path)
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: every NN_*.ipynb in notebooks/)")
    parser.add_argument("--inplace", action="store_true", help="write the executed notebooks back, with outputs")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds per cell (default %(default)s)")
    args = parser.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    failed = []
    for path in notebooks(args.notebooks):
        start = time.perf_counter()
        try:
            execute(path, args.timeout, args.inplace)
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
