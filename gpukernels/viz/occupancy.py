"""Occupancy figures, from the compiler (``gpukernels.resources``): resident warps per SM and the budget that
binds, for the launch configuration each launcher really makes."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .. import resources as _res
from ._common import LIMIT_MARKERS, MARKERS, _figure, _not_available, _pct, _shades, _suptitle, text_pt

# ----------------------------------------------------------------------------------------------------------
# 5. Occupancy (from the compiler: gpukernels.resources)
# ----------------------------------------------------------------------------------------------------------


def _row_label(row) -> str:
    """The version's name, plus the kernel's when the version makes several launches."""
    return row.version if _single_launch(row) else f"{row.version}: {row.kernel}"


_LAUNCH_COUNTS: dict[tuple[str, str], int] = {}


def _single_launch(row) -> bool:
    return _LAUNCH_COUNTS.get((row.lesson, row.version), 1) == 1


def _resource_rows(lesson: str | None, arch: str, shape_key: str = "demo_gpu"):
    rows = _res.report([lesson] if lesson else None, arch, shape_key, what="the occupancy figure")
    for r in rows:
        key = (r.lesson, r.version)
        _LAUNCH_COUNTS[key] = max(_LAUNCH_COUNTS.get(key, 0), r.index + 1)
    return rows



def occupancy_bars(lesson: str | None = None, arch: str = "sm_90", shape_key: str = "demo_gpu") -> Figure:
    """Resident warps per SM for every kernel of every version, and which budget stops the next block.

    Teaches: occupancy is the *minimum* over four budgets (threads, blocks, registers, shared memory). The bar
    is what fits; each marker is what one budget alone would allow (budgets allowing more than the SM's warp
    slots are not drawn), and the filled marker at the bar's end is the one that binds. Register blocking
    (regblock_2d) buys arithmetic intensity with registers, and pays in resident warps.
    """
    a = _res.get_arch(arch)
    try:
        rows = _resource_rows(lesson, a.name, shape_key)
    except _res.ToolchainMissing as err:
        return _not_available("occupancy_bars", str(err))
    labels = [(f"{r.lesson}." if lesson is None else "") + _row_label(r) for r in rows]
    n = len(rows)
    fig = _figure(10, 0.42 * n + 1.6)
    fs = text_pt(fig)
    ax = fig.add_subplot()
    cap = a.max_warps_per_sm
    ys = np.arange(n)[::-1]
    data = []
    for y, r in zip(ys, rows):
        occ = r.occupancy
        ax.barh(y, occ.warps_per_sm, color="0.8", edgecolor="0.2", height=0.62, zorder=2)
        for name, blocks in occ.limits.items():
            w = blocks * occ.warps_per_block
            if w > cap and name not in occ.binding:
                continue
            ax.plot(min(w, cap), y, LIMIT_MARKERS[name], color="black" if name in occ.binding else "white",
                    markeredgecolor="black", markersize=7.5, zorder=3, clip_on=False)
        ax.text(cap * 1.03, y, f"{_pct(occ.occupancy):>5}  {', '.join(occ.binding)}: {r.resources.registers} regs, "
                f"{r.resources.shared_bytes + r.dynamic_shared} B smem, {r.threads_per_block} threads",
                va="center", fontsize=fs, family="monospace")
        data.append({"lesson": r.lesson, "version": r.version, "kernel": r.kernel,
                     "warps_per_sm": occ.warps_per_sm, "blocks_per_sm": occ.blocks_per_sm,
                     "limits_warps": {k: v * occ.warps_per_block for k, v in occ.limits.items()},
                     "binding": list(occ.binding), "occupancy": occ.occupancy})
    ax.set_yticks(ys, labels, fontsize=fs)
    ax.set_xlim(0, cap)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xticks(list(range(0, cap + 1, 8)))
    ax.tick_params(labelsize=fs)
    ax.set_xlabel(f"resident warps per SM (at most {cap} on {a.name})", fontsize=fs)
    handles = [ax.plot([], [], m, color="white", markeredgecolor="black", markersize=7.5, ls="")[0]
               for m in LIMIT_MARKERS.values()]
    handles.append(ax.plot([], [], "s", color="black", markersize=7.5, ls="")[0])
    fig.legend(handles, [f"{k} allow" for k in LIMIT_MARKERS] + ["filled: binds"], fontsize=fs,
               loc="outside lower center", ncol=6, frameon=False)
    worst = min(rows, key=lambda r: r.occupancy.occupancy)
    where = f"{worst.lesson}.{worst.version}" if lesson is None else worst.version
    _suptitle(fig, f"{'All lessons' if lesson is None else lesson} on {a.name} ({a.gpu}): {where} keeps only "
                   f"{worst.occupancy.warps_per_sm} of {cap} warps resident -- limited by "
                   f"{' and '.join(worst.occupancy.binding)}")
    fig.gpukernels_data = {"arch": a.name, "rows": data}
    return fig


def occupancy_vs_block_size(lesson: str | None = None, arch: str = "sm_90", shape_key: str = "demo_gpu") -> Figure:
    """Occupancy of each kernel if it were launched with other block sizes (same registers per thread and
    shared memory per block), with the block size the launcher really uses ringed.

    Teaches: occupancy is a staircase, not a smooth curve -- whole blocks fit or don't, so a block size that
    doesn't divide the SM's warp slots (or the register file) leaves slots empty; few registers let most block
    sizes reach 100 %, many registers cap it whatever the block size, and past some size the block does not
    fit at all.
    """
    a = _res.get_arch(arch)
    try:
        rows = _resource_rows(lesson, a.name, shape_key)
    except _res.ToolchainMissing as err:
        return _not_available("occupancy_vs_block_size", str(err))
    sizes = list(range(32, 1025, 32))
    # Kernels with the same registers, shared memory and barriers have the same curve: draw it once.
    groups: dict[tuple, list] = {}
    for r in rows:
        key = (r.resources.registers, r.resources.shared_bytes + r.dynamic_shared, r.resources.barriers)
        groups.setdefault(key, []).append(r)
    import textwrap

    fig = _figure(9, 4.8 + 0.16 * len(groups))
    fs = text_pt(fig)
    legend_chars = int((fig.get_figwidth() / 2 - 0.6) * 72 / (0.6 * fs))
    ax = fig.add_subplot()
    data = []
    colours = _shades(len(groups))
    too_big: dict[int, list[int]] = {}  # block size from which a curve's block does not fit -> their registers
    for i, ((regs, smem, bars), rs) in enumerate(groups.items()):
        sweep = _res.occupancy_sweep(a, regs, smem, bars, sizes)
        ys = [100 * o.occupancy for o in sweep]
        names = ", ".join((f"{r.lesson}." if lesson is None else "") + _row_label(r) for r in rs)
        label = textwrap.fill(f"{names} ({regs} regs, {smem} B smem)", legend_chars)  # two columns of the width
        ax.plot(sizes, ys, marker=MARKERS[i % len(MARKERS)], markersize=4.5, lw=1.4, ls=["-", "--", ":", "-."][i % 4],
                color=colours[i], label=label)
        for r in rs:
            ax.plot([r.threads_per_block], [100 * r.occupancy.occupancy], "o", markersize=14,
                    markerfacecolor="none", markeredgecolor="black", markeredgewidth=1.6, zorder=4)
            data.append({"version": r.version, "kernel": r.kernel, "registers": regs, "shared_bytes": smem,
                         "block_sizes": sizes, "occupancy": ys, "launched": r.threads_per_block})
        zero = next((s for s, o in zip(sizes, sweep) if o.blocks_per_sm == 0), None)
        if zero is not None:
            too_big.setdefault(zero, []).append(regs)
    # where a block stops fitting: a mark on the axis, and one sentence for all of them under the title (notes
    # beside the curves landed on each other: several curves stop at the same block size)
    for zero in too_big:
        ax.plot([zero], [0], "X", color="black", markersize=9, zorder=5, clip_on=False)
    fits = "; ".join(f"from {zero} threads at {', '.join(map(str, sorted(set(regs))))} registers per thread"
                     for zero, regs in sorted(too_big.items()))
    ax.set_xlabel("threads per block (rings: the launcher's choice)", fontsize=fs)
    ax.set_ylabel("occupancy (% of the SM's warp slots)", fontsize=fs)
    ax.tick_params(labelsize=fs)
    ax.set_xticks([32, 128, 256, 384, 512, 640, 768, 896, 1024])
    ax.set_ylim(-3, 105)
    ax.grid(True, color="0.9")
    fig.legend(fontsize=fs, loc="outside lower center", ncol=2, frameon=False)
    _suptitle(fig, f"{lesson or 'All lessons'} on {a.name}: occupancy vs block size is a staircase; many registers "
                   "cap it at any size",
              f"X: the block no longer fits ({a.regs_per_block // 1024}K registers per block) -- {fits}"
              if fits else "")
    fig.gpukernels_data = {"arch": a.name, "rows": data}
    return fig

