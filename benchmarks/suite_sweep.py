"""Experiments behind the dispatchers (issue 16, benchmarks/NOTES.md): time candidate configurations of matmul and
CBR on the suite's hardest shapes, each checked on a NaN-poisoned output against a float64 reference first, the
library peer in the same run (`gpukernels.bench.bench_shape`: CUDA-graph replays, inputs rotated past L2).

    GPUKERNELS_DEVICE=gpu python benchmarks/suite_sweep.py [matmul] [cbr] [attention] [tensor_core] [--json out.json]
        [--shapes M,N,K ...] [--squares | --fixup | --async | --spread | --scalar | --chains | --fixed | --few]

(``--squares``: every tile of the matmul dispatcher's estimate, whole and in 2 to 128 slices of K, on the shapes;
``--fixup``: each tile that splits, in 2 to 8 slices met by atomics and through a workspace; ``--async``: the tiles
copied by cp.async, whole and split through a workspace, beside the register path's, on rows 16-byte aligned;
``--spread``: the 128 x 128 tile under stream-K spread over every SM, against the dispatcher's pick without it;
``--scalar``: each tile whole, split, and spread, with 16-byte or 4-byte loads as the shape's rows allow
-- run on pairs of shapes of the same work, aligned and not;
``attention``: float32 ``tf32x3`` with its operands split in registers instead of by a pass, or with ``--chains`` its
mma chains interleaved, or with ``--fixed`` alone over several Sk (a block's fixed work) and in blocks of 4 warps,
or with ``--few`` in blocks of 4 warps with Q split as read (few keys), at --shapes B,H,Sq,Sk,D, causal and not;
``tensor_core``: every plan the dispatcher's rules could make (`tensor_core_candidates`), on the suite's shapes or
--shapes M,N,K.)

The dispatchers' constants (``matmul.k21_optimized.TILES``, ``cbr.CBR_*``) are fitted to what this prints.
"""

from __future__ import annotations

import json
import os
import sys

from gpukernels import attention, bench, cbr, matmul
from gpukernels import tensor_core as tc
from gpukernels._launch import Version, ceil_div
from gpukernels.matmul import _common
from gpukernels.matmul.k16_skinny import skinny_launches, skinny_splits


def matmul_candidates(shape):
    from gpukernels.matmul import k18_narrow as nt
    from gpukernels.matmul.k17_split_k import small_split_vec_kernel, split_vec_kernel

    m, n, k = shape
    out = [("optimized", matmul.optimized.plan)]

    def tiles(kernel, label, splits):
        for s in splits:
            if k // s >= 64:
                out.append((f"{label} x{s}", lambda a, b, c, kernel=kernel, s=s: _common.tiled_launch(kernel, c, (a, b, c), s)))

    if m <= 64:
        for rows in (16, 32):
            if rows <= 2 * m or m <= 16:
                for f in (0.5, 1, 2):
                    splits = max(1, int(f * skinny_splits(m, n, k, rows=rows)))
                    out.append((f"skinny_shared rows{rows} x{splits}", lambda a, b, c, rows=rows, s=splits:
                                skinny_launches(a, b, c, rows=rows, shared=True, splits=s)))
        tiles(nt.rows_vec_kernel, "64x256", (1, 2, 4, 8))
    if n <= 64:
        tiles(nt.cols_vec_kernel, "256x32", (1, 2, 4, 8, 16))
        tiles(nt.cols_small_vec_kernel, "128x32", (2, 4, 8, 16, 32))
    if (m, n, k) == (4096, 4096, 4096) and os.path.exists(os.path.join(os.path.dirname(__file__), "_interior_noclamp.py")):
        # one-off: the factory before edge clamping (the previous commit's), to see whether clamping cost 4096^3
        sys.path.insert(0, os.path.dirname(__file__))
        import _interior_noclamp
        from gpukernels.matmul.k15_thread_16x8 import wide_vec_kernel

        old = _interior_noclamp.make_interior_kernel(256, 128, bk=8, group=8, rows=16, vec=True)
        out.append(("256x128 clamped (now)", lambda a, b, c: _common.tiled_launch(wide_vec_kernel, c, (a, b, c))))
        out.append(("256x128 guarded (before)", lambda a, b, c: _common.tiled_launch(old, c, (a, b, c))))
    if k <= 256 and m * n >= 4096 * 4096:  # small K: which tile hides the prologue and the stores best
        from gpukernels.matmul.k14_vector_loads import small_vec_kernel, vec_kernel
        from gpukernels.matmul.k15_thread_16x8 import wide_vec_kernel

        for kernel, label in ((wide_vec_kernel, "256x128"), (vec_kernel, "128x128"), (small_vec_kernel, "64x64")):
            out.append((label, lambda a, b, c, kernel=kernel: _common.tiled_launch(kernel, c, (a, b, c))))
    if "--scalar" in sys.argv and m > 64 and n > 64:
        # what 4-byte loads cost each of the dispatcher's tiles: run on pairs of shapes of the same work, one with
        # rows 16-byte aligned and one without, each tile whole, in 2 slices by atomics and in 2 and 3 through a
        # workspace (the kernel `Tile.workspace_kernel` takes: for aligned rows the cp.async ring where the tile has
        # one), and the spread schedule, with 16-byte or 4-byte loads as the shape allows (the rows
        # ``Tile.scalar_cost`` is fitted to)
        from gpukernels.matmul import k21_optimized as opt
        from gpukernels.matmul.k19_stream_k import stream_k_launches

        side = 0 if k % 4 == 0 and n % 4 == 0 else 1
        for t in opt.TILES:
            out.append((f"{t.name} x1", lambda a, b, c, kernel=t.kernels[side]:
                        _common.tiled_launch(kernel, c, (a, b, c))))
            if t.split_kernels is not None:
                out.append((f"{t.name} x2", lambda a, b, c, kernel=t.split_kernels[side]:
                            _common.tiled_launch(kernel, c, (a, b, c), 2)))
                for s in (2, 3):
                    out.append((f"{t.name} fix x{s}", lambda a, b, c, kernel=t.workspace_kernel(side == 0), s=s:
                                _common.fixup_launch(kernel, c, (a, b, c), s)))
        out.append(("128x128 spread", lambda a, b, c, kernel=opt.SPREAD_TILE.kernels[side]:
                    stream_k_launches(kernel, a, b, c)))
        return out
    if "--spread" in sys.argv and m > 64 and n > 64:
        # the 128 x 128 tile under stream-K's schedule spread over every SM (one block per SM, and two), against
        # what the dispatcher picks without it and the tile whole: the rows the spread candidate's estimate is fitted to
        from gpukernels.matmul import k21_optimized as opt
        from gpukernels.matmul.k19_stream_k import stream_k_launches

        aligned = k % 4 == 0 and n % 4 == 0
        kernel = opt.SPREAD_TILE.kernels[0 if aligned else 1]

        def without(a, b, c):
            saved = opt.SPREAD_WAVES, opt.SPREAD_WAVES_SCALAR
            opt.SPREAD_WAVES = opt.SPREAD_WAVES_SCALAR = (0, 0)
            try:
                return opt.optimized.plan(a, b, c)
            finally:
                opt.SPREAD_WAVES, opt.SPREAD_WAVES_SCALAR = saved

        out.append(("without spread", without))
        for per in (1, 2):
            out.append((f"128x128 spread {per}/SM", lambda a, b, c, per=per: stream_k_launches(
                kernel, a, b, c, sms=per * _common.sm_count())))
        whole = opt.TILES[1].kernels[0 if aligned else 1]
        out.append(("128x128 x1", lambda a, b, c: _common.tiled_launch(whole, c, (a, b, c))))
        return out
    if "--async" in sys.argv and m > 64 and n > 64 and k % 4 == 0 and n % 4 == 0:
        # the dispatcher's tiles copied by cp.async (async_copy's ring, 3 stages) instead of through registers, and
        # 128 x 128 capped at 128 registers so that two blocks share an SM (173 without the cap, 186 for the
        # register path; the register path under the same cap spills): whole, and split through a workspace
        from gpukernels.matmul._interior import fixup_twin
        from gpukernels.matmul.k21_optimized import SMALL_WARPS, TILES

        ring = [("128x128 async", dict(bm=128, bn=128, bk=8, group=8)),
                ("128x128 async lb2", dict(bm=128, bn=128, bk=8, group=8, launch_bounds=(256, 2))),
                ("64x64/128 async", dict(bm=64, bn=64, **SMALL_WARPS))]
        for label, kw in ring:
            whole = _async_kernel(**kw)
            out.append((f"{label} x1", lambda a, b, c, kernel=whole: _common.tiled_launch(kernel, c, (a, b, c))))
            fix = fixup_twin(_async_kernel(split_k=True, **{**kw, "group": 1}))
            for s in (2, 3, 4, 6):
                if k // s >= 64:
                    out.append((f"{label} fix x{s}", lambda a, b, c, kernel=fix, s=s:
                                _common.fixup_launch(kernel, c, (a, b, c), s)))
        for t in TILES:  # the register path, for the same run
            out.append((f"{t.name} x1", lambda a, b, c, kernel=t.kernels[0]:
                        _common.tiled_launch(kernel, c, (a, b, c))))
        return out
    if "--fixup" in sys.argv and m > 64 and n > 64:
        # split-K without the zero pass: the last slice of a tile to arrive sums the slices' partials from a
        # workspace (make_interior_kernel(fixup=True)) -- against the same tile and slices adding into C by atomics
        from gpukernels.matmul._interior import fixup_twin
        from gpukernels.matmul.k21_optimized import TILES

        aligned = k % 4 == 0 and n % 4 == 0
        for t in TILES:
            if t.split_kernels is None:
                continue
            atomic = t.split_kernels[0 if aligned else 1]
            fix = fixup_twin(atomic)
            for s in (2, 3, 4, 6, 8):
                if k // s >= 32:
                    out.append((f"{t.name} x{s}", lambda a, b, c, kernel=atomic, s=s:
                                _common.tiled_launch(kernel, c, (a, b, c), s)))
                    out.append((f"{t.name} fix x{s}", lambda a, b, c, kernel=fix, s=s:
                                _common.fixup_launch(kernel, c, (a, b, c), s)))
        return out
    if "--squares" in sys.argv and m > 64 and n > 64:
        # small squares: the dispatcher's own tiles (``TILES``), whole and in 2 to 16 slices of K (counts that are
        # not powers of two too), to fit the estimate's cost of a tile and of a split
        from gpukernels.matmul.k21_optimized import TILES

        aligned = k % 4 == 0 and n % 4 == 0
        for t in TILES:
            whole = t.kernels[0 if aligned else 1]
            out.append((f"{t.name} x1", lambda a, b, c, kernel=whole: _common.tiled_launch(kernel, c, (a, b, c))))
            if t.split_kernels is not None:
                split = t.split_kernels[0 if aligned else 1]
                for s in (2, 3, 4, 5, 6, 8, 12, 16, 32, 64, 128):
                    if k // s >= 32 and (s <= 16 or m * n <= 512 * 512):
                        out.append((f"{t.name} x{s}", lambda a, b, c, kernel=split, s=s:
                                    _common.tiled_launch(kernel, c, (a, b, c), s)))
        return out
    if m > 64 and n > 64 and m * n <= 1024 * 1024:
        # small squares: skinny's 16-row kernel (B read by one block per 16 rows of C) with many slices of K ran
        # 512^3 14% faster than the estimate's pick in one run (benchmarks/NOTES.md): is that a regime?
        for sp in (8, 16, 32, 64):
            if k // sp >= 16:
                out.append((f"skinny_shared rows16 x{sp}", lambda a, b, c, s=sp:
                            skinny_launches(a, b, c, rows=16, shared=True, splits=s)))
        tiles(split_vec_kernel, "128x128 split", (1, 2, 4, 8, 16, 32, 64))
        tiles(small_split_vec_kernel, "64x64 split", (1, 2, 4, 8, 16, 32, 64))
    if "--tiles3" in sys.argv and m > 64 and n > 64:
        # third session: tiles between 64 x 64 and 128 x 128 (128 threads), 16-deep 64 x 64, slices down to 32 deep
        # and past 64 of them, for the squares and large K the estimate model left at 0.67-0.78x
        aligned = k % 4 == 0 and n % 4 == 0
        extra = [((128, 64, 8), "128x64"), ((64, 128, 8), "64x128"), ((64, 64, 16), "64x64x16"),
                 ((64, 64, 8), "64x64")]
        for (bm, bn, bk), label in extra:
            kern = _extra_kernel(bm, bn, bk, aligned)
            splits = [s for s in (1, 2, 3, 4, 6, 8, 16, 32, 64, 128, 256) if k // s >= 32 and
                      ceil_div(m, bm) * ceil_div(n, bn) * s <= 8 * 132 * 4]
            for s in splits:
                out.append((f"{label} x{s}", lambda a, b, c, kern=kern, s=s: _common.tiled_launch(kern, c, (a, b, c), s)))
        if m * n >= 1500 * 1500:
            from gpukernels.matmul.k15_thread_16x8 import wide_kernel, wide_vec_kernel

            for g in (4, 16):
                kern = _extra_kernel(256, 128, 8, aligned, rows=16, group=g, split=False, clamp=not aligned)
                out.append((f"256x128 group{g}", lambda a, b, c, kern=kern: _common.tiled_launch(kern, c, (a, b, c))))
            out.append(("256x128 (now)", lambda a, b, c: _common.tiled_launch(wide_vec_kernel if aligned else wide_kernel, c, (a, b, c))))
    return out


_EXTRA = {}
OUT = None  # --json's file


def _async_kernel(bm, bn, **kw):
    from gpukernels.matmul._interior import make_interior_kernel

    key = (bm, bn, tuple(sorted(kw.items())))
    if key not in _EXTRA:
        _EXTRA[key] = make_interior_kernel(bm, bn, vec=True, stages=3, **kw)
    return _EXTRA[key]


def _extra_kernel(bm, bn, bk, vec, rows=8, group=1, split=True, clamp=True):
    from gpukernels.matmul._interior import make_interior_kernel

    key = (bm, bn, bk, vec, rows, group, split, clamp)
    if key not in _EXTRA:
        _EXTRA[key] = make_interior_kernel(bm, bn, bk=bk, vec=vec, rows=rows, group=group, split_k=split, clamp=clamp)
    return _EXTRA[key]


MATMUL_SHAPES = [(16, 8192, 8192), (64, 8192, 8192), (8192, 32, 4096), (1000, 1000, 1000), (768, 768, 768),
                 (256, 256, 256), (1536, 1536, 1536), (128, 128, 32768), (4096, 4096, 64)]


def cbr_candidates(shape):
    n, c, h, wd, k, r, s = shape
    out = [("optimized", cbr.optimized.plan)]
    for bn in cbr.IG_BNS:
        tiles = ceil_div(n * h * wd, bn) * ceil_div(k, cbr.IG_BM)
        sp = 1
        while sp <= min(cbr.SPLIT_C_MAX, c):
            if tiles * sp <= 8 * 132 or sp == 1:
                out.append((f"bn{bn} x{sp}", lambda x, w, b, y, padding=1, bn=bn, sp=sp: cbr.igemm_launches(
                    x, w, b, y, padding, bn=bn, min_blocks=cbr.IG_MIN_BLOCKS if bn == 256 else None, splits=sp)))
            sp *= 2
    return out


def softmax_candidates(shape):
    from dataclasses import replace

    from gpukernels import softmax
    from gpukernels._launch import Launch

    m, n = shape
    base = softmax.with_vector_access(softmax.optimized_config(n), n, True)
    out = [("optimized", softmax.optimized.plan)]
    cfgs = {"scalar (before)": replace(base, vec=False)}
    for lanes in (1, 2, 4, 8, 16, 32):
        for wpb in (4, 8):
            elems = softmax._pow2(-(-n // lanes))
            if lanes * elems >= n and elems % 4 == 0 and elems <= 32:
                cfgs[f"vec lanes{lanes} x{elems} wpb{wpb}"] = replace(base, threads=lanes, elems=elems,
                                                                       warps_per_block=wpb, vec=True)
    for name, cfg in cfgs.items():
        out.append((name, lambda x, y, cfg=cfg: [Launch(softmax.optimized_kernel(cfg),
                                                        (-(-x.shape[0] // cfg.rows_per_block),), cfg.block, (x, y))]))
    return out


def attention_candidates(shape):
    """float32 ``tf32x3`` with the operands named stored as they are and split in registers as each fragment is
    read (``on_read``), against the split pass (K/V tiles of 32 keys)."""
    from gpukernels.attention.k06_tf32x3 import tf32x3_launches

    out = [("optimized", attention.optimized.plan)]
    if "--fixed" in sys.argv:
        # tf32x3 alone: its time against the number of K/V tiles (Sk) gives a block's fixed work; and in blocks of 4
        # warps, with tiles of 16 keys or Q split as read (at D = 128, 102 KB: two blocks per SM, one's prologue
        # beside the other's loop, and one's idle warps on a causal diagonal beside the other's); and with the split
        # pass run twice (the difference is what the split pass costs)
        def twice(q, k, v, o, causal=False, scale=None):
            launches = tf32x3_launches(q, k, v, o, causal, scale)
            return launches[:-1] + launches

        return [(f"tf32x3{label}", lambda q, k, v, o, causal=False, scale=None, kw=kw:
                 tf32x3_launches(q, k, v, o, causal, scale, **kw))
                for label, kw in (("", {}), (" warps=4", {"warps": 4}), (" warps=4 keys=16", {"warps": 4, "keys": 16}),
                                  (" warps=4 on_read=q", {"warps": 4, "on_read": "q"}))] + [("tf32x3 split x2", twice)]
    if "--few" in sys.argv:  # few keys at D > 96: two 4-warp blocks per SM (Q split as read, 102 KB at D = 128),
        # one's prologue beside the other's loop, against one 8-warp block
        return [("tf32x3", lambda q, k, v, o, causal=False, scale=None:
                 tf32x3_launches(q, k, v, o, causal, scale)),
                ("tf32x3 warps=4 on_read=q", lambda q, k, v, o, causal=False, scale=None:
                 tf32x3_launches(q, k, v, o, causal, scale, warps=4, on_read="q"))]
    if "--chains" in sys.argv:  # the 3-mma chains of n-tiles issued 4 in turn (optimized) or one after another
        return out + [("tf32x3 chains=1", lambda q, k, v, o, causal=False, scale=None:
                       tf32x3_launches(q, k, v, o, causal, scale, chains=1))]
    for on_read in ("", "q", "k", "v", "kv", "qkv") if shape[-1] > 64 else ("", "kv", "qkv"):
        out.append((f"tf32x3 on_read={on_read or '-'}", lambda q, k, v, o, causal=False, scale=None, r=on_read:
                    tf32x3_launches(q, k, v, o, causal, scale, on_read=r)))
    return out


_TC_SPLIT = {}


def _tc_split_kernel(bm, bn, wm, wn):
    """Step 4's split-K kernel on other tiles (made once per tile: a kernel compiles on its first launch)."""
    from gpukernels.tensor_core.k04_pipelined import make_pipelined_kernel

    key = (bm, bn, wm, wn)
    if key not in _TC_SPLIT:
        _TC_SPLIT[key] = make_pipelined_kernel(bm, bn, wm, wn, split=True)
    return _TC_SPLIT[key]


def _tc_split(kernel, a, b, c, slices):
    from gpukernels._launch import Launch
    from gpukernels.tensor_core._common import zero_launch

    (m, n), (bm, bn) = c.shape, kernel.tile
    grid = (ceil_div(n, bn), ceil_div(m, bm), slices)
    return [zero_launch(c), Launch(kernel, grid, (kernel.threads,), (a, b, c))]


def tensor_core_candidates(shape):
    """Every plan the tensor-core dispatcher could make for (M, N, K): each of its rules' steps and configurations
    forced (``k12_optimized.plan``), and the one-launch steps a small product might want (step 1, and steps 4 and 6
    without the padding copies), beside ``optimized``'s own pick."""
    from gpukernels._launch import Choice
    from gpukernels.tensor_core import k12_optimized as opt

    m, n, k = shape
    aligned = k % 8 == 0 and n % 8 == 0
    padded = not aligned
    choices = [("persistent 128x256", Choice("persistent", {"padded": padded}, "")),
               ("wgmma 128x256", Choice("wgmma", {"tile": "128x256", "padded": padded}, "")),
               ("wgmma 64x128", Choice("wgmma", {"tile": "64x128", "padded": padded}, "")),
               ("wgmma 64x64", Choice("wgmma", {"tile": "64x64", "padded": padded}, "")),
               ("block_tiles 128x128", Choice("block_tiles", {}, "")),
               ("pipelined 64x64", Choice("pipelined", {}, ""))]
    for bn in (128, 256):
        for s in (2, 4, 8, 16):
            if k // s >= 512:
                choices.append((f"wgmma 128x{bn} x{s}", Choice("wgmma", {"tile": f"128x{bn}", "split_k": s,
                                                                         "padded": padded}, "")))
    if aligned:
        for s in (2, 3, 4, 6, 8, 16):
            if k // s >= 256:
                choices.append((f"pipelined 64x64 x{s}", Choice("pipelined", {"split_k": s}, "")))
    out = [("optimized", tc.optimized.plan)]
    out += [(label, lambda a, b, c, ch=ch: opt.plan(ch, a, b, c)) for label, ch in choices]
    if aligned and m <= 32:  # decoding: tiles of 32 rows waste half what the 64-row tiles do on a few tokens
        for bm, bn, wm, wn in ((32, 128, 2, 2), (32, 64, 2, 1)):
            kernel = _tc_split_kernel(bm, bn, wm, wn)
            for s in (2, 4, 8):
                if k // s >= 256:
                    out.append((f"pipelined {bm}x{bn} x{s}", lambda a, b, c, kernel=kernel, s=s: _tc_split(
                        kernel, a, b, c, s)))
    if m * n * k <= 2**27:  # small: one launch of the first step (plain loads, no padding)
        out.append(("mma_global", tc.mma_global.plan))
    return out


def sweep(lesson, shapes, candidates, timer, torch, rows, params=None):
    mod = bench.LESSONS[lesson]
    saved = mod.VERSIONS
    check = next(iter(saved.values())).check
    try:
        for shape in shapes:
            mod.VERSIONS = {name: Version(name, lesson, plan, check) for name, plan in candidates(shape)}
            for r in bench.bench_shape(lesson, shape, timer, torch, None, print, budget_ms=150.0, params=params):
                rows.append({"lesson": lesson, "shape": list(shape), "name": r.name, "kind": r.kind,
                             "ms": r.median_ms, "ok": r.ok, **(params or {})})
            if OUT:  # after every shape: a run cut short keeps what it measured
                json.dump(rows, open(OUT, "w"), indent=1)
    finally:
        mod.VERSIONS = saved


def main(argv):
    global MATMUL_SHAPES
    if "--shapes" in argv:  # e.g. --shapes 4096,4096,64 8192,8192,128
        i = argv.index("--shapes")
        texts = [a for a in argv[i + 1:] if "," in a]
        MATMUL_SHAPES = [tuple(int(v) for v in t.split(",")) for t in texts]
        argv = argv[:i] + argv[i + 1 + len(texts):]
    import torch

    bench._configure_torch(torch)
    timer = bench.Timer(torch)
    global OUT
    out = OUT = argv[argv.index("--json") + 1] if "--json" in argv else None
    lessons = [a for a in argv if a in ("matmul", "cbr", "softmax", "attention", "tensor_core")] or ["softmax", "cbr",
                                                                                                  "matmul"]
    rows = []
    for lesson in lessons:
        if lesson == "softmax":
            sweep("softmax", [(2**20, 16), (65536, 128), (262144, 32)], softmax_candidates, timer, torch, rows)
        elif lesson == "attention":  # float32, --shapes B,H,Sq,Sk,D; each causal and not
            for causal in (False, True):  # --few: causal only where Sq = Sk (else the mask hides little)
                shapes = [s for s in MATMUL_SHAPES if not causal or "--few" not in argv or s[2] == s[3]]
                sweep("attention", shapes, attention_candidates, timer, torch, rows, {"causal": causal})
        elif lesson == "matmul":
            sweep("matmul", MATMUL_SHAPES, matmul_candidates, timer, torch, rows)
        elif lesson == "tensor_core":  # the suite's shapes unless --shapes
            shapes = [s for s in MATMUL_SHAPES] if "--shapes" in sys.argv else [s for _, s in bench.suite_shapes(
                "tensor_core")]
            sweep("tensor_core", shapes, tensor_core_candidates, timer, torch, rows)
        else:
            shapes = [tuple(s) for group in cbr.SHAPES["suite"].values() for s in group]
            sweep("cbr", shapes, cbr_candidates, timer, torch, rows)
        if out:
            json.dump(rows, open(out, "w"), indent=1)
    # per shape: the peer and the best candidate
    for key in dict.fromkeys((r["lesson"], tuple(r["shape"]), r.get("causal", False)) for r in rows):
        rs = [r for r in rows if (r["lesson"], tuple(r["shape"]), r.get("causal", False)) == key]
        peer = next((r["ms"] for r in rs if r["kind"] == "peer"), float("nan"))
        best = min((r for r in rs if r["kind"] != "peer" and r["ok"]), key=lambda r: r["ms"], default=None)
        opt = next((r["ms"] for r in rs if r["name"] == "optimized"), float("nan"))
        if best:
            print(f"{key}: peer {peer:.4f}  optimized {opt:.4f} ({peer / opt:.2f})  best {best['name']} "
                  f"{best['ms']:.4f} ({peer / best['ms']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
