"""The launch floor: what is below a fast-path hit -- host microseconds per launch of one recorded kernel, by route.

Run on a GPU (``GPUKERNELS_DEVICE=gpu python benchmarks/launch_floor.py``). One `matmul.tiled` entry (64^3, Numba
arrays, out given) is recorded by two calls; then each route below launches that very kernel with those very
parameters, in batches of ``BATCH`` back-to-back calls (the GPU synchronised between batches, so the launch queue
never fills), and prints the median over batches of the per-call time:

* ``hit``: ``matmul.tiled(a, b, out=c)``, the whole call (what ``bench --overhead`` times);
* ``entry.run``: the hit's last step alone (pointer writes, the entry's lock, cuLaunchKernel);
* ``cuLaunchKernel ...``: the driver call alone through ctypes -- through the PyDLL view the hit uses and the CDLL
  (which drops the GIL around the call); with the parameters as ``kernelParams`` (an array of pointers, one per
  Numba parameter: 27 for three 2-D arrays) or as one packed buffer through ``extra``; on the legacy default
  stream, the per-thread default stream and a non-blocking stream;
* ``cuda.bindings``: the same launch through NVIDIA's Cython bindings (numba-cuda's own dependency), if present;
* ``ctypes floor``: ``cuCtxGetCurrent`` through the PyDLL view, the cheapest driver call there is;
* ``torch.mm``: the peer of ``bench --overhead``'s matmul rows.

Writes nothing; the printed table goes into benchmarks/NOTES.md.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time

import numpy as np

BATCH = 250
BATCHES = 9


def per_call_us(fn, sync) -> float:
    for _ in range(50):
        fn()
    sync()
    clock = time.perf_counter_ns
    out = []
    for _ in range(BATCHES):
        t0 = clock()
        for _ in range(BATCH):
            fn()
        out.append((clock() - t0) / BATCH / 1e3)
        sync()
    return statistics.median(out)


def packed_buffer(values) -> ctypes.Array:
    """The parameters as one buffer, each value at its own alignment (what ``extra`` expects)."""
    layout, off = [], 0
    for v in values:
        size, align = ctypes.sizeof(v), ctypes.alignment(v)
        off = (off + align - 1) // align * align
        layout.append((off, v))
        off += size
    buf = (ctypes.c_char * max(off, 1))()
    for o, v in layout:
        ctypes.memmove(ctypes.addressof(buf) + o, ctypes.addressof(v), ctypes.sizeof(v))
    return buf


def main() -> int:
    import gpukernels  # first: it chooses the simulator or the GPU before numba.cuda is imported
    from gpukernels import _fastlaunch, matmul
    from numba import cuda

    if gpukernels.MODE != "gpu":
        print("launch_floor needs a GPU (GPUKERNELS_DEVICE=gpu)")
        return 2
    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((64, 64), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((64, 64), dtype=np.float32))
    c = cuda.device_array((64, 64), np.float32)
    matmul.tiled(a, b, out=c)
    matmul.tiled(a, b, out=c)
    assert _fastlaunch.STATS.get("hit"), _fastlaunch.STATS
    backend = _fastlaunch.BACKEND
    (entry,) = matmul.tiled._fast.values()
    assert len(entry.launches) == 1
    prepared = entry.launches[0]
    bases = [int(x.device_ctypes_pointer.value) for x in (a, b, c)]
    values = entry.keep[0][:-1]  # the template's ctypes values (the last item is their pointer array)
    sync = cuda.synchronize
    rows = []

    def row(name, fn):
        try:
            us = per_call_us(fn, sync)
        except Exception as e:  # a route this machine does not have
            rows.append((name, None, f"{type(e).__name__}: {e}"))
            return
        rows.append((name, us, ""))

    row("hit: matmul.tiled(a, b, out=c)", lambda: matmul.tiled(a, b, out=c))
    row("entry.run (pointer writes, lock, launch)", lambda: entry.run(backend, bases, 0))

    fast, slow = backend._fast_lib.cuLaunchKernel, backend._lib.cuLaunchKernel
    fast.restype = slow.restype = ctypes.c_int
    legacy = prepared[0]
    row("cuLaunchKernel PyDLL, kernelParams, legacy stream", lambda: fast(*legacy))
    row("cuLaunchKernel CDLL, kernelParams, legacy stream", lambda: slow(*legacy))
    per_thread = prepared.head + (ctypes.c_void_p(2), prepared.params, None)  # CU_STREAM_PER_THREAD
    row("cuLaunchKernel PyDLL, kernelParams, per-thread stream", lambda: fast(*per_thread))
    s = cuda.stream()  # Numba creates it with CU_STREAM_DEFAULT (it synchronises with the legacy stream)
    other = prepared.head + (ctypes.c_void_p(_fastlaunch.stream_handle(s)), prepared.params, None)
    row("cuLaunchKernel PyDLL, kernelParams, a created stream", lambda: fast(*other))
    buf = packed_buffer(values)
    size = ctypes.c_size_t(ctypes.sizeof(buf))
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 0)
    with_extra = prepared.head + (ctypes.c_void_p(None), None, extra)
    row(f"cuLaunchKernel PyDLL, extra (one {ctypes.sizeof(buf)}-byte buffer), legacy", lambda: fast(*with_extra))
    # the extra route computes the same product? (checked: its output against the kernelParams route's)
    c.copy_to_device(np.full((64, 64), np.nan, np.float32))
    fast(*with_extra)
    sync()
    got = c.copy_to_host()
    want = a.copy_to_host().astype(np.float64) @ b.copy_to_host().astype(np.float64)
    extra_ok = bool(np.allclose(got, want, rtol=1e-4, atol=1e-3))
    ref = ctypes.byref(ctypes.c_void_p())
    ctx = backend._fast_lib.cuCtxGetCurrent
    row("ctypes floor: cuCtxGetCurrent PyDLL", lambda: ctx(ref))
    try:
        from cuda.bindings import driver as drv

        func = drv.CUfunction(prepared.head[0].value)
        dims = tuple(v.value for v in prepared.head[1:8])
        params_addr = prepared.params.value
        row("cuda.bindings cuLaunchKernel, kernelParams address",
            lambda: drv.cuLaunchKernel(func, *dims, 0, params_addr, 0))
    except ImportError as e:
        rows.append(("cuda.bindings", None, str(e)))
    try:
        import torch

        ta, tb = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        tc = torch.empty(64, 64, device="cuda")
        row("torch.mm(a, b, out=c), 64^3 (the peer)", lambda: torch.mm(ta, tb, out=tc))
        row("torch: c.zero_() (one small launch)", lambda: tc.zero_())
    except ImportError:
        pass
    print(f"{torch.cuda.get_device_name() if 'torch' in sys.modules else 'GPU'}; per call, median of {BATCHES} "
          f"batches of {BATCH}; the extra route's product {'correct' if extra_ok else 'WRONG'}")
    print("| route | us per call |\n| --- | ---: |")
    for name, us, note in rows:
        print(f"| {name} | {'-' if us is None else f'{us:.2f}'} | {note}" if note else f"| {name} | {us:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
