"""Figures of Hopper's data movement (the tensor-core lesson's steps 7-9), drawn from what the simulator did -- never
from a formula written here.

* ``tma_box``: one TMA copy of a box of a small float16 matrix into shared memory with the 128-byte swizzle, run on
  the simulator (`gpukernels.sim._tma`, the twin of ``cp.async.bulk.tensor``, reading the `gpukernels._tma.TensorMap`
  the kernels use). Left, the box in the matrix: its rows, its 16-byte chunks (8 halves each), and the elements past
  the matrix's edge, which the copy writes as zeros. Right, shared memory after the copy: each 128-byte row of the
  box in 8 slots of 16 bytes, each slot coloured by the chunk that landed there. Where each chunk landed is read
  back from shared memory (a second copy of the same box, from a tensor whose every element is its own code, places
  the chunks that are all zeros too).
* ``ring_timeline``: the ring of stages of a simulated run of ``tensor_core.warp_specialized`` or ``persistent`` (or
  ``tma``), from the tracer's record of its mbarriers, TMA copies and wgmmas (`gpukernels.trace.Trace.ring`). One
  row per stage; along it each use of the stage: the producer's wait for the stage to be empty, its copies in
  flight until the full barrier's phase completes, the consumers' wgmmas on the stage, and their release (the empty
  barrier's phase completes); each use labelled with its k tile and the phase bit its waits name. For
  ``persistent``, the consumers' epilogue between one tile of C and the next is shaded: the next tile's copies
  are already in flight there.
"""

from __future__ import annotations

import functools

import numpy as np

from ._common import _figure, _rect, _shades, _suptitle, _trace_module, text_pt
from .maps import _wrap

ROW_BYTES = 128  # a box row of the 128-byte swizzle: 64 halves, 8 chunks of 16 bytes
CHUNK = 16
HALVES = ROW_BYTES // 2
MAX_ROWS = 32  # box rows the figure draws (and its kernel's shared memory holds)
SWIZZLES = (0, 128)  # none, and the one the lesson's tiles use

# Okabe-Ito, as the classroom page's timeline: distinct for colour-blind readers and in grey
_WAIT, _FLIGHT, _HOLD, _RELEASE, _MMA = "0.55", "#E69F00", "#56B4E9", "#D55E00", "black"


def _need_simulator(what: str) -> None:
    import gpukernels

    if not gpukernels.is_simulator():
        raise RuntimeError(f"viz.{what} draws what the simulator does: run it with GPUKERNELS_DEVICE=sim, or "
                           f"through gpukernels.notebook.on_simulator(viz.{what}, ...) on a GPU machine")


def _pair(name: str, value, low: int = 0) -> tuple:
    try:
        a, b = (int(v) for v in value)
        if (a, b) != tuple(value):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be two whole numbers; got {value!r}") from None
    if a < low or b < low:
        raise ValueError(f"{name} must be two whole numbers >= {low}; got {value!r}")
    return a, b


# ----------------------------------------------------------------------------------------------------------
# One TMA box landing in swizzled shared memory
# ----------------------------------------------------------------------------------------------------------


@functools.cache
def _box_kernel():
    """A kernel of one block: thread 0 copies the same box of two tensors into shared memory (the second from
    ``second`` bytes on), every thread waits for the barrier's phase and copies the shared bytes out."""
    from numba import cuda, types

    from .._tma import (TENSOR_MAPS, fence_mbarrier_init, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait,
                        tma_load_2d)

    @cuda.jit(extensions=[TENSOR_MAPS])
    def tma_box_kernel(out, tmap, probe, row, col, second, nbytes):
        smem = cuda.shared.array(2 * MAX_ROWS * ROW_BYTES, types.uint8)
        bar = cuda.shared.array(1, types.uint64)
        t = cuda.threadIdx.x
        if t == 0:
            mbarrier_init(bar, 0, 1)
            fence_mbarrier_init()
        cuda.syncthreads()
        if t == 0:
            mbarrier_arrive_expect_tx(bar, 0, nbytes)  # both boxes' bytes
            tma_load_2d(smem, 0, tmap, row, col, bar, 0)
            tma_load_2d(smem, second, probe, row, col, bar, 0)
        mbarrier_wait(bar, 0, 0)
        for i in range(t, out.shape[0], cuda.blockDim.x):
            out[i] = smem[i]

    return tma_box_kernel


def tma_landing(shape=(20, 72), at=(8, 16), rows: int = 16, swizzle: int = 128) -> dict:
    """Run one TMA copy on the simulator: a box of ``rows`` x 64 halves whose first element is ``at`` = (row, col)
    of a float16 matrix of ``shape`` = (M, N), into shared memory with ``swizzle`` (128 or 0 bytes). Returns what
    landed, read back from shared memory:

    ``slot[r][c]``: the 16-byte slot (0-7) of its 128-byte row where chunk c of box row r landed; ``line[r][c]``:
    that row (r: a swizzle permutes chunks within a row); ``past_edge[r][e]``: element e of box row r lies past the
    matrix's edge (it landed as zero); ``landed``: the shared bytes as float16, one 64-half row per box row;
    ``matrix``: the matrix copied (nonzero everywhere)."""
    from numba import cuda

    from .._tma import TensorMap

    m, n = _pair("shape", shape, 1)
    row, col = _pair("at", at)
    if n % 8:
        raise ValueError(f"shape: N must be a multiple of 8 (a tensor map's rows are 16-byte multiples apart); got "
                         f"{tuple(shape)}")
    if m > 256 or n > 256:
        raise ValueError(f"shape: at most 256 x 256, for a figure; got {tuple(shape)}")
    if row >= m or col >= n:
        raise ValueError(f"at: the box's first element must lie in the {m} x {n} matrix; got {tuple(at)}")
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be a whole number from 1 to {MAX_ROWS}; got {rows!r}")
    if swizzle not in SWIZZLES:
        raise ValueError(f"swizzle must be 128 (the lesson's) or 0 (none) bytes; got {swizzle!r}")
    rows = int(rows)
    _need_simulator("tma_box")
    # the matrix: nonzero values everywhere, so an element that lands as zero lies past the edge
    matrix = ((np.arange(m * n) % 1999) + 1).astype(np.float16).reshape(m, n)
    # the probe: the same box from a tensor with no edge there, element e of box row r holding the code
    # r * 64 + e + 1 (as its 16 bits): where its bytes land places every chunk, zeros and all
    codes = np.zeros((row + rows, col + HALVES), np.uint16)
    codes[row:, col:] = np.arange(1, rows * HALVES + 1, dtype=np.uint16).reshape(rows, HALVES)
    probe = codes.view(np.float16)
    box = rows * ROW_BYTES
    second = -(-box // 1024) * 1024  # the second box 1024-byte aligned too (the swizzle's period)
    out = np.zeros(second + box, np.uint8)
    _box_kernel()[1, 128](out, TensorMap(cuda.to_device(matrix), (rows, HALVES), swizzle=swizzle),
                          TensorMap(cuda.to_device(probe), (rows, HALVES), swizzle=swizzle), row, col, second, 2 * box)
    landed = out[:box].view(np.float16).reshape(rows, HALVES)
    got = out[second:].view(np.uint16).reshape(rows, HALVES)  # the probe's codes, as they sit in shared memory
    slot = np.full((rows, 8), -1)
    line = np.full((rows, 8), -1)
    past = np.zeros((rows, HALVES), bool)
    for r_at in range(rows):
        for q in range(8):
            code = got[r_at, 8 * q:8 * q + 8].astype(np.int64) - 1
            r, e = divmod(int(code[0]), HALVES)
            if code[0] < 0 or e % 8 or not np.array_equal(code, code[0] + np.arange(8)):
                raise RuntimeError(f"slot {q} of shared row {r_at} holds no whole 16-byte chunk of the box: "
                                   f"{code.tolist()}")
            slot[r, e // 8], line[r, e // 8] = q, r_at
            past[r, e:e + 8] = landed[r_at, 8 * q:8 * q + 8] == 0
    if (slot < 0).any():
        raise RuntimeError("the copy left a chunk of the box nowhere in shared memory")
    # the box as it was in the matrix, un-swizzled by the positions just read: what lies inside must be the matrix's
    inside = np.zeros((rows, HALVES), bool)
    inside[:max(0, min(rows, m - row)), :max(0, min(HALVES, n - col))] = True
    if not np.array_equal(past, ~inside):
        raise RuntimeError("the copy's zeros are not the elements past the matrix's edge")
    return {"shape": (m, n), "at": (row, col), "rows": rows, "swizzle": swizzle, "slot": slot.tolist(),
            "line": line.tolist(), "past_edge": past.tolist(), "landed": landed.astype(float).tolist(),
            "matrix": matrix.astype(float).tolist()}


def tma_box(shape=(20, 72), at=(8, 16), rows: int = 16, swizzle: int = 128):
    """One TMA box of ``rows`` x 64 halves at ``at`` of a float16 matrix of ``shape``, landing in shared memory with
    the 128-byte ``swizzle`` (or none: 0): where each 16-byte chunk of each row lands, from a simulated copy."""
    data = tma_landing(shape, at, rows, swizzle)
    (m, n), (row, col), rows = data["shape"], data["at"], data["rows"]
    slot, past = np.array(data["slot"]), np.array(data["past_edge"])
    colours = _shades(8)
    ink = ["white", "white", "white", "white", "black", "black", "black", "black"]  # on viridis, dark to light
    fig = _figure(13, 1.6 + 0.34 * max(rows, m - min(row, m) + 2))
    pt = text_pt(fig)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
    # left: the matrix, the box, its chunks (coloured by their place in the row), what lies past the edge
    width, height = max(n, col + HALVES), max(m, row + rows)
    left.add_patch(_rect(0, 0, n, m, "0.93"))
    for r in range(rows):
        for c in range(8):
            x0, y0 = col + 8 * c, row + r
            inside = int((~past[r, 8 * c:8 * c + 8]).sum())
            if inside:
                left.add_patch(_rect(x0, y0, inside, 1, colours[c]))
            if inside < 8:
                left.add_patch(_rect(x0 + inside, y0, 8 - inside, 1, "white", hatch="///"))
            left.text(x0 + 4, y0 + 0.5, str(c), ha="center", va="center", fontsize=pt,
                      color=ink[c] if inside >= 4 else "black")
    left.add_patch(_rect(col, row, HALVES, rows, "none"))
    left.patches[-1].set_linewidth(2.0)
    left.set_xlim(0, width)
    left.set_ylim(height, 0)
    left.set_xlabel("column of the matrix", fontsize=pt)
    left.set_ylabel("row of the matrix", fontsize=pt)
    left.tick_params(labelsize=pt)
    left.set_title(_wrap(left, f"the box ({rows} x {HALVES} halves) at {(row, col)} of the {m} x {n} float16 "
                               "matrix (grey); hatched: past the edge", pt), fontsize=pt, loc="left")
    # right: shared memory after the copy, one 128-byte row of the box per line, its 8 slots of 16 bytes
    for r in range(rows):
        for c in range(8):
            q = int(slot[r, c])
            zero = bool(past[r, 8 * c:8 * c + 8].all())
            right.add_patch(_rect(q, r, 1, 1, "white" if zero else colours[c], hatch="///" if zero else ""))
            right.text(q + 0.5, r + 0.5, str(c), ha="center", va="center", fontsize=pt,
                       color="black" if zero else ink[c])
    right.set_xlim(0, 8)
    right.set_ylim(rows, 0)
    right.set_xticks(np.arange(8) + 0.5, [f"{4 * q}-{4 * q + 3}" for q in range(8)], fontsize=pt)
    right.set_yticks(np.arange(rows) + 0.5, [str(r) for r in range(rows)], fontsize=pt)
    right.set_xlabel("16-byte slot of the 128-byte row: its 4 banks", fontsize=pt)
    right.set_ylabel("row of the box", fontsize=pt)
    how = "the 128-byte swizzle" if data["swizzle"] else "no swizzle"
    right.set_title(_wrap(right, f"shared memory after the copy ({how}): which chunk sits in each slot", pt),
                    fontsize=pt, loc="left")
    fig.gpukernels_data.update(data)
    rule = ("chunk c of row r lands in slot c XOR (r mod 8): down a column of 8 rows a chunk visits all 8 bank "
            "groups, so wgmma's and ldmatrix's 8-row reads meet no bank conflict" if data["swizzle"] else
            "without a swizzle every chunk keeps its place: a column of rows shares one bank group")
    _suptitle(fig, f"One TMA copy: a box of {rows} rows of 128 bytes lands in shared memory with {how}",
              f"colour and number: a 16-byte chunk's place in its row of the box (8 halves); {rule}. Elements past "
              "the matrix's edge arrive as zeros (hatched). Read back from the simulator's copy (gpukernels.sim._tma)")
    return fig


# ----------------------------------------------------------------------------------------------------------
# The ring of stages of a warp-specialized run
# ----------------------------------------------------------------------------------------------------------

#: The TMA steps and the shape each draws by default: several trips round the 4-stage ring (persistent: 3 tiles
#: of C on one block, 3 k tiles each, so that a tile starts where the last one left the ring).
RING_SHAPES = {"tma": (8, 8, 384), "warp_specialized": (8, 8, 384), "persistent": (8, 768, 192)}
MAX_USES = 16  # k tiles through the ring in the whole run: each costs ~0.6 s under the tracer
_RUNS: dict = {}  # (version, shape, seed) -> ring_run's result: a figure and its data from one simulation


def ring_run(version: str = "persistent", shape=None, seed: int = 0) -> dict:
    """Run a TMA step of the tensor-core lesson at ``shape`` (M, N, K) under the tracer (``persistent``: on one
    block, which walks every tile of C) and return its ring, block 0's: ``uses`` (one dict per use of a stage:
    `gpukernels._ringlog.StageUse`'s fields in the simulated order's steps, with its ``tile`` of C and ``kt``),
    ``stages``, ``k_tiles``, ``tiles`` (of C, on that block) and ``epilogues`` ((tile, first step, last step) of the
    consumers' epilogue between tile and tile + 1). Kept per process: the same arguments are simulated once."""
    import copy
    from dataclasses import asdict

    import gpukernels
    from gpukernels import tensor_core as tc

    from .. import _ringlog
    from .._launch import ceil_div

    if version not in RING_SHAPES:
        raise ValueError(f"version must be one of {list(RING_SHAPES)} (the steps fed by TMA); got {version!r}")
    shape = RING_SHAPES[version] if shape is None else shape
    try:
        m, n, k = (int(v) for v in shape)
        ok = (m, n, k) == tuple(shape) and min(m, n, k) >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"shape must be (M, N, K), three whole numbers >= 1; got {shape!r}")
    if n % 8 or k % 8:
        raise ValueError(f"shape: N and K must be multiples of 8 (rows of A and B 16-byte multiples apart, as a "
                         f"tensor map needs; otherwise the step runs step 6's loads); got {tuple(shape)}")
    kernel = tc.VERSIONS[version].kernels[0]
    bm, bn = kernel.tile
    k_tiles, tiles = ceil_div(k, 64), ceil_div(m, bm) * ceil_div(n, bn)
    if k_tiles * tiles > MAX_USES:
        raise ValueError(f"shape: {tiles} tile(s) of C x {k_tiles} k tile(s) of 64 is {tiles * k_tiles} trips of a "
                         f"stage; at most {MAX_USES} (each costs the tracer about half a second): choose a smaller "
                         f"shape; got {tuple(shape)}")
    _need_simulator("ring_timeline")
    _trace_module()
    key = (version, (m, n, k), seed)
    if key in _RUNS:
        return copy.deepcopy(_RUNS[key])
    a, b = tc.make_inputs((m, n, k), seed)
    c = np.full((m, n), np.nan, np.float32)
    with gpukernels.trace(count_local=False) as t:
        if version == "persistent":
            from ..tensor_core.k09_persistent import persistent_launch

            for launch in persistent_launch(kernel, a, b, c, blocks=1):
                launch()
        else:
            c = tc.VERSIONS[version](a, b)
            tiles = 1  # one tile of C per block: block 0's
    ring = t.ring()
    epilogues = _ringlog.epilogues(ring, k_tiles) if version == "persistent" else []
    uses = [dict(asdict(u), tile=u.index // k_tiles, kt=u.index % k_tiles, phase_bit=u.phase_bit) for u in ring]
    _RUNS[key] = {"version": version, "shape": (m, n, k), "stages": kernel.stages, "k_tiles": k_tiles,
                  "tiles": tiles, "uses": uses, "epilogues": epilogues,
                  "clock": _ringlog.clock(ring, [s for _, s0, s1 in epilogues for s in (s0, s1)])}
    return copy.deepcopy(_RUNS[key])


def ring_timeline(version: str = "persistent", shape=None, seed: int = 0):
    """The ring of stages of one simulated run of a TMA step (``persistent``, ``warp_specialized`` or ``tma``) at
    ``shape`` (default ``RING_SHAPES[version]``): one row per stage, each use of it from the producer's wait to the
    consumers' release, with its k tile and phase bit; the epilogues between tiles of C shaded (``persistent``)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    run = ring_run(version, shape, seed)
    uses, stages = run["uses"], run["stages"]
    rank = run["clock"]  # x: the rank of each drawn event in the simulated order (an order, not a time)
    last = len(rank)
    x = rank.__getitem__
    fig = _figure(14, 1.9 + 0.95 * stages)
    pt = text_pt(fig)
    ax = fig.add_subplot()
    for tile, s0, s1 in run["epilogues"]:
        ax.axvspan(x(s0), x(s1), color="0.9", zorder=0)
        ax.text((x(s0) + x(s1)) / 2, stages + 0.15, f"epilogue:\ntile {tile}'s C stored", ha="center", va="top",
                fontsize=pt)
    for u in uses:
        y = u["stage"]
        w = u["empty_wait"]
        if w and not w[2] and w[1] is not None:  # the producer waited for the consumers' release
            ax.plot([x(w[0]), x(w[1])], [y + 0.22] * 2, color=_WAIT, lw=3, solid_capstyle="butt")
        if u["issued"]:
            start = x(u["issued"][0])
            end = x(u["full"]) if u["full"] is not None else last
            ax.add_patch(_rect(start, y + 0.3, max(end - start, 0.5), 0.22, _FLIGHT))
            ax.plot([x(s) for s in u["issued"]], [y + 0.22] * len(u["issued"]), "v", color="black", ms=4)
            label = (f"tile {u['tile']} k{u['kt']}" if run["tiles"] > 1 else f"k tile {u['index']}")
            ax.text(start, y + 0.1, f"{label}, phase bit {u['phase_bit']}", ha="left", va="bottom", fontsize=pt)
        if u["full"] is not None:
            first_wait = min((s for s, _, _ in u["waits"]), default=u["full"])
            if first_wait < u["full"]:  # consumers parked on the full barrier before the bytes landed
                ax.plot([x(first_wait), x(u["full"])], [y + 0.68] * 2, color=_HOLD, lw=2, ls=":")
            end = u["freed"] if u["freed"] is not None else max([s for s, _ in u["wgmma"]], default=u["full"])
            ax.add_patch(_rect(x(u["full"]), y + 0.55, max(x(end) - x(u["full"]), 0.5), 0.26, _HOLD))
            ax.plot([x(s) for s, _ in u["wgmma"]], [y + 0.68] * len(u["wgmma"]), "|", color=_MMA, ms=7)
            ax.plot([x(s) for s, _ in u["released"]], [y + 0.68] * len(u["released"]), "|", color=_RELEASE, ms=9,
                    mew=2)
    ax.set_xlim(-1, last + 1)
    ax.set_ylim(stages + 0.3 + (0.55 if run["epilogues"] else 0), -0.1)
    ax.set_yticks(np.arange(stages) + 0.45, [f"stage {s}" for s in range(stages)], fontsize=pt)
    ax.tick_params(axis="x", labelsize=pt)
    ax.set_xlabel("the ring's events in the order the simulator ran them (one step each: an order, not a time)",
                  fontsize=pt)
    released = any(u["released"] for u in uses)  # (step 7 has no empty barriers: a block barrier frees a stage)
    handles = [Line2D([], [], color=_WAIT, lw=3, label="producer waits for the stage's empty barrier"),
               Line2D([], [], marker="v", ls="", color="black", label="producer issues a TMA copy"),
               Patch(facecolor=_FLIGHT, edgecolor="black", label="copies in flight, until the full barrier's phase "
                                                                   "completes"),
               Line2D([], [], color=_HOLD, lw=2, ls=":", label="consumers already wait for that phase"),
               Patch(facecolor=_HOLD, edgecolor="black", label="consumers' wgmmas read the stage"),
               Line2D([], [], marker="|", ls="", color=_MMA, ms=7, label="a warp's wgmma"),
               Line2D([], [], marker="|", ls="", color=_RELEASE, ms=9, mew=2,
                      label="a consumer warp releases it (empty barrier)")]
    if not released:
        handles = handles[1:-1]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=pt, frameon=False)
    m, n, k = run["shape"]
    what = (f"{run['tiles']} tiles of C on one block, {run['k_tiles']} k tiles each" if version == "persistent"
            else f"block 0, {run['k_tiles']} k tiles")
    fig.gpukernels_data.update(run)
    _suptitle(fig, f"tensor_core.{version} at {m} x {n} x {k}: its ring of {stages} stages in the simulator "
                   f"({what})",
              "each stage is filled again every time round the ring; every wait names the phase by its parity, the "
              "phase bit, which flips from one use of a stage to the next"
              + ("; shaded: the consumers store a tile of C while the next tile's copies are already in flight"
                 if run["epilogues"] else ""))
    return fig
