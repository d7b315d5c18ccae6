"""Figures of the attention lesson, measured from the lesson's kernels and computed by its update rule -- never drawn
by hand.

* ``attention_traffic``: global-memory bytes against the sequence length S, measured by the tracer on ``naive`` and
  on the fused steps (``fused_rows``, ``tiled``), next to the two model lines: naive's grows with the S x S score
  matrix it stores, the fused steps' with S * D (``attention.min_bytes``). A second panel carries the model to the
  suite's training shape -- a model, and labelled one.
* ``online_rescaling``: one query row, its keys in tiles, the online softmax's state tile by tile -- the
  running max before and after, the factor exp(m_old - m_new), the running sum and one accumulator -- ending at the
  full softmax's result. ``online_softmax_steps`` computes those steps (NumPy, the kernels' update).

What "bytes" means here. The tracer sees every load and store of every thread; a kernel that reads the same element
twice in one launch is served by the caches the second time (``fused_rows`` reads all of K and V once per query row,
mostly from L2), while nothing a launch wrote is assumed to stay cached for the next launch (naive's S is 8.6 GB at
the training shape: no cache holds it). So the bytes drawn are, per launch and per global array, the distinct
elements loaded plus the distinct elements stored (the tracer's ``elements_loaded`` and ``elements_stored``), times
the element size: the DRAM traffic of a launch whose caches keep what it re-reads. ``traced_bytes`` also returns
every access's bytes (``Trace.global_bytes()``), which counts each re-read again.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ._common import ROOT, _figure, _suptitle, _trace_module, text_pt

#: The sequence lengths the traffic figure measures (Sq = Sk = S, B = H = 1, D = TRAFFIC_D): small enough for the
#: simulator to run all three steps in about five seconds (``fused_rows``' warp per row takes most of them), and past
#: 32 so that ``tiled`` has two blocks of query rows.
TRAFFIC_SIZES = (8, 16, 32, 48)
TRAFFIC_D = 16
#: The steps the traffic figure measures: the one that stores S, and the fused float32 steps that never do.
TRAFFIC_VERSIONS = ("naive", "fused_rows", "tiled")


def _at():
    from gpukernels import attention

    return attention


def _cite(module, needle: str) -> str | None:
    """``gpukernels/attention/k03_tiled.py:131``: the first line of ``module``'s source containing ``needle`` (None
    when no line does -- a figure then names no line rather than a wrong one)."""
    path = Path(inspect.getsourcefile(module)).resolve()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            try:
                return f"{path.relative_to(ROOT).as_posix()}:{n}"
            except ValueError:  # an installed copy, outside the repository
                return f"{path.name}:{n}"
    return None


# ----------------------------------------------------------------------------------------------------------
# 1. Global-memory bytes against S: naive stores S x S scores, the fused steps never do
# ----------------------------------------------------------------------------------------------------------

_MEASURED: dict = {}
#: Up to this many scores `naive_score_traffic` plans naive itself (S allocated on the host: 16 MB); past it, a
#: stand-in of S.
PLAN_MAX_SCORES = 1 << 22


def traced_bytes(version: str, shape, seed: int = 0) -> dict:
    """Run ``attention.<version>`` on ``attention.make_inputs(shape, seed)`` under the tracer (cached per process).

    Returns ``{"bytes": ..., "accessed": ..., "launches": ...}``: ``bytes`` the sum over launches and global arrays
    of (distinct elements loaded + distinct elements stored) x element size -- what DRAM moves when the caches keep
    what a launch re-reads, and nothing between launches; ``accessed`` every load's and store's bytes
    (``Trace.global_bytes()``), re-reads included; ``launches`` the kernel launches."""
    import gpukernels

    _trace_module()  # ImportError here: no tracer
    at = _at()
    shape = tuple(int(x) for x in shape)
    key = (version, shape, seed)
    if key not in _MEASURED:
        inputs = at.make_inputs(shape, seed)
        with gpukernels.trace(count_local=False) as t:  # global traffic only
            at.VERSIONS[version](*inputs)
        rows = [r for r in t.traffic() if r.space == "global"]
        _MEASURED[key] = {"bytes": sum((r.elements_loaded + r.elements_stored) * r.itemsize for r in rows),
                          "accessed": t.global_bytes(), "launches": len(t.launches)}
    return dict(_MEASURED[key])


def _slots(plan, array) -> int:
    """How many arguments of the launches of ``plan`` are ``array`` itself."""
    return sum(a is array for launch in plan for a in launch.args)


def _score_array(plan):
    """S in naive's plan: the argument ``s`` of its first launch (``scores_kernel(q, k, s, scale, causal)``)."""
    names = list(inspect.signature(getattr(plan[0].kernel, "py_func", plan[0].kernel)).parameters)
    return plan[0].args[names.index("s")]


def naive_score_traffic(shape) -> dict:
    """The score matrix S of ``attention.naive`` at ``shape = (B, H, Sq, Sk, D)``, counted from its launch plan.

    S is the argument ``s`` of naive's first kernel (``scores_kernel``), a (B*H*Sq, Sk) float32 array; every
    argument of a launch that is S is one pass over it -- written by the scores kernel, read and written by the
    softmax lesson's kernel (``x`` and ``y``, in place), read by the product with V (``p``): 4 passes, 16 bytes per
    score, while the softmax runs one launch per row (up to 32768 keys; its ``split_row`` for few long rows reads
    S once more). Returns ``{"shape": S's shape, "pass_bytes": its bytes, "passes": ..., "bytes": the product}``.

    The plan is naive's own (``attention.naive.launches``) up to PLAN_MAX_SCORES scores; past that, where allocating
    S would take gigabytes, the softmax's part of it is planned on a stand-in of S's shape that holds one float
    (``np.broadcast_to``), and the two attention kernels' passes come from the plan of a small shape."""
    at = _at()
    b, h, sq, sk, d = (int(x) for x in shape)
    rows = b * h * sq
    if rows * sk <= PLAN_MAX_SCORES:
        plan = at.naive.launches(*(np.zeros((b, h, n, d), np.float32) for n in (sq, sk, sk)))
        s = _score_array(plan)
        passes = _slots(plan, s)
    else:
        from gpukernels import softmax

        small = at.naive.launches(*(np.zeros((1, 1, 2, 1), np.float32) for _ in range(3)))
        around = _slots([x for x in small if x.kernel in (at.scores_kernel, at.pv_kernel)], _score_array(small))
        s = np.broadcast_to(np.zeros(1, np.float32), (rows, sk))
        passes = around + _slots(softmax.optimized.plan(s, s), s)
    return {"shape": tuple(s.shape), "pass_bytes": s.nbytes, "passes": passes, "bytes": passes * s.nbytes}


def traffic_model(shape) -> dict:
    """The two model lines at ``shape``: ``fused`` = ``attention.min_bytes`` (read q, k, v, write out: 4 bytes x
    (2 Sq + 2 Sk) x D per head) and ``naive`` = that plus S's traffic (`naive_score_traffic`)."""
    fused = _at().min_bytes(tuple(shape))
    return {"fused": fused, "naive": fused + naive_score_traffic(shape)["bytes"]}


def attention_traffic(sizes=TRAFFIC_SIZES, d: int = TRAFFIC_D, versions=TRAFFIC_VERSIONS,
                      extrapolate: bool = True) -> Figure:
    """Global-memory bytes of naive and the fused steps against S (Sq = Sk = S, B = H = 1, head dimension ``d``),
    measured by the tracer in the simulator, with the model lines; ``extrapolate`` adds a panel carrying the model
    (only the model) to the suite's training shape, B = 8, H = 16, D = 128.

    Teaches: storing the scores costs 16 bytes per (query, key) pair, which grows as S^2 and leaves the S * D of
    q, k, v and out behind -- at S = 64 and D = 16 already five times as many bytes; at 4096 keys of a training batch
    thirty times. The fused steps move exactly the minimum: every score is made and used in registers."""
    at = _at()
    sizes = [int(s) for s in sizes]
    measured = {v: [traced_bytes(v, (1, 1, s, s, d)) for s in sizes] for v in versions}
    fine = sorted(set(range(8, max(sizes) + 1, 4)) | set(sizes))
    model = {s: traffic_model((1, 1, s, s, d)) for s in fine}
    score = {s: naive_score_traffic((1, 1, s, s, d)) for s in sizes}
    passes = sorted({score[s]["passes"] for s in sizes})
    per_score = "/".join(str(4 * p) for p in passes)

    fig = _figure(12.0 if extrapolate else 7.0, 5.4)
    fs = text_pt(fig, 10)
    axes = fig.subplots(1, 2, width_ratios=(1.15, 1)) if extrapolate else [fig.add_subplot()]
    ax = axes[0]
    xs = np.array(fine, float)
    naive_line = np.array([model[s]["naive"] for s in fine]) / 1e3
    fused_line = np.array([model[s]["fused"] for s in fine]) / 1e3
    ax.plot(xs, naive_line, color="0.15", lw=2,
            label=f"model, naive: min_bytes + {per_score}·B·H·Sq·Sk (S's {'/'.join(map(str, passes))} passes)")
    ax.plot(xs, fused_line, color="tab:blue", lw=2, ls="--",
            label="model, fused: min_bytes = 4·(2Sq + 2Sk)·D")
    ax.fill_between(xs, fused_line, naive_line, color="0.85",
                    label="scores: write S, softmax it in place, read it for P·V")
    style = {"naive": ("s", "0.15", 9), "fused_rows": ("o", "tab:blue", 12), "tiled": ("^", "tab:orange", 6)}
    for v in versions:
        marker, color, size = style.get(v, ("D", "tab:green", 7))
        ax.plot(sizes, [m["bytes"] / 1e3 for m in measured[v]], ls="none", marker=marker, ms=size, mfc="none",
                mec=color, mew=1.8, label=f"measured: attention.{v}")
    top = sizes[-1]
    gap = model[top]["naive"] - model[top]["fused"]
    ax.annotate("", xy=(top, model[top]["naive"] / 1e3), xytext=(top, model[top]["fused"] / 1e3),
                arrowprops={"arrowstyle": "<->", "color": "0.3", "shrinkA": 7, "shrinkB": 7})
    ax.text(top * 0.97, (model[top]["fused"] + 0.2 * gap) / 1e3,
            f"{gap / 1e3:.1f} kB of scores\nat S = {top}: {gap // (top * top)} B × {top}²", ha="right", va="center",
            fontsize=fs)
    ax.set_xlim(0, top * 1.05)
    ax.set_ylim(0, model[top]["naive"] / 1e3 * 1.08)
    ax.set_xlabel("S = Sq = Sk  (B = H = 1, D = %d, float32)" % d, fontsize=fs)
    ax.set_ylabel("global-memory bytes (kB)", fontsize=fs)
    ax.tick_params(labelsize=fs)
    ax.legend(fontsize=fs, loc="upper left", frameon=False)
    ax.set_title("Measured by the tracer in the simulator", fontsize=fs, loc="left")

    data = {"sizes": sizes, "d": d, "versions": list(versions),
            "measured": {v: [m["bytes"] for m in measured[v]] for v in versions},
            "accessed": {v: [m["accessed"] for m in measured[v]] for v in versions},
            "model": {"naive": [model[s]["naive"] for s in sizes], "fused": [model[s]["fused"] for s in sizes]},
            "score_passes": [score[s]["passes"] for s in sizes], "score_pass_bytes": [score[s]["pass_bytes"]
                                                                                   for s in sizes]}

    if extrapolate:
        b, h, _, _, dd = at.SHAPES["suite"]["training"][0]
        big = [512 * 2 ** i for i in range(6)]  # 512 .. 16384
        mod = [traffic_model((b, h, s, s, dd)) for s in big]
        ax2 = axes[1]
        ax2.plot(big, [m["naive"] / 1e9 for m in mod], color="0.15", lw=2, marker="s", ms=5, label="naive (model)")
        ax2.plot(big, [m["fused"] / 1e9 for m in mod], color="tab:blue", lw=2, ls="--", marker="o", ms=5,
                 label="fused (model)")
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log")
        ax2.set_xticks(big, [f"{s}" for s in big], fontsize=fs)
        ax2.tick_params(labelsize=fs)
        ax2.set_xlabel(f"S = Sq = Sk  (B = {b}, H = {h}, D = {dd})", fontsize=fs)
        ax2.set_ylabel("global-memory bytes (GB)", fontsize=fs)
        i = big.index(4096)
        for key, ha, va, dx, dy in (("naive", "right", "bottom", -6, 6), ("fused", "left", "top", 8, -6)):
            val = mod[i][key]
            ax2.annotate(f"{val / 1e9:.1f} GB at S = 4096", xy=(4096, val / 1e9), xytext=(dx, dy),
                         textcoords="offset points", ha=ha, va=va, fontsize=fs)
        ax2.legend(fontsize=fs, loc="upper left", frameon=False)
        ax2.set_title("MODEL, not measured: the same formulas at training sizes", fontsize=fs, loc="left")
        data["extrapolated"] = {"shape": (b, h, dd), "sizes": big, "naive": [m["naive"] for m in mod],
                                "fused": [m["fused"] for m in mod]}
    where = _cite(at.k01_naive, "(bh * sq, sk), np.float32)")
    ratio = model[top]["naive"] / model[top]["fused"]
    _suptitle(fig, f"Attention's global-memory traffic: naive stores the S×S scores ({per_score} bytes per score), "
                   f"the fused steps never do -- {ratio:.1f}× the bytes at S = {top}, and growing as S²",
              "bytes: per launch, the distinct elements each global array has loaded and stored (what DRAM moves "
              "when the caches keep what a launch re-reads)"
              + (f"; S is the scratch array of {where}" if where else ""), fontsize=10)
    fig.gpukernels_data.update(data)
    return fig


# ----------------------------------------------------------------------------------------------------------
# 2. The online softmax, tile by tile, on one row
# ----------------------------------------------------------------------------------------------------------


def online_softmax_steps(q, k, v, tile: int = 8, scale: float | None = None, rescale: bool = True) -> dict:
    """The online softmax of one query row over its keys a tile at a time -- the update ``fused_rows`` makes per key
    and ``tiled`` per tile -- every step kept, in float64.

    ``q``: the query row (D,); ``k``, ``v``: the keys and values (Sk, D) and (Sk, Dv); ``scale`` defaults to
    1/sqrt(D). The scores are s = scale * k @ q. Starting from m = -inf, l = 0, acc = 0, for each tile of ``tile``
    keys::

        m_new = max(m, max(s_tile))                     the running max
        alpha = exp(m - m_new)                          < 1 when the max grew: what was summed so far shrinks
        l     = l * alpha + sum(exp(s_tile - m_new))    the running sum of exp(s - m)
        acc   = acc * alpha + exp(s_tile - m_new) @ v_tile
        m     = m_new

    and after the last tile out = acc / l, which is softmax(s) @ v: no exp() ever sees a positive argument, however
    far apart the scores are. (On the first tile m = -inf, so alpha = exp(-inf) = 0 clears the empty l and acc.)

    ``rescale=False`` drops the factor (alpha = 1 always): the mistake the factor prevents -- terms summed against
    an older, smaller max keep their larger weights -- for a student to compare.

    Returns ``{"scores", "out", "steps"}``; each step a dict: ``tile``, ``keys`` (first, last + 1), ``scores``,
    ``m_old``, ``m_new``, ``alpha``, ``p`` (exp(s_tile - m_new)), ``l_old``, ``l_new``, ``acc_old``, ``acc_new``."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    v = np.asarray(v, np.float64)
    if q.ndim != 1 or k.ndim != 2 or v.ndim != 2 or k.shape != (v.shape[0], q.shape[0]) or not len(k):
        raise ValueError(f"q must be one row (D,), k (Sk, D) and v (Sk, Dv) with Sk >= 1; got q {q.shape}, "
                         f"k {k.shape}, v {v.shape}")
    if int(tile) != tile or tile < 1:
        raise ValueError(f"tile must be a whole number of keys >= 1; got {tile!r}")
    tile = int(tile)
    from ..attention._common import resolve_scale  # the launchers' rule: None or a finite number > 0

    scale = resolve_scale(scale, q.shape[0])
    scores = scale * (k @ q)
    m, l, acc = -math.inf, 0.0, np.zeros(v.shape[1])
    steps = []
    for t, k0 in enumerate(range(0, len(scores), tile)):
        s = scores[k0:k0 + tile]
        m_new = max(m, float(s.max()))
        alpha = math.exp(m - m_new) if rescale else 1.0
        p = np.exp(s - m_new)
        l_new = l * alpha + float(p.sum())
        acc_new = acc * alpha + p @ v[k0:k0 + tile]
        steps.append({"tile": t, "keys": (k0, k0 + len(s)), "scores": s, "m_old": m, "m_new": m_new,
                      "alpha": alpha, "p": p, "l_old": l, "l_new": l_new, "acc_old": acc, "acc_new": acc_new})
        m, l, acc = m_new, l_new, acc_new
    return {"scores": scores, "out": acc / l, "steps": steps}


def rescaling_example(d: int = 8, keys: int = 32, seed: int = 0):
    """The figure's row (q (D,), k (Sk, D), v (Sk, D), float32): standard normal values (scores of about +-1), then
    two keys turned toward q so that the running max grows twice -- a little in the second tile (key Sk * 5/16, score
    3) and by far in the third (key Sk * 5/8, score 12) -- while the last tile brings no new max."""
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal(d), rng.standard_normal((keys, d)), rng.standard_normal((keys, d))
    for j, score in ((keys * 5 // 16, 3.0), (keys * 5 // 8, 12.0)):  # keys 10 and 20 of 32
        k[j] = q * (score * math.sqrt(d) / float(q @ q))  # scale * q . k[j] = score
    return q.astype(np.float32), k.astype(np.float32), v.astype(np.float32)


def _fmt(x: float, digits: int = 3) -> str:
    if x == -math.inf:
        return "-inf"
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.2e}"


def _plus(x: float) -> str:
    """``+ 0.392`` or ``− 0.392``: a term added to a line of arithmetic."""
    return ("− " if x < 0 else "+ ") + _fmt(abs(x), 4)


def online_rescaling(q=None, k=None, v=None, tile: int = 8) -> Figure:
    """One query row's online softmax, tile by tile (``online_softmax_steps``): each tile's scores against the
    running max before and after it, the rescaling factor exp(m_old - m_new), the running sum l and the
    accumulator's first dimension, then out = acc / l beside the full softmax's (``attention.reference``) and the
    ``tiled`` kernel's output for the same row. Default row: `rescaling_example` (4 tiles of 8 keys, the max
    jumping in the third).

    Teaches: the factor is 1 while the max stands, shrinks what was summed when the max grows (to almost nothing
    when it grows by a lot), and with it the result equals the softmax of the whole row -- without it, it does not.
    Raises RuntimeError if the steps do not reproduce the reference (a figure of a wrong update is not drawn)."""
    import matplotlib

    at = _at()
    if q is None:
        q, k, v = rescaling_example()
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    run = online_softmax_steps(q, k, v, tile)
    broken = online_softmax_steps(q, k, v, tile, rescale=False)
    ref = at.reference(q[None, None, None], k[None, None], v[None, None])[0, 0, 0]
    if not np.allclose(run["out"], ref, rtol=1e-5, atol=1e-6):
        raise RuntimeError(f"the online softmax's steps give {run['out'][:4]}..., attention.reference "
                           f"{ref[:4]}...: the update does not reproduce the softmax")
    kernel = at.tiled(q[None, None, None], k[None, None], v[None, None])[0, 0, 0]

    steps = run["steps"]
    n = len(steps)
    fig = _figure(max(9.0, 2.9 * n + 0.6), 6.6)
    fs = text_pt(fig, 10)
    grid = fig.add_gridspec(3, n, height_ratios=(2.2, 1.1, 0.3))
    bars = [fig.add_subplot(grid[0, i]) for i in range(n)]
    for a in bars[1:]:
        a.sharey(bars[0])
    cmap = matplotlib.colormaps["viridis"]
    lo = min(float(run["scores"].min()), 0.0) - 1
    hi = float(run["scores"].max()) + 2.5
    for i, st in enumerate(steps):
        ax = bars[i]
        k0, k1 = st["keys"]
        ax.bar(np.arange(k0, k1), st["scores"], color=[cmap(0.85 * w) for w in st["p"]], edgecolor="black", lw=0.5)
        if st["m_old"] > -math.inf:
            ax.axhline(st["m_old"], color="tab:red", ls=":", lw=2, label="m before the tile")
        ax.axhline(st["m_new"], color="black", ls="--", lw=1.4, label="m after the tile")
        ax.set_ylim(lo, hi)
        ax.set_xticks(np.arange(k0, k1, 2 if k1 - k0 > 4 else 1))
        ax.tick_params(labelsize=fs)
        ax.set_xlabel("key", fontsize=fs)
        ax.set_title(f"tile {i}: keys {k0}-{k1 - 1}", fontsize=fs)
        if i:
            ax.tick_params(labelleft=False)
    bars[0].set_ylabel("score s = scale·q·k", fontsize=fs)
    handles = [h for a in bars for h in a.get_legend_handles_labels()[0]]
    labels = [lab for a in bars for lab in a.get_legend_handles_labels()[1]]
    seen = dict(zip(labels, handles))
    bars[0].legend(seen.values(), seen.keys(), fontsize=fs, loc="upper left", frameon=False)

    for i, st in enumerate(steps):
        ax = fig.add_subplot(grid[1, i])
        ax.axis("off")
        grew = st["m_new"] > st["m_old"]
        tile_v = float(st["p"] @ v[st["keys"][0]:st["keys"][1], 0])
        lines = [f"m: {_fmt(st['m_old'])} → {_fmt(st['m_new'])}" + ("  (new max)" if grew and i else ""),
                 f"α = exp(m_old − m_new) = {_fmt(st['alpha'])}",
                 f"l = {_fmt(st['l_old'], 4)}·α {_plus(float(st['p'].sum()))}",
                 f"   = {_fmt(st['l_new'], 4)}",
                 f"acc[0] = {_fmt(st['acc_old'][0], 4)}·α {_plus(tile_v)}",
                 f"   = {_fmt(st['acc_new'][0], 4)}"]
        ax.text(0.02, 0.98, "\n".join(lines), transform=ax.transAxes, ha="left", va="top", fontsize=fs,
                linespacing=1.35, color="tab:red" if grew and i else "black")

    ax = fig.add_subplot(grid[2, :])
    ax.axis("off")
    last = steps[-1]
    ax.text(0.0, 0.95,
            f"after the last tile: out[0] = acc[0] / l = {_fmt(last['acc_new'][0], 4)} / {_fmt(last['l_new'], 4)}"
            f" = {run['out'][0]:.6f};   softmax of the whole row (attention.reference): {ref[0]:.6f};   "
            f"attention.tiled's kernel: {kernel[0]:.6f}\n"
            f"without the rescale (α = 1 always): out[0] = {broken['out'][0]:.6f} -- the terms summed against an "
            "older, smaller max keep their weights",
            transform=ax.transAxes, ha="left", va="top", fontsize=fs, linespacing=1.5)
    where = _cite(at.k03_tiled, "alpha = math.exp(m - ")
    _suptitle(fig, f"The online softmax on one row of {len(run['scores'])} keys in tiles of {tile}: when the max "
                   "grows, everything summed so far is multiplied by α = exp(m_old − m_new)",
              "bar colour: the key's weight exp(s − m) at that tile (dark ≈ 0, light = 1)"
              + (f"; the update of {where}, a tile at a time" if where else ""), fontsize=10)
    fig.gpukernels_data.update({
        "tile": tile, "scores": run["scores"].tolist(), "out": run["out"].tolist(), "reference": ref.tolist(),
        "kernel": kernel.tolist(), "no_rescale": broken["out"].tolist(),
        "steps": [{key: (val.tolist() if isinstance(val, np.ndarray) else val) for key, val in st.items()}
                  for st in steps]})
    return fig
