"""What the softmax steps share: the argument check, the warp constants, the `Config` of a kernel that keeps a row
on chip, and the power-of-two rounding that keeps the number of compiled kernels small."""

from __future__ import annotations

from dataclasses import dataclass

from .._launch import check_array

WARP = 32
FULL_MASK = 0xFFFFFFFF  # every lane of the warp takes part in a shuffle


def _check(x):
    x = check_array("x", x, 2, "(M, N)")
    return (x,), {}, tuple(x.shape)


def _pow2(v: int) -> int:
    return 1 << (max(1, v) - 1).bit_length()  # the power of two >= v: few distinct compiled kernels


@dataclass(frozen=True)
class Config:
    """How a kernel that keeps its row on chip runs a row of n values (steps 4-6 and ``optimized``). Every field
    is a compile-time constant of the kernel, so the per-thread cache is an array of registers."""

    threads: int  # threads per row: a power of two up to 32 (a warp holds 32 // threads rows), or a multiple of 32
    elems: int  # values per thread cached in registers
    cached: bool  # False: the row is too long for the chip; two-pass online kernel
    warps_per_block: int = 1  # rows of at most a warp: how many warps share a block
    shared: int = 0  # values of the row cached in shared memory (a multiple of threads), before the registers'
    min_blocks: int = 0  # launch_bounds(block size, min_blocks): caps registers so min_blocks blocks fit per SM
    vec: bool = False  # rows of a warp or less: 16-byte loads and stores (rows 16-byte aligned: the launcher checks)

    @property
    def block(self) -> tuple:
        return (WARP, self.warps_per_block) if self.threads <= WARP else (self.threads,)

    @property
    def rows_per_block(self) -> int:
        return self.warps_per_block * (WARP // self.threads) if self.threads <= WARP else 1

    def __iter__(self):
        # Unpacks as ``threads, elems, cached = optimized_config(n)``, the three numbers that matter most.
        return iter((self.threads, self.elems, self.cached))
