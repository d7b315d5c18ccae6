"""A figure of FlashAttention-3's ping-pong schedule (the attention lesson's step 11), drawn from what the simulator
did -- never from a formula written here.

* ``pingpong_timeline``: block 0 of a simulated run of ``attention.ping_pong`` (or, to compare, of step 10,
  ``warp_specialized``), from the tracer's record of its wgmmas, named barriers, mbarriers and TMA copies
  (`gpukernels._pplog`). At the top, the producer's TMA copies of Q and of each K and V tile into their rings. Then,
  for each consumer warpgroup: its turns at the tensor cores (waiting at its named barrier, then issuing, then
  handing the turn to the other warpgroup), its products S(t) = Q K(t)^T and O += P(t) V(t) from the first wgmma
  issued to the ``wgmma_wait`` that found them done, and each of its 4 warps' softmax of tile t. The turns of one
  warpgroup are shaded down the whole figure: what the other warpgroup does in that column happens while this one
  has the tensor cores.
"""

from __future__ import annotations

import numpy as np

from ._common import _figure, _rect, _suptitle, _trace_module, text_pt

#: The steps drawn and the shape each draws by default: (B, H, Sq, Sk, D), one block of 128 queries, 3 K/V tiles of
#: 64 keys (3 turns with an S each, the last P V in a fourth), at D = 16 (one wgmma per warp for S).
VERSIONS = ("ping_pong", "warp_specialized")
SHAPE = (1, 1, 128, 192, 16)
MAX_TILES = 6  # K/V tiles of 64 keys: a tile costs the tracer about a second, and the figure its width
MAX_BLOCKS = 2  # blocks of 128 queries the run may have (the figure draws block 0's)
_RUNS: dict = {}  # (version, shape, seed) -> pingpong_run's result: a figure and its data from one simulation

# Okabe-Ito, as the ring's timeline: distinct for colour-blind readers, and told apart in grey by hatching
_S, _PV, _SOFTMAX, _PASS, _WAIT, _COPY = "#0072B2", "#56B4E9", "#E69F00", "#D55E00", "0.45", "0.75"
_TURN = {1: "#009E73", 2: "#CC79A7"}  # each consumer warpgroup's turns


def _shape(shape) -> tuple:
    try:
        dims = tuple(int(v) for v in shape)
        ok = len(dims) == 5 and dims == tuple(shape) and min(dims) >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"shape must be (B, H, Sq, Sk, D), five whole numbers >= 1; got {shape!r}")
    b, h, sq, sk, d = dims
    if d % 16 or d > 128:
        raise ValueError(f"shape: D must be a multiple of 16 up to 128 (the Hopper steps' head dimensions); got "
                         f"{dims}")
    tiles, blocks = -(-sk // 64), b * h * -(-sq // 128)
    if tiles > MAX_TILES:
        raise ValueError(f"shape: Sk = {sk} is {tiles} K/V tiles of 64 keys; at most {MAX_TILES} (each costs the "
                         f"tracer about a second, and the figure its width); got {dims}")
    if blocks > MAX_BLOCKS:
        raise ValueError(f"shape: B x H x ceil(Sq / 128) = {blocks} blocks; at most {MAX_BLOCKS} (the figure draws "
                         f"block 0); got {dims}")
    return dims


def pingpong_run(shape=None, seed: int = 0, version: str = "ping_pong") -> dict:
    """Run ``attention.<version>`` (``ping_pong`` or ``warp_specialized``) on float16 inputs of ``shape`` (B, H, Sq,
    Sk, D; default ``SHAPE``) under the tracer and return block 0's `gpukernels._pplog.Schedule` as dicts: ``work``
    (per consumer warpgroup and K/V tile: the steps of S's and P V's wgmmas issued and found done, each warp's
    softmax), ``turns`` (step 11's named-barrier turns; none for step 10), ``handoffs``, ``copies`` (the producer's
    TMA copies), ``warps``; with ``tiles``, ``under_softmax`` (per warpgroup and tile, the other warpgroup's wgmmas
    issued while all 4 of its warps were in their softmax) and ``clock`` (step -> its rank on the figure's axis).
    Kept per process: the same arguments are simulated once."""
    import copy
    from dataclasses import asdict

    import gpukernels
    from gpukernels import attention

    from .. import _pplog
    from .hopper import _need_simulator

    if version not in VERSIONS:
        raise ValueError(f"version must be one of {list(VERSIONS)} (the steps with a producer and two consumer "
                         f"warpgroups); got {version!r}")
    dims = _shape(SHAPE if shape is None else shape)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0; got {seed!r}")
    _need_simulator("pingpong_timeline")
    _trace_module()
    key = (version, dims, int(seed))
    if key not in _RUNS:
        q, k, v = (x.astype(np.float16) for x in attention.make_inputs(dims, int(seed)))
        with gpukernels.trace(count_local=False) as t:
            attention.VERSIONS[version](q, k, v)
        sched = _pplog.schedule(t.async_events())
        if not sched.work or not sched.copies:
            raise RuntimeError(f"attention.{version} at {dims} recorded no consumer warpgroups fed by TMA: did it take "
                               "step 9's path (arrays a tensor map cannot describe)?")
        under = _pplog.under_softmax(sched)
        _RUNS[key] = {"version": version, "shape": dims, "tiles": 1 + max(w.tile for w in sched.work),
                      "warps": sched.warps, "work": [asdict(w) for w in sched.work],
                      "turns": [asdict(t) for t in sched.turns], "handoffs": sched.handoffs,
                      "copies": [asdict(c) for c in sched.copies],
                      "under_softmax": [{"warpgroup": wg, "tile": tile, "issues": issues}
                                        for (wg, tile), issues in sorted(under.items())],
                      "clock": _pplog.clock(sched)}
    return copy.deepcopy(_RUNS[key])


def pingpong_timeline(shape=None, seed: int = 0, version: str = "ping_pong"):
    """Block 0 of one simulated run of ``attention.ping_pong`` (or ``warp_specialized``, to compare) at ``shape``
    (B, H, Sq, Sk, D; default ``SHAPE``): the producer's TMA copies, and for each consumer warpgroup its turns at
    the tensor cores, its products S and P V per K/V tile and its warps' softmax, in the order the simulator ran
    them."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    run = pingpong_run(shape, seed, version)
    rank = run["clock"]  # x: the rank of each drawn event in the simulated order (an order, not a time)
    last = len(rank)
    x = rank.__getitem__
    turns = run["turns"]
    wgs = sorted(run["warps"])

    # the lanes, top to bottom: the producer's copies (Q, then each ring's stages), then per consumer warpgroup its
    # turns (step 11), its products and its softmax
    lanes: list = [("copy", "Q", 0)]
    stages = 1 + max(c["stage"] for c in run["copies"])
    lanes += [("copy", t, s) for t in ("K", "V") for s in range(stages)]
    for wg in wgs:
        lanes += ([("turns", wg, None)] if turns else []) + [("products", wg, None), ("softmax", wg, None)]
    at = {lane: i for i, lane in enumerate(lanes)}
    fig = _figure(14, 2.6 + 0.42 * len(lanes))
    pt = text_pt(fig)
    ax = fig.add_subplot()

    # each warpgroup's turns, shaded down the whole figure, and drawn in its lane: the wait at its barrier (dotted),
    # the turn from the barrier's completion to its last arrival on the other's barrier, the arrivals (triangles)
    for t in turns:
        wg, y = t["warpgroup"], at.get(("turns", t["warpgroup"], None))
        first = min(s for s, _ in t["asked"])
        start = t["granted"] if t["granted"] is not None else first
        end = max([s for s, _, _ in t["passed"]], default=start)
        ax.axvspan(x(start), x(end), color=_TURN[wg], alpha=0.13, lw=0, zorder=0)
        if x(start) > x(first):
            ax.plot([x(first), x(start)], [y + 0.5] * 2, color=_WAIT, lw=2, ls=":")
        ax.add_patch(_rect(x(start), y + 0.2, max(x(end) - x(start), 0.6), 0.6, _TURN[wg]))
        ax.plot([x(s) for s, _, _ in t["passed"]], [y + 0.5] * len(t["passed"]), "^", color=_PASS, ms=6,
                mec="black", mew=0.5)
        ax.text(x(start) + 0.6, y + 0.5, str(t["turn"]), ha="left", va="center", fontsize=pt)
    for step, wg, _, _ in run["handoffs"]:
        y = at[("turns", wg, None)]
        ax.plot([x(step)], [y + 0.5], "^", color=_PASS, ms=6, mec="black", mew=0.5)

    # the producer's copies: from issued to landed, in the lane of their tensor and stage
    for c in run["copies"]:
        y = at[("copy", c["tensor"], 0 if c["tensor"] == "Q" else c["stage"])]
        end = x(c["landed"]) if c["landed"] is not None else last
        ax.add_patch(_rect(x(c["issued"]), y + 0.2, max(end - x(c["issued"]), 0.6), 0.6, _COPY))
        ax.plot([x(c["issued"])], [y + 0.5], "v", color="black", ms=5)
        name = "Q" if c["tensor"] == "Q" else f"{c['tensor']}{c['tile']}"
        ax.text(x(c["issued"]) + 0.8, y + 0.5, name, ha="left", va="center", fontsize=pt)

    # the products, S above P V: from the first wgmma issued to the last wait that found one done; a tick per issue
    for w in run["work"]:
        y, t = at[("products", w["warpgroup"], None)], w["tile"]
        for issued, done, dy, colour, hatch, name in ((w["s_issued"], w["s_done"], 0.06, _S, "", f"S{t}"),
                                                      (w["pv_issued"], w["pv_done"], 0.5, _PV, "///", f"PV{t}")):
            if not issued:
                continue
            x0 = x(min(s for s, _ in issued))
            x1 = x(max(s for s, _ in done)) if done else last
            ax.add_patch(_rect(x0, y + dy, max(x1 - x0, 0.6), 0.44, colour, hatch=hatch))
            ax.plot([x(s) for s, _ in issued], [y + dy + 0.22] * len(issued), "|", color="black", ms=7)
            ax.text(x0 - 0.5, y + dy + 0.22, name, ha="right", va="center", fontsize=pt)
        # each warp's softmax, a thin bar per warp, and the tile's number
        y = at[("softmax", w["warpgroup"], None)]
        order = run["warps"][w["warpgroup"]]
        h = 0.8 / max(len(order), 1)
        for a, b, warp in w["softmax"]:
            ax.add_patch(_rect(x(a), y + 0.1 + h * order.index(warp), max(x(b) - x(a), 0.6), h, _SOFTMAX))
        if w["softmax"]:
            ax.text(min(x(a) for a, _, _ in w["softmax"]) - 0.5, y + 0.5, str(t), ha="right", va="center",
                    fontsize=pt)

    ticks = [("TMA: Q" if who == "Q" else f"TMA: {who}, stage {s}") if kind == "copy" else f"warpgroup {who}: {kind}"
             for kind, who, s in lanes]
    ax.set_yticks(np.arange(len(lanes)) + 0.5, ticks, fontsize=pt)
    ax.set_xlim(-3, last + 1)
    ax.set_ylim(len(lanes), 0)
    ax.tick_params(axis="x", labelsize=pt)
    ax.set_xlabel("the events in the order the simulator ran them (one step each: an order, not a time)", fontsize=pt)
    handles = [Line2D([], [], marker="v", ls="", color="black", label="producer issues a TMA copy"),
               Patch(facecolor=_COPY, edgecolor="black", label="copy in flight until it lands (K0: K's tile 0)")]
    if turns:
        handles += [Line2D([], [], color=_WAIT, lw=2, ls=":", label="waits at its named barrier for its turn"),
                    Patch(facecolor=_TURN[1], edgecolor="black", label="warpgroup 1's turn n (its column shaded)"),
                    Patch(facecolor=_TURN[2], edgecolor="black", label="warpgroup 2's turn n (its column shaded)"),
                    Line2D([], [], marker="^", ls="", color=_PASS, mec="black", mew=0.5,
                           label="a warp arrives at the other's barrier: your turn")]
    handles += [Patch(facecolor=_S, edgecolor="black", label="S(t) = Q K(t)^T: wgmmas issued until found done"),
                Patch(facecolor=_PV, edgecolor="black", hatch="///", label="O += P(t) V(t): the same"),
                Line2D([], [], marker="|", ls="", color="black", ms=7, label="a warp's wgmma issued"),
                Patch(facecolor=_SOFTMAX, edgecolor="black", label="softmax of tile t, one bar per warp")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=pt, frameon=False)
    fig.gpukernels_data.update(run)
    b, h, sq, sk, d = run["shape"]
    if turns:
        notice = ("the turns alternate, warpgroup 1, 2, 1, 2, ... (named barriers 1 and 2): while one warpgroup runs "
                  "its softmax of tile t, the other issues its products; and a warpgroup's softmax of tile t runs "
                  "under its own P V of tile t - 1")
    else:
        notice = ("no turns: both warpgroups issue their products and reach their softmax of a tile together, and "
                  "nothing orders one warpgroup's products against the other's softmax")
    _suptitle(fig, f"attention.{version} at {b} x {h} x {sq} x {sk} x {d}: block 0's warpgroups in the simulator "
                   f"({run['tiles']} K/V tiles)", notice)
    return fig
