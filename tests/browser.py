"""A headless Chromium for the tests that open a generated page (the course site, the classroom demo pages):
``with chromium() as driver`` or the ``browser`` fixture (tests/conftest.py). Pages are opened from ``file://``
URLs, as a student opens them from a USB stick -- no server.

Needs selenium (the dev extra) and Chromium with its driver (Debian: ``apt-get install chromium
chromium-driver``; .ci/run installs them). `missing()` says what is absent; tests marked ``needs_browser`` skip
with that reason. Console errors are collected: `console_errors(driver)` after the page has run."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil

CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _binary():
    return os.environ.get("GPUKERNELS_CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM)), None)


def missing() -> str | None:
    """Why no browser test can run here, or None."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    if _binary() is None:
        return "no Chromium on PATH (apt-get install chromium chromium-driver, or set GPUKERNELS_CHROMIUM)"
    if shutil.which("chromedriver") is None:
        return "no chromedriver on PATH (apt-get install chromium-driver)"
    return None


@contextlib.contextmanager
def chromium(width: int = 1920, height: int = 1080):
    """A headless Chromium at ``width`` x ``height`` (a projector's 1080p by default) that keeps console logs."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _binary()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--allow-file-access-from-files"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """The page's console messages of level SEVERE since the last call (uncaught exceptions, failed loads)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
