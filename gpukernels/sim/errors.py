"""Errors raised by the gpukernels simulator, each naming the block, the thread and the kernel line.

Every error subclasses :class:`SimulatorError`, so ``except gpukernels.sim.SimulatorError`` catches them all.
``OutOfBoundsError`` is also an ``IndexError``, and a :class:`KernelError` wrapping, say, a ``ZeroDivisionError``
is also a ``ZeroDivisionError``, so code written against the stock simulator's exception types keeps working.

Each error carries its facts as attributes as well as in the message: ``block``, ``thread`` (``(x, y, z)``
tuples or ``None``), ``location`` (``"file.py:LINE"``) and ``kernel`` (the kernel's name).
"""

from __future__ import annotations


class SimulatorError(Exception):
    """Base class: something in a kernel run on the gpukernels simulator is wrong."""

    def __init__(self, message: str, *, kernel=None, block=None, thread=None, location=None):
        super().__init__(message)
        self.kernel = kernel
        self.block = block
        self.thread = thread
        self.location = location


class BarrierDivergenceError(SimulatorError):
    """``cuda.syncthreads()`` was not reached by every thread of a block, or was reached at different lines.

    On a GPU this is undefined behaviour (a hang or silently wrong results). ``waiting`` maps each
    ``file:line`` to the threads that waited there; ``exited`` lists the threads that had returned.
    """

    def __init__(self, message, *, waiting=None, exited=None, **kw):
        super().__init__(message, **kw)
        self.waiting = waiting or {}
        self.exited = exited or []


class KernelTimeoutError(SimulatorError):
    """The launch made no progress (no switch between CUDA threads) for ``timeout_s`` seconds: an endless
    loop, or a thread waiting for memory another thread would write; ``running`` maps thread -> where it was."""

    def __init__(self, message, *, running=None, **kw):
        super().__init__(message, **kw)
        self.running = running or {}


class OutOfBoundsError(SimulatorError, IndexError):
    """An index outside an array (global, shared or local), or a negative one computed at run time (see
    ``gpukernels.sim.arrays``: on a GPU that one silently reads the other end of the array)."""

    def __init__(self, message, *, array=None, index=None, shape=None, space=None, **kw):
        super().__init__(message, **kw)
        self.array = array
        self.index = index
        self.shape = shape
        self.space = space


class WarpMaskError(SimulatorError):
    """A warp-level primitive whose mask does not match the lanes that arrive (or a read from a lane that is
    not taking part)."""


class LaunchConfigError(SimulatorError, ValueError):
    """A grid or block beyond what a GPU accepts: the driver would refuse the launch."""


class KernelError(SimulatorError):
    """Any other exception raised by kernel code; the original is ``__cause__`` (and ``original``)."""

    original: BaseException | None = None


_kernel_error_classes: dict[type, type] = {}


def kernel_error_class(exc_type: type) -> type:
    """A KernelError subclass that is also ``exc_type`` (so ``except ZeroDivisionError`` still works)."""
    cls = _kernel_error_classes.get(exc_type)
    if cls is None:
        if issubclass(exc_type, SimulatorError) or exc_type is Exception:
            cls = KernelError
        else:
            try:
                cls = type(f"KernelError[{exc_type.__name__}]", (KernelError, exc_type), {})
                cls.__module__ = __name__
                cls("probe", kernel=None)  # some exception types need other constructor arguments
            except Exception:  # instance lay-out conflicts (OSError, UnicodeError, ...)
                cls = KernelError
        _kernel_error_classes[exc_type] = cls
    return cls


def make_kernel_error(message: str, original: BaseException, **kw) -> KernelError:
    err = kernel_error_class(type(original))(message, **kw)
    err.original = original
    return err


__all__ = [
    "SimulatorError",
    "BarrierDivergenceError",
    "KernelTimeoutError",
    "OutOfBoundsError",
    "WarpMaskError",
    "KernelError",
]
