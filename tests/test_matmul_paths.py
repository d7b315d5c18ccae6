"""The fast paths of the later matmul versions: shapes large enough that whole tiles lie inside the matrices
(so `interior` takes its unguarded path) and the tile choice of `wave_fit`. The generic shape tests in
test_lessons.py are all smaller than one 128 x 128 tile, so without these only the edge paths would run."""

import pytest

from gpukernels import matmul

from .test_lessons import run_checked


@pytest.mark.parametrize("name,shape", [
    ("interior", (130, 129, 20)),  # block (0, 0) inside, three edge blocks; K = 8 + 8 + 4: a ragged last k tile
    ("interior", (128, 128, 16)),  # exactly one tile, all of it on the unguarded path
    ("deep_k", (130, 129, 37)),  # 16-deep k tiles: 16 + 16 + 5
    ("swizzled", (257, 130, 24)),  # 3 tile rows in one group of 8: the remapped block order covers every tile
    ("wave_fit", (70, 66, 20)),  # 64 x 64 tiles (4 blocks < 132 SMs): (0, 0) inside, the rest on the edges
    ("wave_fit", (64, 64, 24)),
])
def test_interior_and_edge_paths(name, shape, seed):
    run_checked("matmul", name, shape, seed)


def test_wave_fit_picks_the_tile_that_fills_the_gpu():
    assert matmul.wave_fit_kernel(4096, 4096, sms=132) is matmul.swizzled_kernel  # 1024 blocks of 128 x 128
    assert matmul.wave_fit_kernel(4095, 4097, sms=132) is matmul.swizzled_kernel
    assert matmul.wave_fit_kernel(1024, 1024, sms=132) is matmul.small_tile_kernel  # 64 blocks would idle 68 SMs
    assert matmul.wave_fit_kernel(1024, 1024, sms=48) is matmul.swizzled_kernel  # a smaller GPU is filled
    assert matmul.small_tile_kernel.tile == (64, 64) and matmul.small_tile_kernel.threads == 64
    assert matmul.interior_kernel.tile == (128, 128) and matmul.interior_kernel.threads == 256
