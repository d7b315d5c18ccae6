"""Figures of the tensor-core lesson, drawn from the layout code the kernels and the simulator use -- never by hand.

* ``mma_fragments``: which lane of the warp holds which element of A, B and C of one ``mma.sync`` (the PTX ISA's
  fragment tables as `gpukernels._mma` writes them: ``a_frag_coords``, ``b_frag_coords``, ``c_frag_coords``, and
  their TF32 twins). Each cell says the lane (``T5``) and the element of its fragment (``a3``); the colour is the
  lane's group (lane / 4), which owns a row of A and C and a column of B.
* ``ldmatrix_banks``: the eight 16-byte rows of one ``ldmatrix`` pass -- the rows lanes 0-7 point at -- placed in
  the 8 bank groups of a 128-byte line, in step 2's row-major tiles and in step 3's swizzled ones. Rows that share
  a bank group are served one pass after another (a conflict); the swizzle spreads them over all eight.
* ``tf32_split``: the bits of one float32 x, of big = tf32(x) and of small = tf32(x - big) (3xTF32's split, step 7),
  computed by the simulator's ``cvt.rna.tf32.f32`` (`gpukernels._mma._tf32`): big keeps the top 11 significant bits,
  small the next 11, and the 2 bits below are what the split loses.
"""

from __future__ import annotations

import numpy as np

from ._common import _figure, _rect, _suptitle, text_pt

#: The two mma shapes of the lesson: (label, A's shape, B's shape, elements per lane of A, of B)
SHAPES = {"m16n8k16": ("m16n8k16, float16 in", (16, 16), (16, 8), 8, 4),
          "m16n8k8": ("m16n8k8, TF32 in", (16, 8), (8, 8), 4, 2)}


def fragment_owners(shape: str = "m16n8k16") -> dict:
    """{"A": (lane, element) arrays, "B": ..., "C": ...}: who holds each element, from `gpukernels._mma`'s tables.
    Raises ValueError when an element is held by no lane or by two (a table that is not a layout)."""
    from gpukernels import _mma

    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {sorted(SHAPES)}; got {shape!r}")
    _, a_shape, b_shape, na, nb = SHAPES[shape]
    coords = {"A": (_mma.a_frag_coords if shape == "m16n8k16" else _mma.a_tf32_coords, a_shape, na),
              "B": (_mma.b_frag_coords if shape == "m16n8k16" else _mma.b_tf32_coords, b_shape, nb),
              "C": (_mma.c_frag_coords, (16, 8), 4)}
    out = {}
    for name, (where, dims, count) in coords.items():
        lane = np.full(dims, -1)
        elem = np.full(dims, -1)
        for ln in range(32):
            for i in range(count):
                r, c = where(ln, i)
                if lane[r, c] != -1:
                    raise ValueError(f"{shape} {name}[{r}, {c}] is held by lanes {lane[r, c]} and {ln}")
                lane[r, c], elem[r, c] = ln, i
        if (lane < 0).any():
            raise ValueError(f"{shape}: {int((lane < 0).sum())} element(s) of {name} are held by no lane")
        out[name] = (lane, elem)
    return out


def mma_fragments(shape: str = "m16n8k16"):
    """A, B and C of one warp's ``mma.sync``: each cell's lane and fragment element, coloured by lane group."""
    import matplotlib

    owners = fragment_owners(shape)
    label = SHAPES[shape][0]
    cmap = matplotlib.colormaps["tab10"]
    # A (16 columns of K) on top, B and C (8 columns of N each) side by side below it: 16 cells wide, so that at the
    # width a page shows it (about 1000 px) every label is at least 10 px tall
    cell = 0.55
    fig = _figure(1.0 + cell * 16, cell * 32 + 2.4)
    grid = fig.add_gridspec(2, 2)
    axes = [fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])]
    for ax, name in zip(axes, ("A", "B", "C")):
        lane, elem = owners[name]
        rows, cols = lane.shape
        for r in range(rows):
            for c in range(cols):
                ax.add_patch(_rect(c, r, 1, 1, cmap(lane[r, c] // 4 % 10)))
                ax.text(c + 0.5, r + 0.5, f"T{lane[r, c]}\n{name.lower()}{elem[r, c]}", ha="center", va="center",
                        fontsize=8.5, linespacing=0.95)
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_aspect("equal")
        ax.set_xticks(np.arange(cols) + 0.5, [str(c) for c in range(cols)], fontsize=9)
        ax.set_yticks(np.arange(rows) + 0.5, [str(r) for r in range(rows)], fontsize=9)
        what = {"A": "A (row-major: rows of M, columns of K)", "B": "B (rows of K, columns of N)",
                "C": "C and D (float32)"}[name]
        ax.set_title(what, fontsize=11)
        fig.gpukernels_data[name] = {"lane": lane.tolist(), "element": elem.tolist()}
    _suptitle(fig, f"One warp's mma.sync {label}: which lane (T0-T31) holds which element",
              "colour: the lane's group, lane / 4 -- a row of A and C, a column of B; from gpukernels._mma's tables")
    return fig


def _slots(layout, elem_bytes: int, rows, col: int) -> list[int]:
    """The 16-byte slot (of the 8 in a 128-byte line: a group of 4 banks) where each row's chunk at ``col`` starts."""
    f = getattr(layout, "py_func", None) or getattr(layout, "fn", None) or layout
    return [f(r, col) * elem_bytes // 16 % 8 for r in rows]


def ldmatrix_phases() -> dict:
    """For steps 2 (row-major) and 3 (swizzled): the bank-group slot of each row of one ldmatrix pass (8 rows at
    one 16-byte chunk), for the A and the B tile, and the passes it takes (the most rows in one slot)."""
    from gpukernels.tensor_core import k02_ldmatrix, k03_swizzled

    cases = {("A", "ldmatrix"): k02_ldmatrix.a_at, ("A", "swizzled"): k03_swizzled.swizzled_a,
             ("B", "ldmatrix"): k02_ldmatrix.b_at, ("B", "swizzled"): k03_swizzled.swizzled_b}
    out = {}
    for (tile, step), layout in cases.items():
        slots = _slots(layout, 2, range(8), 0)
        out[(tile, step)] = {"slots": slots, "passes": max(slots.count(s) for s in set(slots))}
    return out


def ldmatrix_banks():
    """Step 2's and step 3's shared tiles: where the 8 rows of one ldmatrix pass fall in a 128-byte line."""
    import matplotlib

    phases = ldmatrix_phases()
    cmap = matplotlib.colormaps["tab10"]
    fig = _figure(12, 5.2)
    axes = fig.subplots(2, 2)
    for i, tile in enumerate(("A", "B")):
        for j, step in enumerate(("ldmatrix", "swizzled")):
            ax = axes[i, j]
            p = phases[(tile, step)]
            depth = {}
            for row, slot in enumerate(p["slots"]):
                d = depth.get(slot, 0)
                depth[slot] = d + 1
                ax.add_patch(_rect(slot, d, 1, 1, cmap(row)))
                ax.text(slot + 0.5, d + 0.5, f"row {row}", ha="center", va="center", fontsize=9)
            ax.set_xlim(0, 8)
            ax.set_ylim(8, 0)
            ax.set_xticks(np.arange(8) + 0.5, [f"banks\n{4 * s}-{4 * s + 3}" for s in range(8)], fontsize=8)
            ax.set_yticks(np.arange(8) + 0.5, [f"pass {k + 1}" for k in range(8)], fontsize=8)
            ax.set_title(f"{tile} tile, step {'2 (row-major)' if step == 'ldmatrix' else '3 (swizzled)'}: "
                         f"{p['passes']} pass{'es' if p['passes'] > 1 else ''}", fontsize=10)
            fig.gpukernels_data[f"{tile}-{step}"] = p
    _suptitle(fig, "One ldmatrix pass reads 8 rows of 16 bytes: in distinct bank groups, one pass; in one, eight",
              "rows 0-7 of the tile at its first 16-byte chunk, placed by the kernels' own layout functions")
    return fig


def tf32_parts(x=np.float32(1 / 3)) -> dict:
    """3xTF32's split of one float32 ``x``: big = tf32(x), small = tf32(x - big) (`gpukernels._mma._tf32`, the
    simulator's cvt.rna.tf32.f32) and rest = x - big - small, exact; and for each, its significand bits in the columns
    of x's (weight 2^(e - p) in column p + 1, e the exponent of x's leading bit; column 0 is one place above it, where
    rounding big up can carry), with the sign. ValueError for 0, inf and NaN (no significand to split)."""
    from gpukernels import _mma

    x = np.float32(x)
    if not np.isfinite(x) or x == 0:
        raise ValueError(f"x must be a finite, nonzero float32 (it has a significand to split); got {x}")
    big = _mma._tf32(x)
    small = _mma._tf32(np.float32(x - big))  # x - big is exact in float32
    rest = float(x) - float(big) - float(small)
    e = int(np.floor(np.log2(abs(float(x)))))

    def bits(v: float) -> list[int]:
        scaled = abs(v) * 2.0 ** (23 - e)  # x's 24 significand bits as an integer (its leading bit 2^23)
        n = int(round(scaled))
        if n != scaled:
            raise ValueError(f"{v!r} has bits below x's last place")
        return [(n >> (24 - p)) & 1 for p in range(25)]  # column 0: 2^24, one above x's leading bit

    return {"x": float(x), "big": float(big), "small": float(small), "rest": rest, "exponent": e,
            "bits": {name: bits(v) for name, v in (("x", float(x)), ("big", float(big)), ("small", float(small)),
                                                   ("rest", rest))},
            "signs": {name: "-" if v < 0 else "+" for name, v in (("x", float(x)), ("big", float(big)),
                                                                   ("small", float(small)), ("rest", rest))}}


def tf32_split(x=np.float32(1 / 3)):
    """The bits of x, big = tf32(x) and small = tf32(x - big), lined up by weight: 3xTF32's split of one float32."""
    parts = tf32_parts(x)
    colours = {"x": "#dddddd", "big": "#9ecae1", "small": "#fdae6b", "rest": "#bbbbbb"}
    labels = {"x": "x (float32)", "big": "big = tf32(x)", "small": "small = tf32(x - big)",
              "rest": "x - big - small (lost)"}
    fig = _figure(11, 3.8)
    ax = fig.add_subplot()
    pt = text_pt(fig)
    for row, name in enumerate(("x", "big", "small", "rest")):
        bits = parts["bits"][name]
        ones = [p for p, b in enumerate(bits) if b]
        lead = ones[0] if ones else None
        for p, b in enumerate(bits):
            # a part's significant bits (from its leading 1, 24 for x, 11 for a TF32 part) in its colour
            span = 24 if name in ("x", "rest") else 11
            inside = lead is not None and lead <= p < lead + span
            ax.add_patch(_rect(p, row, 1, 1, colours[name] if inside else "white"))
            ax.text(p + 0.5, row + 0.5, str(b), ha="center", va="center", fontsize=pt)
        value = parts[name]
        ax.text(-0.3, row + 0.5, f"{labels[name]}  {parts['signs'][name]}", ha="right", va="center", fontsize=pt)
        ax.text(25.3, row + 0.5, f"{value:+.9e}", ha="left", va="center", fontsize=pt)
    ax.set_xlim(-9.5, 33.5)
    ax.set_ylim(4.15, -0.9)
    ax.axis("off")
    e = parts["exponent"]
    for p in (1, 12, 23):
        ax.text(p + 0.5, -0.45, f"2^{e - p + 1}", ha="center", va="center", fontsize=pt)
    fig.gpukernels_data.update(parts)
    _suptitle(fig, f"3xTF32's split of x = {parts['x']:.9g}: big keeps 11 significant bits, small the next 11",
              f"each row: a magnitude's bits by weight (x's leading bit is 2^{e}), coloured where the part holds "
              "them; what big and small cannot hold (x's 24 bits against their 22, and small's rounding) is what "
              "3xTF32 leaves out -- computed by the simulator's cvt.rna.tf32.f32")
    return fig
