"""The ``gpukernels`` command. Each subcommand lives in its own module and is imported only when used, so
``gpukernels info`` stays fast and a missing optional piece cannot break the others."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

# name -> (module, function, one-line help). The function takes argv (a list of str) and returns an exit code.
COMMANDS = {
    "info": ("gpukernels.cli", "info_main", "which backend runs kernels, what is unavailable here, package versions"),
    "demo": ("gpukernels.demo_cli", "demo_main", "run every version of a lesson, check it, show the table and figures"),
    "bench": ("gpukernels.bench", "bench_main", "time every version on a GPU against cuBLAS / torch / cuDNN"),
    "trace": ("gpukernels.trace", "trace_main", "record a launch's memory accesses: traffic, coalescing, banks, races"),
    "resources": ("gpukernels.resources", "resources_main", "registers, shared memory, spills, occupancy (no GPU)"),
    "source": ("gpukernels.source", "source_main", "print the code of one step of a lesson (by name or number)"),
    "diff": ("gpukernels.source", "diff_main", "what changed from one step of a lesson to another (gpukernels diff matmul 8 9)"),
    "plots": ("gpukernels.viz", "plots_main", "write every lesson's figures and docs/gallery.md"),
    "grade": ("gpukernels.grade", "grade_main", "grade exercises (Gradescope results.json)"),
    "export-student": ("gpukernels.grade", "export_main", "copy the exercises without their solutions"),
}


class UsageError(ValueError):
    """A command-line value that cannot be used; the message is one line for the person who typed it."""


def fail(prog: str, message: str) -> int:
    """Report a UsageError the way argparse reports its own (``prog: error: ...``): one line, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse with every command's way of refusing an option: one line (``prog: error: message``) and exit
    status 2, without the usage block argparse prints above it (``--help`` shows the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def nonnegative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (``--seed``: NumPy's generators take no negative seed)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def positive(kind, what: str):
    """An argparse type: a number of ``kind`` (int, float) > 0, refused as "expected ``what``, got ..." otherwise."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


def _probe(folder: Path, option: str, given) -> None:
    """Create and remove a file in ``folder``: the one sure test that a file can be written there (``os.access``
    says yes to root, and /proc or a read-only mount refuse only the write itself)."""
    import os
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=".gpukernels-", dir=folder)
    except OSError as err:
        raise UsageError(f"{option} {str(given)!r}: cannot write files in {folder} "
                         f"({err.strerror or err})") from None
    os.close(fd)
    os.unlink(name)


def output_file(path, option: str) -> Path:
    """A file a command will write: checked before any work is done, so that a typo costs nothing and nothing is
    lost at the end. Its folder must exist (none is created: a missing folder is a mistyped path) and take a
    new file; the path must not be a folder. Raises UsageError naming ``option``."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {str(path)!r}: is a folder; expected the name of a file to write")
    folder = p.absolute().parent
    if not folder.is_dir():
        raise UsageError(f"{option} {str(path)!r}: its folder {folder} does not exist (no folder is created)")
    _probe(folder, option, path)
    return p


def output_dir(path, option: str) -> Path:
    """A folder a command writes into: an existing folder, or a new one whose parent exists (made here; the
    parents the user did not ask for are never made). Raises UsageError naming ``option``."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {str(path)!r}: is a file; expected a folder")
    if not p.exists():
        parent = p.absolute().parent
        if not parent.is_dir():
            raise UsageError(f"{option} {str(path)!r}: its parent folder {parent} does not exist (only the last "
                             "folder of the path is created)")
        try:
            p.mkdir()
        except OSError as err:
            raise UsageError(f"{option} {str(path)!r}: cannot create it ({err.strerror or err})") from None
    _probe(p, option, path)
    return p


def input_json(path, option: str, key: str | None = None, what: str = "JSON"):
    """The JSON document in the file ``path`` (with ``key``: an object holding that key, else UsageError saying
    the file is not ``what``). Raises UsageError naming ``option`` for a missing, empty or malformed file."""
    import json

    p = Path(path)
    if not p.exists():
        raise UsageError(f"{option} {str(path)!r}: no such file; expected {what}")
    if not p.is_file():
        raise UsageError(f"{option} {str(path)!r}: not a file; expected {what}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{option} {str(path)!r}: cannot read it ({getattr(err, 'strerror', None) or err})") from None
    if not text.strip():
        raise UsageError(f"{option} {str(path)!r}: the file is empty; expected {what}")
    try:
        data = json.loads(text)
    except ValueError as err:
        raise UsageError(f"{option} {str(path)!r}: not JSON ({err}); expected {what}") from None
    if key is not None and not (isinstance(data, dict) and key in data):
        raise UsageError(f"{option} {str(path)!r}: holds no {key!r}; expected {what}")
    return data


def shape_names(lesson) -> tuple:
    """Names of a lesson's shape dimensions: ``SHAPE_NAMES`` if it has one, else the ``shape = (M, N, K)`` its
    ``make_inputs`` docstring states, else d1, d2, ... as many as its trace shape has."""
    names = getattr(lesson, "SHAPE_NAMES", None)
    if names:
        return tuple(names)
    m = re.search(r"shape = \(([A-Za-z, ]+)\)", lesson.make_inputs.__doc__ or "")
    if m:
        return tuple(n.strip() for n in m.group(1).split(","))
    return tuple(f"d{i + 1}" for i in range(len(lesson.SHAPES["trace"])))


def parse_size(text: str, lesson_name: str) -> tuple:
    """``--size`` as a person types it, for one lesson: ``32`` (a square, or a cube for a three-dimensional
    shape such as matmul's), ``32,32,32``, ``32x32x32`` (also ``32 32 32``, ``32X32``). Raises UsageError naming
    the lesson's expected form."""
    import gpukernels

    names = shape_names(gpukernels.LESSONS[lesson_name])
    form = ",".join(names)
    example = ",".join(str(v) for v in gpukernels.LESSONS[lesson_name].SHAPES["trace"])
    one = " or one number for a square" if len(names) == 2 else " or one number for a cube" if len(names) == 3 else ""
    expected = f"{lesson_name} --size takes {form} (e.g. {example} or {example.replace(',', 'x')}){one}"
    # The whole text must be numbers joined by one separator each (a comma, an x, or spaces): "3,x", "3x" or
    # "3,,3" are refused rather than read as the numbers they happen to contain.
    if str(text).strip() and not re.fullmatch(r"\s*\d+(?:\s*[,xX]\s*\d+|\s+\d+)*\s*", str(text)):
        raise UsageError(f"--size {text!r} is not a list of whole numbers; {expected}")
    values = tuple(int(p) for p in re.split(r"[,xX\s]+", str(text).strip()) if p)
    if len(values) == 1 and len(names) in (2, 3):
        values = values * len(names)
    if len(values) != len(names):
        raise UsageError(f"--size {text!r} has {len(values)} number(s); {expected}")
    if min(values) < 1:
        raise UsageError(f"--size {text!r}: every dimension must be at least 1; {expected}")
    return values


def usage() -> str:
    lines = ["usage: gpukernels COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<15} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    lines += ["", "gpukernels COMMAND --help shows a command's options."]
    return "\n".join(lines)


def info_main(argv: list[str]) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="gpukernels info", description=COMMANDS["info"][2])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    from gpukernels import device_info

    info = device_info()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        table = Table(title="gpukernels", show_header=False)
        for key in ("backend", "mode", "reason", "device", "compute_capability", "sm_count", "driver_version",
                    "platform", "python", "cuda_toolchain"):
            if info.get(key) is not None:
                table.add_row(key, escape(str(info[key])))
        for pkg, ver in info["versions"].items():
            table.add_row(pkg, ver or "not installed")
        console = Console()
        console.print(table)
        console.print(f"Kernels run on {escape(info['backend'])}.", highlight=False)
        for line in info["unavailable"]:
            console.print(f"[yellow]unavailable here:[/] {escape(line)}", highlight=False)
        for warning in info["warnings"]:
            console.print(f"[bold red]warning:[/] {escape(warning)}")
    return 1 if info["warnings"] else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"gpukernels: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    try:
        entry = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as err:
        print(f"gpukernels {name}: not available in this installation ({err})", file=sys.stderr)
        return 2
    try:
        code = entry(rest)
    except UsageError as err:  # a value the subcommand could not use: one line, no traceback
        return fail(f"gpukernels {name}", str(err))
    except KeyboardInterrupt:
        print(f"gpukernels {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say, and no one to say it to
        return 141
    except OSError as err:  # the machine refused a read or write the checks could not foresee (a full disk)
        where = f": {err.filename}" if getattr(err, "filename", None) else ""
        return fail(f"gpukernels {name}", f"{err.strerror or err}{where}")
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
