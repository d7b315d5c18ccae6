"""The command line of ``gpukernels demo [LESSON|all] [--size ...] [--save DIR]`` and its classroom options
(``--html``, ``--classroom``: `gpukernels.classroom.cli`); what it runs is `gpukernels.demo`."""

from __future__ import annotations

from pathlib import Path

import gpukernels
from gpukernels import LESSONS, demo
from gpukernels.check import supports, version_inputs


def demo_main(argv: list[str]) -> int:
    from gpukernels._launch import LaunchError
    from gpukernels._simtime import check_size
    from gpukernels.cli import ArgumentParser, UsageError, fail, parse_size, path_text

    prog = "gpukernels demo"
    # what it prints is a table; the figures are written only with --save (the help promised them unasked)
    parser = ArgumentParser(prog=prog, description="Run every version of a lesson (or of every lesson: all, the "
                            "default), check each against the float64 reference and print a table of them: on a GPU the "
                            "times, in the simulator the memory traffic counted. --save DIR also writes the lesson's "
                            "figures (PNG); --html FILE writes its interactive page; --classroom narrates it here.")
    parser.add_argument("lesson", nargs="?", default="all", help=f"one of {', '.join(LESSONS)}, or all")
    parser.add_argument("--size", help="shape: 512,512,512 or 512x512x512 for matmul, or 512 for a square (a cube "
                                       "for matmul); default: the lesson's demo shape (on a GPU a larger one)")
    parser.add_argument("--save", type=path_text, metavar="DIR",
                        help="also write the lesson's key figures (PNG) into this folder")
    from gpukernels.classroom import cli as classroom  # --html, --version, --classroom

    classroom.add_options(parser)
    args = parser.parse_args(argv)
    args.save = None if args.save is None else Path(args.save)
    lessons = list(LESSONS) if args.lesson == "all" else [args.lesson]
    if any(name not in LESSONS for name in lessons):
        return fail(prog, f"unknown lesson {args.lesson!r}; choose from {', '.join(LESSONS)} or all")
    try:  # every lesson's shape before anything runs (with "all", --size must fit each lesson)
        sizes = {name: parse_size(args.size, name) for name in lessons} if args.size is not None else {}
    except UsageError as err:
        return fail(prog, str(err) + (" (with 'all', --size must fit every lesson: name one)" if len(lessons) > 1
                                      else ""))
    if classroom.wanted(args):
        return classroom.main(args, lessons, sizes)
    if args.version or args.no_wait:
        return fail(prog, "--version and --no-wait go with --html FILE or --classroom")
    if args.seed is not None:  # the demo's inputs are its own: a seed it would not use is refused, not ignored
        return fail(prog, f"--seed {args.seed}: --seed goes with --html FILE (the page's inputs)")
    gpu = gpukernels.MODE == "gpu"
    for name, shape in sizes.items():  # before any array is made: memory, and what the simulator cannot finish
        check_size(name, shape, runs=len(LESSONS[name].VERSIONS), simulator=not gpu, given=args.size)
    for name, shape in sizes.items():  # a size no version takes (attention's D past 128): the first one's reason
        if not any(supports(name, v, shape) for v in LESSONS[name].VERSIONS):
            first = next(iter(LESSONS[name].VERSIONS))
            inputs = version_inputs(name, first, LESSONS[name].make_inputs(shape, 0))
            return fail(prog, f"--size {args.size}: {demo._why_not(LESSONS[name].VERSIONS[first], inputs)}")
    if args.save is not None:
        from gpukernels.cli import output_dir

        output_dir(args.save, "--save")

    from rich.console import Console

    console = Console()  # the terminal's width (COLUMNS, or 80 when piped): the tables are drawn to fit it
    console.print(f"[bold]gpukernels demo[/] on {gpukernels.device_info().get('device')} "
                  f"({'real GPU timings' if gpu else 'simulator: correctness and counted traffic, no timings'})")
    try:
        all_ok = _run_lessons(console, lessons, sizes, args, gpu)
    except LaunchError as err:  # a --size a version's argument check refuses (cbr: a filter larger than the image)
        if args.size is None:
            raise
        return fail(prog, f"--size {args.size}: {err}")
    if not all_ok:
        console.print("[bold red]some versions gave wrong results (see above)[/]")
    return 0 if all_ok else 1


def _run_lessons(console, lessons, sizes, args, gpu) -> bool:
    from rich.progress import Progress

    from gpukernels._simtime import watch

    all_ok = True
    with Progress(console=console, transient=True) as progress:
        for lesson in lessons:
            mod = LESSONS[lesson]
            shape = sizes.get(lesson) or mod.SHAPES["demo_gpu" if gpu else "demo_sim"]
            task = progress.add_task(f"{lesson} {shape}", total=len(mod.VERSIONS))
            if gpu:
                rows = demo.demo_gpu(lesson, tuple(shape), progress, task)
            else:  # the blocks of each launch, the time it projects, and a stop past the limit
                size = "x".join(map(str, shape))
                with watch(progress, f"{lesson} {size}", size=args.size or size):
                    rows = demo.demo_sim(lesson, tuple(shape), progress, task)
            progress.console.print()
            if gpu:
                demo.print_gpu_table(progress.console, rows, lesson, shape)
            else:
                demo.print_sim_table(progress.console, rows)
            all_ok &= all(r["ok"] for r in rows)
            if args.save:
                for path in demo.save_figures(lesson, args.save / lesson, progress.console):
                    progress.console.print(f"  wrote {path}")
    return all_ok
