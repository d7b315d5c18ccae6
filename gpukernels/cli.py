"""The ``gpukernels`` command. Each subcommand lives in its own module and is imported only when used, so
``gpukernels info`` stays fast and a missing optional piece cannot break the others."""

from __future__ import annotations

import importlib
import sys

# name -> (module, function, one-line help). The function takes argv (a list of str) and returns an exit code.
COMMANDS = {
    "info": ("gpukernels.cli", "info_main", "mode, device and package versions (and known-broken combinations)"),
    "demo": ("gpukernels.demo", "demo_main", "run every version of a lesson, check it, show the table and figures"),
    "bench": ("gpukernels.bench", "bench_main", "time every version on a GPU against cuBLAS / torch / cuDNN"),
    "trace": ("gpukernels.trace", "trace_main", "record a launch's memory accesses: traffic, coalescing, banks, races"),
    "resources": ("gpukernels.resources", "resources_main", "registers, shared memory, spills, occupancy (no GPU)"),
    "plots": ("gpukernels.viz", "plots_main", "write every lesson's figures and docs/gallery.md"),
    "grade": ("gpukernels.grade", "grade_main", "grade exercises (Gradescope results.json)"),
    "export-student": ("gpukernels.grade", "export_main", "copy the exercises without their solutions"),
}


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
        from rich.table import Table

        table = Table(title="gpukernels", show_header=False)
        for key in ("mode", "reason", "device", "compute_capability", "sm_count", "driver_version", "python",
                    "numba_cuda_backend"):
            if info.get(key) is not None:
                table.add_row(key, str(info[key]))
        for pkg, ver in info["versions"].items():
            table.add_row(pkg, ver or "not installed")
        console = Console()
        console.print(table)
        if info["mode"] == "sim":
            console.print("Kernels run on the CUDA simulator (CPU): correct results, no GPU speed.")
        for warning in info["warnings"]:
            console.print(f"[bold red]warning:[/] {warning}")
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
    return int(entry(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
