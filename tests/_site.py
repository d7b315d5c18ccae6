"""The course site as its three test modules check it (test_site.py, test_site_pages.py, test_site_student.py): built
once per test process and shared. Each module used to build its own, in every xdist worker that ran one of its tests
-- five builds of ~10 CPU-s (Sphinx) and ~20 s of wall each in a `make test-all` of 2 workers; the modules share the
xdist group `GROUP`, so that is one build now. The build is the same: tools/build_site.py from the committed notebooks
and docs, into a temporary folder, with a stand-in classroom page (`STAND_IN`) unless a module asks for the pages of
build/classroom and `make classroom` made them."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The xdist group of the site's tests: one worker builds the site once and runs them all.
GROUP = pytest.mark.xdist_group("site")

#: The classroom folder's stand-in: one page for the build's classroom hook to copy, link and give a way back.
STAND_IN = ("<!doctype html><title>matmul: naive vs tiled</title><link rel=icon href='data:,'>"
            "<body><p>classroom page</p></body>")

_BUILDS: dict = {}


def built_site(tmp_path_factory, real_classroom: bool = False) -> tuple[Path, dict, float]:
    """(output folder, the build's pages, seconds the build took): built on the first call with these classroom
    pages, then the same folder (the tests only read it)."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import build_site

    classroom = build_site.CLASSROOM if real_classroom and list(build_site.CLASSROOM.glob("*.html")) else None
    key = str(classroom)
    if key not in _BUILDS:
        tmp = tmp_path_factory.mktemp("site")
        if classroom is None:
            classroom = tmp / "classroom"
            classroom.mkdir()
            (classroom / "matmul.html").write_text(STAND_IN)
        start = time.perf_counter()
        pages = build_site.build(tmp / "site", classroom=classroom)
        _BUILDS[key] = (tmp / "site", pages, time.perf_counter() - start)
    return _BUILDS[key]
