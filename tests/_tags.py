"""How tests name a kernel line that a message must quote: the one line of a test file ending in ``# TAG``."""

import functools
import os


def tagged_line(path: str, tag: str) -> str:
    """``test_x.py:N`` for the one line of ``path`` that ends in ``# tag``."""
    with open(path) as f:
        hits = [n for n, line in enumerate(f, 1) if line.rstrip().endswith("# " + tag)]
    assert len(hits) == 1, tag
    return f"{os.path.basename(path)}:{hits[0]}"


def line_finder(path: str):
    """``line_of(tag)`` for the file at ``path`` (a test module passes its ``__file__``)."""
    return functools.partial(tagged_line, path)
