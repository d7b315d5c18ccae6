"""Figures of the tensor-core lesson, drawn from the layout code the kernels and the simulator use -- never by hand.

* ``mma_fragments``: which lane of the warp holds which element of A, B and C of one ``mma.sync`` (the PTX ISA's
  fragment tables as `gpukernels._mma` writes them: ``a_frag_coords``, ``b_frag_coords``, ``c_frag_coords``, and
  their TF32 twins). Each cell says the lane (``T5``) and the element of its fragment (``a3``); the colour is the
  lane's group (lane / 4), which owns a row of A and C and a column of B.
* ``ldmatrix_banks``: the eight 16-byte rows of one ``ldmatrix`` pass -- the rows lanes 0-7 point at -- placed in
  the 8 bank groups of a 128-byte line, in step 2's row-major tiles and in step 3's swizzled ones. Rows that share
  a bank group are served one pass after another (a conflict); the swizzle spreads them over all eight.
"""

from __future__ import annotations

import numpy as np

from ._common import _figure, _rect, _suptitle

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
