"""The command line called in this process: ``gpukernels ARGS`` as ``main(ARGS)``, its output read by capsys.

What a subprocess adds -- the entry point's own exit status -- is tested once (test_cli_safety's
``test_the_entry_point_prints_one_line_too``); every other refusal is checked here, without a second's start-up
per case."""

from gpukernels.cli import main


def run_main(capsys, args) -> tuple[int, str, str]:
    """``gpukernels ARGS`` in this process: (exit status, stdout, stderr). ``capsys``: pytest's capsys, or capfd
    for a command that may start a child process writing to the same terminal."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_:  # argparse's own exit (its one-line error)
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, fragment: str) -> None:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert fragment in lines[0], (fragment, err)
