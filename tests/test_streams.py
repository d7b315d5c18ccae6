"""``stream=`` on every launcher, and the stream a launcher picks by itself.

In the simulator every launch runs in order on the CPU: ``stream=`` is checked and means nothing more. The rules
themselves (`_fastlaunch.resolve_stream`) and the fast path's ordering are tested on fake device memory. On a GPU:
torch work on a non-default stream and a launcher must not race, and a launcher captured in a torch CUDA graph must
replay right.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpukernels import LESSONS, _fastlaunch, matmul, softmax
from gpukernels._launch import LaunchError
from gpukernels.check import TOLERANCE, case, compare

from .conftest import GPU
from .test_launch_fast import FakeDev, fake  # noqa: F401  (fake: the fixture)


def test_stream_resolution():
    r = _fastlaunch.resolve_stream
    assert r(None, [None, None]) == (0, [])  # Numba arrays on no stream: the default stream
    assert r(None, [5, None]) == (5, [])  # the first array's stream
    assert r(None, [5, 9, 5]) == (5, [9])  # another array's stream: waited for, once
    assert r(3, [5, None]) == (3, [5])  # stream= wins, and waits for the arrays' stream
    assert r(0, [1]) == (0, [])  # 0 and 1 are both the legacy default stream
    assert r(2, [1]) == (2, [1])  # the per-thread default stream is another stream


def test_stream_handles():
    class TorchLike:
        cuda_stream = 0x1234

    class CupyLike:
        ptr = 0x5678

    class Protocol:
        def __cuda_stream__(self):
            return (0, 0x9ABC)

    h = _fastlaunch.stream_handle
    assert h(0) == 0 and h(77) == 77
    assert h(TorchLike()) == 0x1234 and h(CupyLike()) == 0x5678 and h(Protocol()) == 0x9ABC
    for bad in ("s", -1, True, 1.5, object()):
        with pytest.raises(LaunchError, match="stream"):
            h(bad)


def test_fast_path_orders_after_the_arrays_streams(fake):
    x = FakeDev((64, 64), stream=0x500)
    softmax.optimized(x, out=FakeDev((64, 64)))
    x, y = FakeDev((64, 64), stream=0x500), FakeDev((64, 64))
    softmax.optimized(x, out=y)
    assert fake.launched[-1][4] == 0x500 and fake.waits == []  # launched on x's stream: nothing to wait for
    softmax.optimized(x, out=y, stream=0x600)
    assert fake.launched[-1][4] == 0x600 and fake.waits == [(0x600, 0x500)]
    assert _fastlaunch.STATS["hit"] == 2


def test_workspace_entries_are_per_stream(fake):
    """A plan's workspace is the entry's; two streams must not share it (their launches could overlap)."""
    for s in (0x10, 0x10, 0x20, 0x20):
        softmax.split_row(FakeDev((4, 65536)), out=FakeDev((4, 65536)), stream=s)
    assert _fastlaunch.STATS == {"miss": 2, "hit": 2}


@pytest.mark.skipif(GPU, reason="the simulator's rule (on a GPU, 3 is no stream)")
@pytest.mark.parametrize("lesson", list(LESSONS))
def test_simulator_accepts_stream(lesson, seed):
    from numba import cuda

    mod = LESSONS[lesson]
    inputs = mod.make_inputs(mod.SHAPES["test"][0], seed)
    ref = mod.reference(*inputs)
    # Numba's built-in simulator (a Mac, no numba-cuda) has cuda.stream() but no cuda.default_stream()
    streams = [0, 3, cuda.stream()] + ([cuda.default_stream()] if hasattr(cuda, "default_stream") else [])
    for stream in streams:
        got = mod.optimized(*inputs, stream=stream)
        assert np.allclose(got, ref, rtol=1e-3, atol=1e-4, equal_nan=True)
    with pytest.raises(LaunchError, match="stream"):
        mod.optimized(*inputs, stream="fast")


# ----------------------------------------------------------------------------------------------------------
# On a GPU
# ----------------------------------------------------------------------------------------------------------

from gpukernels.overhead import SHAPES as OVERHEAD_SHAPES  # noqa: E402  (small work: every lesson has one)

BUSY = 4096  # a 4096^3 product keeps a stream busy for milliseconds: long enough to expose a race


def _torch():
    return pytest.importorskip("torch")


def _slow_copy(torch, src, busy):
    """``src`` again, produced on the current stream behind milliseconds of other work: a launch that does not wait
    for the current stream reads it before it is written."""
    dst = torch.empty_like(src)
    dst.fill_(float("nan"))
    torch.mm(busy, busy)  # milliseconds of work first
    dst.copy_(src)
    return dst


@pytest.mark.gpu
@pytest.mark.parametrize("lesson", list(LESSONS))
def test_torch_current_stream_is_used(lesson, seed):
    """Inputs produced by torch on a non-default stream, the launcher called there without stream=: it launches on
    torch's current stream, after the producer and before the consumer -- three calls (a miss, then hits)."""
    torch = _torch()
    mod = LESSONS[lesson]
    busy = torch.randn(BUSY, BUSY, device="cuda")
    side = torch.cuda.Stream()
    for name in ("optimized", list(mod.VERSIONS)[1]):
        for i in range(3):
            host, ref, tol = case(lesson, name, OVERHEAD_SHAPES[lesson], seed + i)  # as the version takes them
            t_in = [torch.from_numpy(x).cuda() for x in host]
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                produced = [_slow_copy(torch, x, busy) for x in t_in]
                out = torch.full(ref.shape, float("nan"), device="cuda")
                mod.VERSIONS[name](*produced, out=out)
                result = out.clone()  # the consumer, on the same stream
            torch.cuda.synchronize()
            check = compare(result.cpu().numpy(), ref, tol)
            assert check.ok, f"{lesson}.{name} call {i}: {check}"


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["torch stream", "int handle", "numba stream"])
def test_explicit_stream_waits_for_the_arrays_stream(how, seed):
    """stream= another stream than the one the inputs were produced on: the launch waits for the producer."""
    torch = _torch()
    from numba import cuda

    busy = torch.randn(BUSY, BUSY, device="cuda")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    nb = cuda.external_stream(consumer.cuda_stream)
    stream = {"torch stream": consumer, "int handle": consumer.cuda_stream, "numba stream": nb}[how]
    for i in range(3):
        (x,) = softmax.make_inputs((64, 1024), seed + i)
        t = torch.from_numpy(x).cuda()
        out = torch.full(x.shape, float("nan"), device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(producer):
            produced = _slow_copy(torch, t, busy)
            softmax.optimized(produced, out=out, stream=stream)
        consumer.synchronize()  # only the launch stream: the result must be there
        assert compare(out.cpu().numpy(), softmax.reference(x), TOLERANCE["softmax"]).ok, (how, i)
        torch.cuda.synchronize()


@pytest.mark.gpu
def test_numba_array_bound_to_a_stream(seed):
    from numba import cuda

    s = cuda.stream()
    (x,) = softmax.make_inputs((64, 1024), seed)
    for _ in range(3):
        d = cuda.to_device(x, stream=s)  # d.stream is s: the launch goes there
        out = cuda.device_array(x.shape, np.float32, stream=s)
        softmax.optimized(d, out=out)
        got = out.copy_to_host(stream=s)
        s.synchronize()
        assert compare(got, softmax.reference(x), TOLERANCE["softmax"]).ok


@pytest.mark.gpu
def test_cupy_current_stream(seed):
    cupy = pytest.importorskip("cupy")
    (x,) = softmax.make_inputs((64, 1024), seed)
    with cupy.cuda.Stream(non_blocking=True) as s:
        for _ in range(3):
            big = cupy.random.rand(BUSY, BUSY, dtype=cupy.float32)
            big @ big  # keep the stream busy
            d = cupy.asarray(x)
            out = cupy.full(x.shape, cupy.nan, dtype=cupy.float32)
            softmax.optimized(d, out=out)  # CuPy's interface names s: the launch goes there
            result = out.copy()
        s.synchronize()
    assert compare(cupy.asnumpy(result), softmax.reference(x), TOLERANCE["softmax"]).ok


def _graph_replays_right(torch, version, make, shape, capture_stream, seed):
    host = make(shape, seed)
    ref_fn = LESSONS[version.lesson].reference
    t_in = [torch.from_numpy(x).cuda() for x in host]
    out = torch.empty(ref_fn(*host).shape, device="cuda")
    capture_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture_stream):  # warm-up: compile, record, replay once
        for _ in range(3):
            version(*t_in, out=out)
    torch.cuda.current_stream().wait_stream(capture_stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture_stream):
        version(*t_in, out=out)
    for i in range(3):  # new values in the same memory, then a replay
        new = make(shape, seed + 1 + i)
        for t, x in zip(t_in, new):
            t.copy_(torch.from_numpy(x))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check = compare(out.cpu().numpy(), ref_fn(*new), TOLERANCE[version.lesson])
        assert check.ok, f"{version.lesson}.{version.name} replay {i}: {check}"


@pytest.mark.gpu
def test_softmax_optimized_in_a_cuda_graph(seed):
    torch = _torch()
    _graph_replays_right(torch, softmax.optimized, softmax.make_inputs, (64, 1024), torch.cuda.Stream(), seed)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["softmax split_row (a workspace)", "matmul split-K (two kernels)",
                                  "cbr optimized"])
def test_multi_kernel_plans_in_a_cuda_graph(case, seed):
    """A plan with a workspace is recorded per stream: warmed up on the stream it is captured on, the capture
    replays it (allocating during a capture is not allowed)."""
    torch = _torch()
    lesson, name = case.split()[:2]
    version = LESSONS[lesson].VERSIONS["split_row" if name == "split_row" else
                                        "split_k" if name == "split-K" else "optimized"]
    shape = {"softmax": (4, 65536), "matmul": (256, 256, 4096), "cbr": (1, 16, 16, 16, 16, 3, 3)}[lesson]
    _graph_replays_right(torch, version, LESSONS[lesson].make_inputs, shape, torch.cuda.Stream(), seed)
