"""Experiment behind benchmarks/NOTES.md (step 20, ``async_copy``): the cp.async ring of 3 shared buffers
(``make_interior_kernel(stages=3)``) on the plain 256 x 128 tile as well as on stream_k's schedule, against the same
kernels with their register prefetch, cuBLAS in the same run.

    GPUKERNELS_DEVICE=gpu python benchmarks/async_copy.py --json out.json 4096,4096,4096 6144,6144,6144

Adds ``async_16x8`` (``thread_16x8``'s tile and schedule with the ring) to ``matmul.VERSIONS`` for this process only
and runs ``gpukernels bench matmul`` on it, ``thread_16x8``, ``stream_k`` and ``async_copy``: every row is checked
against a float64 reference on NaN-poisoned output, then timed by graph replay with inputs rotated past L2. Rows
that are not 16-byte aligned run thread_16x8's scalar kernel in all four.
"""

import sys

from gpukernels import matmul
from gpukernels._intrinsics import aligned16
from gpukernels._launch import version
from gpukernels.bench import bench_main
from gpukernels.matmul._common import check, tiled_launch
from gpukernels.matmul._interior import make_interior_kernel
from gpukernels.matmul.k15_thread_16x8 import wide_kernel

async_kernel = make_interior_kernel(256, 128, bk=8, group=8, rows=16, vec=True, clamp=False, stages=3)


@version("matmul", check, kernels=[async_kernel, wide_kernel])
def async_16x8(a, b, c):
    """thread_16x8's 256 x 128 tile, its interior tiles copied by cp.async through 3 shared buffers."""
    if not aligned16(a, b):
        return tiled_launch(wide_kernel, c, (a, b, c))
    return tiled_launch(async_kernel, c, (a, b, c))


def main(argv):
    optimized = matmul.VERSIONS.pop("optimized")  # the registry's order is the table's: optimized stays last
    matmul.VERSIONS.update(async_16x8=async_16x8, optimized=optimized)
    json_args = argv[:2] if argv[:1] == ["--json"] else []
    sizes = argv[len(json_args):] or ["4096,4096,4096"]
    return bench_main(["matmul", "--versions", "thread_16x8", "async_16x8", "stream_k", "async_copy",
                       "--sizes", *sizes, *json_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
