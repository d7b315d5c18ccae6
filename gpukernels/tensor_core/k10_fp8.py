"""Step 10 of the tensor-core ladder, ``fp8``: 8-bit floating-point inputs (e4m3) with per-tensor scales, float32
accumulation, on step 8's warp-specialized wgmma kernel.

**Why FP8.** Hopper's tensor cores multiply 8-bit floats at twice their 16-bit rate (~1980 against ~990 TFLOP/s
dense on an H100 SXM or H200): ``wgmma ... m64nNk32 ... e4m3.e4m3`` takes 32 of K per instruction where float16
takes 16, from the same 32 bytes of each row. Half the bytes per value also halves the traffic of A and B. What
it costs is precision, and which precision is the first choice (`gpukernels._fp8`):

* **e4m3** (4 exponent bits, 3 mantissa bits): +-448, values 12.5% apart, so each rounds with at most 6.25% error
  -- the format for the values a layer computes with (weights, activations): what this step uses for A and B;
* **e5m2** (5 and 2): +-57344 at 25% steps -- float16 with its low byte cut off: the wider range gradients need.

**Per-tensor scales.** e4m3 holds only 2^-9 .. 448: float16 inputs of any other range would overflow or vanish
into zeros. So each tensor gets a scale, ``scale = amax / 448`` (amax: its largest magnitude), and is stored as
``Aq = e4m3(A / scale_a)`` -- its largest value lands on 448, the top of the format, and the rest use as much of
the 8 bits as the largest allows. The product is C = scale_a scale_b (Aq Bq): the scales factor out of the sums,
so they are applied once, in the epilogue, to the float32 accumulators. One scale per tensor is the simplest
scheme; an outlier (make_inputs' are 100x) pushes every other value down towards the subnormals, where fewer bits
remain -- which is why DeepGEMM and MX formats scale blocks of 128 or 32 values instead.

**K-major only.** The PTX ISA gives wgmma's transpose flags to 16-bit types only: an FP8 operand is read from
shared memory K-major, each 128-byte swizzled row 128 values of K. A is (M, K), K-major as it is; B (K, N) is
*N-major* and cannot be read so (step 6 read float16 B with ``trans-b``). The quantize pass therefore writes B
transposed, ``Bq^T`` (N x K): then B's tiles are boxes of 128 rows x 128 bytes exactly like A's (one TMA copy each,
where step 8 needed four 64-column atoms of B), and ``torch._scaled_mm`` wants its second operand in this layout
too. The quantized arrays are ours to lay out: their rows are padded with zero codes to a multiple of 16 bytes, the
tensor maps' rule, so every M, N, K works.

**Promotion.** Hopper's FP8 wgmma does not accumulate in full float32: DeepSeek-V3's report measured about 14
bits kept (an H800; relative error near 2% summing K = 4096 in one chain), and the simulator models that
(`gpukernels.sim._fp8.FP8_ACC_BITS`). So, as DeepGEMM does, each k tile's four wgmmas (128 of K) are summed *from
zero* into a partial accumulator (``scale-d`` 0 on the first), and the partial is added to the running sum by 64
float32 adds per thread outside the tensor cores (``wgmma_add``): the tensor cores' short sums never grow past one
k tile, and the long sum runs in float32 with round-to-nearest. Two sets of 64 accumulators per thread (running sum
and partial) are why the tile of C is 128 x 128, not step 8's 128 x 256; each tile's partial is waited for
(``wgmma_wait(0)``) before it is added, and the other consumer warpgroup keeps the tensor cores busy meanwhile.

**The launches** (`fp8`): ``amax_kernel`` (each block the largest |x| of its rows of A, and of B), ``scales_kernel``
(one block: both scales), ``quantize_rows_kernel`` (A -> Aq, M x Kp codes) and ``quantize_cols_kernel`` (B -> Bq^T,
N x Kp, transposed through a shared tile), then the GEMM, ``fp8_kernel``: step 8's roles -- a producer warpgroup
whose one thread issues a stage's two TMA copies (A's box and Bq^T's, 32 KB), two consumer warpgroups issuing
``wgmma_e4m3_n128``, a full and an empty mbarrier per stage of a 6-stage ring, ``setmaxnreg`` 40 / 232 -- on 128 x
128 tiles of C with k tiles of 128 bytes. ``fp8_gemm(aq, bq_t, scale_a, scale_b)`` is the GEMM alone on inputs
quantized beforehand (`quantize` makes them), the operation ``torch._scaled_mm`` computes: what
``benchmarks/fp8_peer.py`` times against it.

**Its check.** The result is compared with float64 of the *dequantized* inputs, (Aq scale_a) @ (Bq scale_b)
(`reference`; the quantization replayed exactly in NumPy by `quantize_reference`): what the kernel is asked to
compute. TOLERANCE = 5e-3. In the simulator's model the tensor cores' 14-bit sums cut each product and partial of a
128-deep k tile to 2^-13 of the sum's largest addend; the float32 promotion and the epilogue's scaling add ~1e-7. The
model's relative error at the test shapes (2026-12-07, 5 seeds each, make_inputs' outliers included): 5e-5 .. 3.3e-4,
and 5.6e-4 for all-positive inputs at K = 1024, whose cuts all lean one way: 5e-3 is ten times that, room for a GPU
whose adder is a little shorter than the model's. An element the kernel never wrote, a wrong tile or a wrong swizzle
lands at O(1) (tests/test_fp8.py plants the last), and one chain of wgmmas without promotion at 1.5e-2 (all-positive,
K = 1024) to 7.5e-2 (K = 4096) in the same model. Against float64 of the *float16* inputs the error is the
quantization's: 1.3% .. 5.2% relative at the same shapes, 3.6% .. 3.9% once K is past a few hundred -- each e4m3
value rounded by up to 6.25%, about 2.5% RMS, in both factors, the errors of a sum's terms independent. FP8
is for what tolerates that: a network's matmuls, not a linear solve.

Checked in the simulator (against float64 of the dequantized inputs at odd shapes, several times round the ring, and
its conversions against the OCP rules for every code) and compiled for sm_90a (its PTX holds the cvt and the e4m3
wgmma; nvJitLink reports no spills); on an H100 its tests pass (every float16 value through the conversion kernel
against the OCP rules, the quantized bytes equal to NumPy's, the GEMM against float64 of the FP8 inputs).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, types

from .._fp8 import E4M3_MAX, decode_e4m3, encode_e4m3, pack_e4m3x2, wgmma_e4m3_n128, wgmma_scale
from .._intrinsics import address
from .._launch import Launch, LaunchError, ceil_div, compute_capability, is_device_array, version
from .._mma import align1024, wgmma_add, wgmma_commit, wgmma_fence, wgmma_store, wgmma_wait, wgmma_zero
from .._tma import (TENSOR_MAPS, TensorMap, fence_mbarrier_init, fence_proxy_tensormap_acquire,
                    mbarrier_arrive_expect_tx, setmaxnreg_dec, setmaxnreg_inc, tma_load_2d)
from ._common import check, check_matrix
from ._ring import release, ring_init, stage_of, wait_empty, wait_full
from .k06_wgmma import GROUP, grouped_tile
from .k08_warp_specialized import CONSUMER_REGS, PRODUCER_REGS

BM = BN = 128  # C per block: two consumer warpgroups of 64 x 128 (a running sum and a partial: 128 floats a thread)
BK = 128  # bytes (e4m3 values) of K per k tile: one 128-byte swizzled row -- the promotion interval
K32 = 32  # K per wgmma: a 32-byte slice of each row
STAGES = 6  # k tiles in the ring: 6 x 32 KB
TILE = BM * BK  # bytes of one operand's tile (A's 128 rows, or Bq^T's): 16 KB, one TMA box
STAGE = 2 * TILE
ROW_ALIGN = 16  # the quantized rows' length, in bytes, is a multiple of this: a tensor map's row stride must be
THREADS = 256  # the amax, scales and quantize kernels' blocks (quantize: 32 x 8)
AMAX_BLOCKS = 264  # at most: 2 per SM of an H100/H200
PER_THREAD = 32  # ... at least this many elements per thread of the amax kernel (fewer blocks for small inputs)
QTILE = 32  # the quantize kernels' tiles: 32 rows (or columns of B) x QK of K, two values per thread
QK = 2 * QTILE
PITCH = QTILE + 1  # the transposing tile's row: +1, so that the threads reading down a column hit different banks
TOLERANCE = 5e-3  # relative error against float64 of the dequantized inputs (the module docstring says why)


# ----------------------------------------------------------------------------------------------------------
# The reference: the quantization replayed in NumPy, and float64 of the dequantized inputs
# ----------------------------------------------------------------------------------------------------------

def padded_k(k: int) -> int:
    """K rounded up to whole 16-byte rows of codes (at least one)."""
    return max(ceil_div(k, ROW_ALIGN), 1) * ROW_ALIGN


def scale_of(x: np.ndarray) -> np.float32:
    """amax / 448 in float32, as ``scales_kernel`` computes it (1 for an all-zero tensor)."""
    amax = np.float32(np.max(np.abs(x.astype(np.float32)))) if x.size else np.float32(0)
    return np.float32(amax / np.float32(E4M3_MAX)) if amax > 0 else np.float32(1)


def quantize_reference(a: np.ndarray, b: np.ndarray) -> tuple:
    """(Aq (M, Kp), Bq^T (N, Kp), scale_a, scale_b) exactly as the quantize kernels make them: codes of
    e4m3(x / scale) (float32 division, round to nearest even, satfinite), K padded with zero codes to Kp."""
    a, b = np.asarray(a), np.asarray(b)
    (m, k), n = a.shape, b.shape[1]
    sa, sb = scale_of(a), scale_of(b)
    aq, bq_t = np.zeros((m, padded_k(k)), np.uint8), np.zeros((n, padded_k(k)), np.uint8)
    aq[:, :k] = encode_e4m3(a.astype(np.float32) / sa)
    bq_t[:, :k] = encode_e4m3(b.astype(np.float32).T / sb)
    return aq, bq_t, sa, sb


def dequantized_product(aq, bq_t, scale_a, scale_b) -> np.ndarray:
    """(Aq scale_a) @ (Bq scale_b) in float64: what `fp8_gemm` computes from these codes."""
    fa = decode_e4m3(np.asarray(aq)) * float(np.asarray(scale_a).reshape(-1)[0])
    fb = decode_e4m3(np.asarray(bq_t)) * float(np.asarray(scale_b).reshape(-1)[0])
    return fa @ fb.T


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What ``fp8`` is checked against: float64 of the dequantized FP8 inputs (M, N), ``quantize_reference``'s."""
    return dequantized_product(*quantize_reference(a, b))


# ----------------------------------------------------------------------------------------------------------
# Quantize: per-tensor amax -> scale = amax / 448 -> e4m3 codes (B transposed)
# ----------------------------------------------------------------------------------------------------------

@cuda.jit(device=True, forceinline=True)
def block_max(buf, tid, v):
    # The largest v over the block's THREADS threads, for every thread: a tree in shared memory (buf: THREADS floats)
    buf[tid] = v
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if tid < s:
            buf[tid] = max(buf[tid], buf[tid + s])
        cuda.syncthreads()
        s //= 2
    m = buf[0]
    cuda.syncthreads()  # everyone has read buf[0] before it is used again
    return m


@cuda.jit
def amax_kernel(a, b, partial):
    # partial[t, blockIdx.x] = the largest |x| of rows blockIdx.x, + gridDim.x, ... of x = A (t = 0) or B (t = 1)
    buf = cuda.shared.array(THREADS, float32)
    x = a if cuda.blockIdx.y == 0 else b
    tid = cuda.threadIdx.x
    m = float32(0)
    for r in range(cuda.blockIdx.x, x.shape[0], cuda.gridDim.x):
        for j in range(tid, x.shape[1], THREADS):  # consecutive threads on consecutive elements: coalesced
            m = max(m, abs(float32(x[r, j])))
    m = block_max(buf, tid, m)
    if tid == 0:
        partial[cuda.blockIdx.y, cuda.blockIdx.x] = m


@cuda.jit
def scales_kernel(partial, scales):
    # scales[t] = amax_t / 448: one block reduces each row of partial (an all-zero tensor gets 1, not 0)
    buf = cuda.shared.array(THREADS, float32)
    tid = cuda.threadIdx.x
    for t in range(2):
        m = float32(0)
        for j in range(tid, partial.shape[1], THREADS):
            m = max(m, partial[t, j])
        m = block_max(buf, tid, m)
        if tid == 0:
            scales[t] = m / float32(E4M3_MAX) if m > 0 else float32(1)


@cuda.jit(device=True, forceinline=True)
def scaled(x, i, j, s):
    # x[i, j] / s in float32, or 0 past the edge of x (the padding codes of Kp - K are zeros)
    if i < x.shape[0] and j < x.shape[1]:
        return float32(x[i, j]) / s
    return float32(0)


@cuda.jit
def quantize_rows_kernel(a, scales, aq):
    # aq (M, Kp) = e4m3(A / scale_a): a tile of 32 rows x 64 of K per block of 32 x 8 threads, two values (one
    # cvt.rn.satfinite.e4m3x2) per thread per row; consecutive threads write consecutive bytes
    s = scales[0]
    k = cuda.blockIdx.x * QK + 2 * cuda.threadIdx.x
    if k < aq.shape[1]:  # Kp is even: k + 1 is inside too
        for i in range(cuda.threadIdx.y, QTILE, 8):
            r = cuda.blockIdx.y * QTILE + i
            if r < aq.shape[0]:
                w = pack_e4m3x2(scaled(a, r, k, s), scaled(a, r, k + 1, s))
                aq[r, k] = w & 0xFF
                aq[r, k + 1] = w >> 8


@cuda.jit
def quantize_cols_kernel(b, scales, bq_t):
    # bq_t (N, Kp) = e4m3(B / scale_b)^T: 64 of K x 32 columns of B per block, read along B's rows into a shared tile
    # (coalesced), then written along bq_t's rows, two codes per thread (reading tile rows 2 tx and 2 tx + 1 of a
    # column: a 2-way bank conflict, the price of packing pairs)
    tile = cuda.shared.array((QK, PITCH), float32)
    s = scales[1]
    k0, n0 = cuda.blockIdx.x * QK, cuda.blockIdx.y * QTILE
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    for i in range(ty, QK, 8):
        tile[i, tx] = scaled(b, k0 + i, n0 + tx, s)
    cuda.syncthreads()
    k = k0 + 2 * tx
    if k < bq_t.shape[1]:
        for i in range(ty, QTILE, 8):
            n = n0 + i
            if n < bq_t.shape[0]:
                w = pack_e4m3x2(tile[2 * tx, i], tile[2 * tx + 1, i])
                bq_t[n, k] = w & 0xFF
                bq_t[n, k + 1] = w >> 8


def quantize_launches(a, b, like) -> tuple:
    """(aq, bq_t, scale_a, scale_b, launches): the arrays the quantize pass fills (on the device when ``like`` is a
    device array) and its four launches; scale_a and scale_b are one-element views of one array of two."""
    (m, k), n = a.shape, b.shape[1]
    kp = padded_k(k)
    alloc = cuda.device_array if is_device_array(like) else np.empty
    aq, bq_t = alloc((m, kp), np.uint8), alloc((n, kp), np.uint8)
    blocks = min(AMAX_BLOCKS, max(1, ceil_div(max(a.size, b.size), THREADS * PER_THREAD)))
    partial, scales = alloc((2, blocks), np.float32), alloc((2,), np.float32)
    launches = [Launch(amax_kernel, (blocks, 2), (THREADS,), (a, b, partial)),
                Launch(scales_kernel, (1,), (THREADS,), (partial, scales)),
                Launch(quantize_rows_kernel, (ceil_div(kp, QK), ceil_div(m, QTILE)), (QTILE, 8),
                       (a, scales, aq)),
                Launch(quantize_cols_kernel, (ceil_div(kp, QK), ceil_div(n, QTILE)), (QTILE, 8),
                       (b, scales, bq_t))]
    return aq, bq_t, scales[0:1], scales[1:2], launches


def quantize(a, b) -> tuple:
    """(aq, bq_t, scale_a, scale_b) for float16 A (M, K) and B (K, N), computed by the quantize kernels: device
    arrays for device inputs, NumPy arrays for NumPy ones -- `fp8_gemm`'s inputs."""
    (a, b), _, _ = check(a, b)
    on_device = is_device_array(a) or is_device_array(b)
    da, db = (x if is_device_array(x) else cuda.to_device(x) for x in (a, b))
    aq, bq_t, sa, sb, launches = quantize_launches(da, db, da)
    for launch in launches:
        launch()
    if on_device:
        return aq, bq_t, sa, sb
    return aq.copy_to_host(), bq_t.copy_to_host(), sa.copy_to_host(), sb.copy_to_host()


# ----------------------------------------------------------------------------------------------------------
# The GEMM: step 8's producer and consumers on e4m3 tiles, each k tile promoted to float32 registers
# ----------------------------------------------------------------------------------------------------------

@cuda.jit(device=True, forceinline=True)
def load_stage(smem, base, ta, tb, full, s, k0, row0, col0):
    # One thread: announce the stage's bytes on its full barrier, then ask the copy engine for A's box (rows row0..,
    # bytes k0.. of K) and Bq^T's (rows col0.., the same bytes of K): both K-major, each 128 rows x 128 bytes
    mbarrier_arrive_expect_tx(full, s, STAGE)
    tma_load_2d(smem, base, ta, row0, k0, full, s)
    tma_load_2d(smem, base + TILE, tb, col0, k0, full, s)


def make_fp8_kernel(stages: int = STAGES, promote: bool = True, group: int = GROUP):
    """The GEMM kernel: a 128 x 128 tile of C per block of a producer and two consumer warpgroups, ``stages`` k
    tiles of 128 bytes in the ring; ``promote``: each k tile's products summed from zero and added to float32
    registers (False: one chain of wgmmas into the accumulators, for the tests and benchmarks/fp8_peer.py)."""
    acc_n = BN // 2  # accumulators per thread
    threads = 384

    @cuda.jit(extensions=[TENSOR_MAPS], launch_bounds=(threads, 1))
    def fp8_kernel(aq, bq_t, scale_a, scale_b, c, ta, tb):
        smem = cuda.shared.array(0, types.uint8)  # dynamic: the launch gives its size
        full = cuda.shared.array(stages, types.uint64)  # an mbarrier per stage: its tiles have landed
        empty = cuda.shared.array(stages, types.uint64)  # ... and one: its consumers are done with it
        tid = cuda.threadIdx.x
        wg = tid >> 7  # the warpgroup: 0 the producer, 1 and 2 the consumers
        row, col = grouped_tile(group)
        row0, col0 = row * BM, col * BN
        base0 = align1024(smem)
        k_tiles = (aq.shape[1] + BK - 1) // BK
        if tid == 0:
            fence_proxy_tensormap_acquire(ta)  # the maps were written by the host: acquire them for the copy engine
            fence_proxy_tensormap_acquire(tb)
            ring_init(full, empty, stages, 8)  # full: the producer's arrival; empty: each consumer warp's
            fence_mbarrier_init()  # ... visible to the copy engine
        cuda.syncthreads()  # the barriers are initialised for every thread
        if wg == 0:  # the producer: one thread issues every copy, the others give their registers back and finish
            setmaxnreg_dec(PRODUCER_REGS)
            if tid == 0:
                for kt in range(k_tiles):
                    wait_empty(empty, kt, stages)  # the consumers released tile kt - stages's stage
                    s = stage_of(kt, stages)
                    load_stage(smem, base0 + s * STAGE, ta, tb, full, s, kt * BK, row0, col0)
        else:  # the consumers: 64 rows of the block's tile each
            setmaxnreg_inc(CONSUMER_REGS)
            acc = cuda.local.array(acc_n, float32)  # the running sum, in float32
            part = cuda.local.array(acc_n, float32)  # one k tile's products, summed by the tensor cores
            wgmma_zero(acc, BN)
            rows = (wg - 1) * 64
            releases = (tid & 31) == 0  # lane 0 of each warp arrives on the empty barriers (worked out once)
            for kt in range(k_tiles):
                wait_full(full, kt, stages)  # tile kt landed: phase kt // stages of its full barrier
                sa = base0 + stage_of(kt, stages) * STAGE + rows * BK
                sb = base0 + stage_of(kt, stages) * STAGE + TILE
                wgmma_fence()
                for s in range(BK // K32):
                    if promote:  # from zero on the tile's first slice (scale-d 0), then accumulating
                        wgmma_e4m3_n128(part, smem, sa + s * K32, smem, sb + s * K32, s)
                    else:
                        wgmma_e4m3_n128(acc, smem, sa + s * K32, smem, sb + s * K32, 1)
                wgmma_commit()
                wgmma_wait(0)  # the tile's products are done ...
                release(empty, kt, stages, releases)  # ... so its stage goes back to the producer
                if promote:
                    wgmma_add(acc, part, BN)  # promotion: the partial into the running sum, float32 adds
            wgmma_scale(acc, scale_a[0] * scale_b[0], BN)  # the epilogue: C = scale_a scale_b (Aq Bq)
            warp, lane = (tid >> 5) & 3, tid & 31
            r0 = row0 + rows + warp * 16 + (lane >> 2)
            c0 = col0 + 2 * (lane & 3)
            wgmma_store(c, acc, BN, r0, c0)  # acc[4 j + i] -> c[r0 + 8 (i // 2), c0 + 8 j + i % 2], inside C

    if not promote or stages != STAGES:  # (profiles tell them apart)
        fp8_kernel.__name__ = fp8_kernel.__qualname__ = f"fp8_{stages}{'' if promote else '_chained'}_kernel"
    fp8_kernel.tile = (BM, BN)
    fp8_kernel.threads = threads
    fp8_kernel.stages = stages
    fp8_kernel.promote = promote
    fp8_kernel.target = "sm_90a"  # wgmma and setmaxnreg are Hopper's architecture-specific instructions
    fp8_kernel.shared_bytes = stages * STAGE + 1024  # + up to 1 KB to reach a 1024-byte boundary
    return fp8_kernel


fp8_kernel = make_fp8_kernel()


def gemm_launch(kernel, aq, bq_t, scale_a, scale_b, c) -> Launch:
    """One block per 128 x 128 tile of C; the tensor maps of Aq (boxes of 128 rows x 128 bytes) and Bq^T (the
    same), both with the 128-byte swizzle."""
    m, n = c.shape
    maps = (TensorMap(aq, (BM, BK), swizzle=128), TensorMap(bq_t, (BN, BK), swizzle=128))
    return Launch(kernel, (ceil_div(n, BN), ceil_div(m, BM)), (kernel.threads,), (aq, bq_t, scale_a, scale_b, c)
                  + maps, kernel.shared_bytes)


def require_hopper(name: str) -> None:
    cc = compute_capability()
    if cc != (9, 0):
        raise LaunchError(f"tensor_core.{name} needs a Hopper GPU (compute capability 9.0, e.g. an H100 or H200: FP8 "
                          f"wgmma is sm_90a); this one is {cc[0]}.{cc[1]}. Use tensor_core.optimized, which picks a "
                          "step this GPU has")


@version("tensor_core", check, kernels=[amax_kernel, scales_kernel, quantize_rows_kernel, quantize_cols_kernel,
                                        fp8_kernel])
def fp8(a, b, c):
    """FP8 e4m3 inputs with per-tensor scales (amax / 448), B quantized transposed (FP8 wgmma reads K-major only),
    step 8's warp-specialized GEMM on e4m3 tiles with each k tile's products promoted to float32 registers."""
    require_hopper("fp8")
    aq, bq_t, scale_a, scale_b, launches = quantize_launches(a, b, c)
    return launches + [gemm_launch(fp8_kernel, aq, bq_t, scale_a, scale_b, c)]


# ----------------------------------------------------------------------------------------------------------
# The GEMM alone, on inputs quantized beforehand (torch._scaled_mm's operation)
# ----------------------------------------------------------------------------------------------------------

def _codes(name: str, x, axes: str):
    dtype = str(getattr(x, "dtype", "")).rsplit(".", 1)[-1]
    if dtype == "float8_e4m3fn":  # torch's e4m3: the same bytes
        import torch

        x = x.view(torch.uint8)
    elif dtype and dtype != "uint8":
        raise LaunchError(f"{name} must hold e4m3 codes as uint8, {axes}; got dtype {dtype}: quantize float16 A and B "
                          "first with tensor_core.k10_fp8.quantize(a, b)")
    x = check_matrix(name, x, axes, (np.uint8,), purpose=" (e4m3 codes)")
    if address(x) % 16:
        if is_device_array(x):
            raise LaunchError(f"{name} must start on a 16-byte boundary (a tensor map's rule); it starts at "
                              f"{address(x):#x}: pass a fresh allocation")
        x = np.copy(x)  # (a new allocation is aligned)
    return x


def _scale(name: str, s):
    if isinstance(s, (bool, np.bool_)):
        raise LaunchError(f"{name} must be a positive float32 number or a float32 array of one element; got {s!r}")
    if isinstance(s, (int, float, np.integer, np.floating)):
        return np.array([s], np.float32)
    x = check_matrix(name, s, "(1,) holding the scale", (np.float32,), ndim=1)
    if tuple(x.shape) != (1,):
        raise LaunchError(f"{name} must hold one element, shape (1,); got shape {tuple(x.shape)}")
    return x


def check_quantized(aq, bq_t, scale_a, scale_b):
    """``aq`` (M, Kp) and ``bq_t`` (N, Kp): uint8 arrays of e4m3 codes, A and B^T (K-major), their rows Kp bytes, a
    multiple of 16 (pad K with zero codes: `quantize` does); ``scale_a``, ``scale_b``: float32 numbers or arrays of
    one element. The result is C = scale_a scale_b (Aq Bq), (M, N) float32."""
    aq = _codes("aq", aq, "(M, K)")
    bq_t = _codes("bq_t", bq_t, "(N, K): B transposed, K-major")
    if aq.shape[1] != bq_t.shape[1]:
        raise LaunchError(f"aq and bq_t must both be K bytes wide: aq is (M, K) = {tuple(aq.shape)} and bq_t is "
                          f"(N, K) = {tuple(bq_t.shape)}, so K is {aq.shape[1]} for aq but {bq_t.shape[1]} for bq_t")
    if aq.shape[1] % ROW_ALIGN:
        raise LaunchError(f"aq and bq_t must have rows of a multiple of {ROW_ALIGN} bytes (a tensor map's row "
                          f"stride); K is {aq.shape[1]}: pad K with zero codes to {padded_k(aq.shape[1])} "
                          "(tensor_core.k10_fp8.quantize does)")
    return (aq, bq_t, _scale("scale_a", scale_a), _scale("scale_b", scale_b)), {}, (aq.shape[0], bq_t.shape[0])


@version("tensor_core", check_quantized, kernels=[fp8_kernel])
def fp8_gemm(aq, bq_t, scale_a, scale_b, c):
    """The FP8 GEMM alone: C = scale_a scale_b (Aq Bq) from e4m3 codes Aq (M, K) and Bq^T (N, K), quantized
    beforehand -- torch._scaled_mm's operation, timed against it by benchmarks/fp8_peer.py."""
    require_hopper("fp8_gemm")
    return [gemm_launch(fp8_kernel, aq, bq_t, scale_a, scale_b, c)]
