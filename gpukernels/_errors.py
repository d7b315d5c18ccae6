"""The error every lesson launcher raises for bad arguments: one line naming the argument, what was expected and
what was given. Its own module so that the launch machinery (`gpukernels._launch`) and its fast path
(`gpukernels._fastlaunch`) both raise it without importing each other."""

from __future__ import annotations


class LaunchError(ValueError):
    """Bad arguments to a lesson launcher."""
