"""Named barriers: ``bar.sync`` and ``bar.arrive`` with a barrier number and a thread count, as Numba intrinsics
(inline PTX), with their twins in the simulator (`gpukernels.sim._named_barrier`).

``cuda.syncthreads()`` is barrier 0 of the block, and every thread of the block takes part in it. An SM keeps 16 such
barriers per block, and PTX lets a kernel use the others with a *count*: the barrier completes when that many threads
have arrived at it, whichever they are. Two instructions arrive:

* ``named_barrier_sync(bar, count)``: ``bar.sync bar, count;`` -- arrive at barrier ``bar`` and wait until ``count``
  threads have arrived (this one included); then the barrier starts afresh for its next use.
* ``named_barrier_arrive(bar, count)``: ``bar.arrive bar, count;`` -- arrive, and go on at once without waiting.

So a barrier with ``count`` = 256 that warpgroup 1 (128 threads) waits at with ``named_barrier_sync`` and warpgroup 2
(128 threads) arrives at with ``named_barrier_arrive`` lets warpgroup 1 on only once warpgroup 2 has said so, and never
holds warpgroup 2 up: a *signal* from one group of warps to another, which the other waits for -- the turn-taking of
FlashAttention-3's "ping-pong" schedule (`gpukernels.attention.k11_ping_pong`).

Rules (PTX ISA, "bar, barrier"), each checked by the simulator, which names the kernel's line:

* ``bar`` is 1 to 15 here: barrier 0 is ``cuda.syncthreads()``'s, and mixing the two on one barrier is a hang.
* ``count`` is a multiple of 32 -- the hardware counts a warp's arrival as 32 threads -- and at most the block's
  threads; a constant (it is an immediate of the instruction here). Every arrival in one use of a barrier gives the
  same count.
* The instructions are ``.aligned``: all 32 lanes of a warp execute the same one, with the same ``bar`` and ``count``
  (the hardware counts whole warps: a warp whose lanes diverged around it breaks the count).
* A barrier completes only when ``count`` threads have arrived: too large a count, or a group that never arrives,
  and the threads that wait there wait forever. The simulator reports that hang as a ``deadlock``, naming the line
  the threads wait at, the lines the arrivals came from, and where every warp that did not arrive is.

Arrivals left over when a block ends (a group that arrived for a turn that never came) do no harm: a block's barriers
start fresh. On a GPU ``bar.sync`` also orders the memory accesses of the threads that take part; the simulator's
twins order only who runs when (the kernels here share no data through them: their data moves through mbarriers).
"""

from __future__ import annotations

from ._intrinsics import _simulated

__all__ = ["named_barrier_sync", "named_barrier_arrive", "BARRIERS", "MAX_THREADS"]

#: The barrier numbers a kernel may name: 1 to 15 (0 is cuda.syncthreads()'s).
BARRIERS = range(1, 16)
#: The most threads a block has, so the largest count a barrier takes.
MAX_THREADS = 1024


def count_error(name: str, count) -> str | None:
    """Why ``count`` is not a thread count a named barrier takes, or None when it is."""
    if isinstance(count, bool) or not isinstance(count, int) or count % 32 or not 32 <= count <= MAX_THREADS:
        return (f"{name}: the thread count must be a constant multiple of 32 (the hardware counts whole warps) from 32 "
                f"to {MAX_THREADS}; got {count!r}")
    return None


if _simulated():
    from .sim._named_barrier import named_barrier_arrive, named_barrier_sync  # noqa: F401

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def _barrier(name: str, op: str):
        # bar.sync / bar.arrive: the barrier's number in a register (a kernel may compute it: each warpgroup its
        # own), the count an immediate; convergent and a memory clobber, as every barrier (never moved across)
        def typer(typingctx, bar, count):
            if not (isinstance(bar, types.Integer) and isinstance(count, types.IntegerLiteral)):
                return None
            why = count_error(name, count.literal_value)
            if why:
                raise ValueError(why)
            n = count.literal_value

            def codegen(context, builder, sig, args):
                b = context.cast(builder, args[0], sig.args[0], types.int32)
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [b.type]), f"bar.{op} $0, {n};", "r,~{memory}",
                                   side_effect=True)
                builder.call(asm, [b], attrs=("convergent",))
                return context.get_dummy_value()

            return types.void(bar, count), codegen

        typer.__name__ = name
        return intrinsic(typer)

    named_barrier_sync = _barrier("named_barrier_sync", "sync")
    named_barrier_arrive = _barrier("named_barrier_arrive", "arrive")
