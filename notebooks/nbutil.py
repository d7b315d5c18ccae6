"""The notebooks' helpers now live in the package, under test: ``gpukernels.notebook`` (and the child process
that runs simulator work from a GPU session in ``gpukernels._modes``). This shim keeps the notebooks'
``from nbutil import ...`` working until they import ``gpukernels.notebook`` themselves."""

from gpukernels.notebook import *  # noqa: F401,F403
from gpukernels.notebook import __all__  # noqa: F401
