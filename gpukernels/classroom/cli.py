"""The classroom options of ``gpukernels demo`` (wired in gpukernels/demo_cli.py): ``--html FILE``, ``--version``
(twice), ``--classroom``, ``--no-wait``. Every bad value ends in one line naming the option, what was expected
and what was given (exit status 2)."""

from __future__ import annotations

import os

import gpukernels

from ..cli import UsageError, nonnegative_int, path_text, step_name


def add_options(parser) -> None:
    parser.add_argument("--html", metavar="FILE", type=path_text, help="write the lesson's interactive classroom "
                        "page (one self-contained HTML file) to FILE")
    parser.add_argument("--version", action="append", metavar="STEP", help="with --html or --classroom: a step to "
                        "show, by name or number (tiled or 3); give it twice (default: the lesson's pair, e.g. naive "
                        "and tiled)")
    parser.add_argument("--seed", type=nonnegative_int, default=None,
                        help="with --html: the inputs' random seed (default 0)")
    parser.add_argument("--classroom", action="store_true", help="narrate one lesson in the terminal, a screen per idea (Enter steps)")
    parser.add_argument("--no-wait", action="store_true", help="with --classroom: run straight through")


def wanted(args) -> bool:
    return bool(args.html or args.classroom)


def check(args, lessons: list[str], sizes: dict) -> tuple[str, list | None, tuple | None]:
    """The lesson, versions and shape the classroom options ask for; UsageError names what is wrong."""
    from . import PAGES

    if args.html and args.classroom:
        raise UsageError("--html and --classroom are two ways to show a lesson: give one of them, not both")
    what = "--html" if args.html else "--classroom"
    if args.lesson == "all" and args.html and not os.path.isdir(args.html):
        raise UsageError(f"--html {args.html!r}: with 'all', --html takes an existing folder (one page per lesson "
                         f"in it); for one page, name a lesson ({', '.join(PAGES)})")
    if args.lesson == "all" and args.html and (args.version or sizes):
        raise UsageError("--version and --size name one lesson's versions and shape: with them, name a lesson")
    if args.lesson == "all" and args.classroom:  # it ran matmul alone, as if matmul were all
        raise UsageError(f"--classroom narrates one lesson; name it: gpukernels demo LESSON --classroom, LESSON one "
                         f"of {', '.join(PAGES)}")
    lesson = lessons[0] if args.lesson != "all" else "matmul"
    if args.version is not None:
        if len(args.version) != 2:
            raise UsageError(f"--version: {what} shows two versions side by side, so give --version twice; got "
                             f"{len(args.version)} ({', '.join(args.version)})")
        args.version = [step_name(lesson, v) for v in args.version]  # names or numbers, as source and diff take
        if args.version[0] == args.version[1]:
            raise UsageError(f"--version {args.version[0]!r} given twice: {what} compares two different versions "
                             "side by side")
    if args.html:
        folder = os.path.dirname(os.path.abspath(args.html))
        if not os.path.isdir(folder):
            raise UsageError(f"--html {args.html!r}: its folder {folder} does not exist")
    if args.no_wait and not args.classroom:
        raise UsageError("--no-wait goes with --classroom (it runs the narrated sequence straight through)")
    if args.seed is not None and not args.html:  # the narrated sequence draws its own inputs
        raise UsageError(f"--seed {args.seed}: --seed goes with --html FILE (the page's inputs), not --classroom")
    return lesson, args.version, sizes.get(lesson)


def main(args, lessons: list[str], sizes: dict) -> int:
    from rich.console import Console

    from .._errors import LaunchError
    from . import next_lesson, write_page  # on a GPU machine it traces in a simulator child (page_data_anywhere)
    from .data import TooLarge

    lesson, versions, shape = check(args, lessons, sizes)
    seed = args.seed or 0
    if args.classroom:
        from . import narrate

        try:
            return narrate.run(lesson, versions, shape, wait=not args.no_wait)
        except TooLarge as err:
            raise UsageError(f"--size: {err}") from None
        except LaunchError as err:  # a shape a version's own check refuses (cbr: a filter larger than the image)
            raise UsageError(f"--size {args.size}: {err}") from None
    if args.lesson == "all":  # every lesson's page into the folder
        for name in gpukernels.LESSONS:  # each page links the next lesson's, written beside it
            following = next_lesson(name)
            path = write_page(os.path.join(args.html, f"{name}.html"), name, seed=seed,
                              next_page=f"{following}.html" if following else None)
            Console().print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")
        return 0
    try:
        path = write_page(args.html, lesson, versions, shape, seed)
    except TooLarge as err:
        raise UsageError(f"--size: {err}") from None
    except LaunchError as err:
        raise UsageError(f"--size {args.size}: {err}") from None
    except OSError as err:
        raise UsageError(f"--html {args.html!r}: cannot write it ({err.strerror or err})") from None
    Console().print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB): open it in any browser, no server needed")
    return 0
