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
    "demo": ("gpukernels.demo_cli", "demo_main", "run and check every version of a lesson, print one table (--save DIR: its figures)"),
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


def path_text(text: str) -> str:
    """An argparse type: a path, refused when empty or blank (``Path("")`` is the current folder, so an empty
    ``--save ""`` would otherwise write there, and an empty ``--html ""`` would be read as not given)."""
    if not str(text).strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    return text


def _no_empty(path, option: str) -> None:
    if isinstance(path, str) and not path.strip():
        raise UsageError(f"{option} {path!r}: expected a path, got an empty one")


def _parent_folder(p: Path, path, option: str) -> Path:
    """The folder ``p`` would be made in; UsageError naming ``option`` when it is a file or missing."""
    folder = p.absolute().parent
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {str(path)!r}: {folder} is a file, not a folder")
    return folder


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
    _no_empty(path, option)
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {str(path)!r}: is a folder; expected the name of a file to write")
    folder = _parent_folder(p, path, option)
    if not folder.is_dir():
        raise UsageError(f"{option} {str(path)!r}: its folder {folder} does not exist (no folder is created)")
    _probe(folder, option, path)
    return p


def output_dir(path, option: str) -> Path:
    """A folder a command writes into: an existing folder, or a new one whose parent exists (made here; the
    parents the user did not ask for are never made). Raises UsageError naming ``option``."""
    _no_empty(path, option)
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {str(path)!r}: is a file; expected a folder")
    if not p.exists():
        parent = _parent_folder(p, path, option)
        if not parent.is_dir():
            raise UsageError(f"{option} {str(path)!r}: its parent folder {parent} does not exist (only the last "
                             "folder of the path is created)")
        try:
            p.mkdir()
        except OSError as err:
            raise UsageError(f"{option} {str(path)!r}: cannot create it ({err.strerror or err})") from None
    _probe(p, option, path)
    return p


def input_json(path, option: str, key: str | None = None, what: str = "JSON", report: str | None = None):
    """The JSON document in the file ``path`` (with ``key``: an object holding that key, else UsageError saying
    the file is not ``what``; ``report``: "bench" or "overhead", a report of that command checked whole). Raises
    UsageError naming ``option`` for a missing, empty or malformed file."""
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
    if report is not None:  # a report (bench, bench --overhead): what every reader of one takes for granted
        problem = _report_problem(data, overhead=report == "overhead")
        if problem:
            raise UsageError(f"{option} {str(path)!r}: {problem}; expected {what}")
    return data


#: What a `gpukernels bench --json` report and a `bench --overhead --json` one hold, and every row of each: the
#: fields their readers (bench.print_table and merge, overhead.print_report, the performance figures) index.
REPORT_FIELDS = {False: ("environment", "method"), True: ("environment",)}
REPORT_ROW_FIELDS = {
    False: ("lesson", "name", "kind", "shape", "ok", "median_ms", "bytes", "flops"),
    True: ("lesson", "name", "kind", "shape", "ok", "array_kind", "us_per_call", "target_us", "meets_target",
           "peer_us_per_call", "checked_us_per_call", "device_us"),
}


def _report_problem(data: dict, overhead: bool) -> str | None:
    """Why ``data`` is not the report expected (None when it is): a report read from a file is checked whole, so
    that another command's report, or a hand-edited or truncated one, is refused in one line rather than failing
    half-way through with a traceback."""
    if data.get("kind") == "overhead" and not overhead:
        return "it is a `gpukernels bench --overhead --json` report"
    if overhead and data.get("kind") != "overhead":
        return "it is a `gpukernels bench --json` report" if "method" in data else "it lacks \"kind\": \"overhead\""
    for field in REPORT_FIELDS[overhead]:
        if field not in data:
            return f"it lacks {field!r}"
    if not isinstance(data["environment"], dict):
        return "its 'environment' is not an object"
    rows = data["results"]
    if not isinstance(rows, list):
        return f"its 'results' is a {type(rows).__name__}, not a list of rows"
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f"results[{i}] is a {type(row).__name__}, not an object"
        missing = [f for f in REPORT_ROW_FIELDS[overhead] if f not in row]
        if missing:
            return f"results[{i}] lacks {', '.join(map(repr, missing))}"
        if not isinstance(row["shape"], list):
            return f"results[{i}]['shape'] is a {type(row['shape']).__name__}, not a list"
    return None


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


def step_name(lesson: str, text, option: str = "--version") -> str:
    """A step of ``lesson`` as a person names it -- its name (``tiled``) or its number in the ladder (``3``), as
    ``gpukernels source`` and ``diff`` take it (`gpukernels.source.resolve`, the one rule) -- returned as its name.
    Raises UsageError naming ``option``, what was expected and what was given."""
    from .source import StepError, expected_step, resolve

    try:
        return resolve(lesson, text, option)[1].name
    except StepError:
        raise UsageError(f"{option} {str(text)!r}: {lesson} has no such step; {expected_step(lesson)}") from None


def blank_argument(args: list[str]) -> str | None:
    """The refusal of an empty or blank value (``--out ""``, ``--json=``, a lesson ``" "``), or None: no option of
    any command takes one, and a path option would read it as the current folder (``Path("") == Path(".")``: `plots
    --out ""` wrote its figures into the working directory) or as not given (`grade --submission ""` graded the
    default files)."""
    for i, arg in enumerate(args):
        arg = str(arg)
        if arg.startswith("--") and "=" in arg:
            option, _, value = arg.partition("=")
            if not value.strip():
                return f"{option}: expected a value, got {value!r}"
        elif not arg.strip():
            before = str(args[i - 1]) if i else ""
            if before.startswith("-") and "=" not in before and before.lstrip("-") and not before[1:2].isdigit():
                return f"{before}: expected a value, got {arg!r}"
            return f"argument {i + 1}: expected a value, got {arg!r}"
    return None


def usage() -> str:
    lines = ["usage: gpukernels COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<15} {help_}" for name, (_, _, help_) in COMMANDS.items()]
    lines += ["", "gpukernels COMMAND --help shows a command's options."]
    return "\n".join(lines)


def info_main(argv: list[str]) -> int:
    import argparse
    import json

    parser = ArgumentParser(prog="gpukernels info", description=COMMANDS["info"][2])
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


class Stopped(BaseException):
    """SIGTERM or SIGHUP reached a command: unwinds it like Ctrl-C (a BaseException, so that no ``except
    Exception`` of the command stops it), after the child processes it started were told to end. The signal is
    kept in ``_STOPPED_BY``, not in the exception: the simulator re-raises an exception from inside a kernel as
    its own type with a new message."""


_STOPPED_BY: list[int] = []


def _children() -> list[int]:
    """The ids of this process's child processes, read from /proc (none where there is no /proc)."""
    import os

    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == me:
                found.append(int(entry))
    return found


def _stop(signum, frame):
    """SIGTERM or SIGHUP: end the children this command started (compilers of `gpukernels resources`, the
    simulator child of `trace` on a GPU machine), which would otherwise outlive it and keep a thread of it
    waiting on them, then unwind it (`Stopped`)."""
    import os
    import signal

    for pid in _children():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    _STOPPED_BY.append(signum)
    raise Stopped(signum)


def _handle_stops() -> dict:
    """Install `_stop` for SIGTERM and SIGHUP where their action is still the default (a command such as `grade`
    may install its own); returns what to restore."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        num = getattr(signal, name, None)
        if num is not None and signal.getsignal(num) is signal.SIG_DFL:
            previous[num] = signal.signal(num, _stop)
    return previous


def main(argv: list[str] | None = None) -> int:
    import signal

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 2 and argv[0] == "help" and argv[1] in COMMANDS:  # `gpukernels help demo`
        argv = [argv[1], "--help"]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = [c for c in COMMANDS if c == name.strip().lower()]
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(f"gpukernels: error: unknown command {name!r}; {hint}expected one of {', '.join(COMMANDS)} "
              "(gpukernels --help says what each does)", file=sys.stderr)
        return 2
    blank = blank_argument(rest)
    if blank:
        return fail(f"gpukernels {name}", blank)
    module, func, _ = COMMANDS[name]
    try:
        entry = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as err:
        print(f"gpukernels {name}: not available in this installation ({err})", file=sys.stderr)
        return 2
    previous = _handle_stops()
    try:
        code = entry(rest)
    except UsageError as err:  # a value the subcommand could not use: one line, no traceback
        return fail(f"gpukernels {name}", str(err))
    except KeyboardInterrupt:
        print(f"gpukernels {name}: interrupted", file=sys.stderr)
        return 130
    except Stopped:
        num = _STOPPED_BY[-1] if _STOPPED_BY else signal.SIGTERM
        print(f"gpukernels {name}: stopped by {signal.Signals(num).name}", file=sys.stderr)
        return 128 + num
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say, and no one to say it to
        return 141
    except OSError as err:  # the machine refused a read or write the checks could not foresee (a full disk)
        where = f": {err.filename}" if getattr(err, "filename", None) else ""
        return fail(f"gpukernels {name}", f"{err.strerror or err}{where}")
    finally:
        for num, handler in previous.items():
            signal.signal(num, handler)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
