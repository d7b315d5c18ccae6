"""Maps of who touches what, from the tracer: which thread writes which output (grid map), which inputs a
thread / warp / block reads (access map), loads per element (reuse), and what a shared tile holds in each
barrier interval (tile phases)."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

from ._common import CMAP, _figure, _naive_and_best, _suptitle, _trace_module, text_pt
from .traced import _GLOBAL, _READ, _SHARED, _WRITE, Traced, traced

reuse = _trace_module().reuse  # the tracer's definition: loads / elements


def _montage(counts: np.ndarray) -> np.ndarray:
    """A 2-D picture of an array of any rank: (..., H, W) planes side by side with a one-cell gap (NaN)."""
    if counts.ndim == 1:
        return counts[None, :].astype(float)
    if counts.ndim == 2:
        return counts.astype(float)
    h, w = counts.shape[-2:]
    planes = counts.reshape(-1, h, w).astype(float)
    out = np.full((h, len(planes) * (w + 1) - 1), np.nan)
    for i, p in enumerate(planes):
        out[:, i * (w + 1): i * (w + 1) + w] = p
    return out


def _montage_axes_label(shape: tuple, name: str) -> str:
    if len(shape) <= 2:
        return f"{name} {tuple(shape)}"
    planes = math.prod(shape[:-2])
    return (f"{name} {tuple(shape)}:\n{planes} planes of {shape[-2]} x {shape[-1]}, side by side" if planes > 1
            else f"{name} {tuple(shape)}: one plane of {shape[-2]} x {shape[-1]}")


def _wrap(ax, text: str, fontsize: float) -> str:
    """``text`` with each line wrapped to the width of ``ax`` (its subplot's share of the figure): a panel's title
    never runs into the next panel's."""
    import textwrap

    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72 * 1.1
    chars = max(12, int(width_pt / (0.6 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) if line else line for line in text.split("\n"))


def _image(ax, img, title, cmap=CMAP, norm=None, vmin=None, vmax=None):
    import matplotlib

    cm = matplotlib.colormaps[cmap].with_extremes(bad="0.85")  # NaN: gaps between planes, unread elements
    im = ax.imshow(img, cmap=cm, norm=norm, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="auto")
    ax.set_title(_wrap(ax, title, text_pt(ax.figure, 9.5)), fontsize=text_pt(ax.figure, 9.5), loc="left")
    ax.tick_params(labelsize=text_pt(ax.figure))
    ax.locator_params(nbins=4)  # tick labels of 9 points or more need room: a few of them
    if img.shape[0] <= 3:
        ax.set_yticks([])
    return im


# -- 1. grid map ---------------------------------------------------------------------------------------------


def _owners(tr: Traced):
    """For each output element: (launch, linear block, tid) of the thread that first wrote it (-1: none)."""
    name = tr.out_name
    shape = tr.array_shape(name)
    sel = np.flatnonzero(tr.select(array=name, kind=_WRITE, space=_GLOBAL))
    first_launch = int(tr.ev["launch"][sel].min()) if len(sel) else 0
    sel = sel[tr.ev["launch"][sel] == first_launch]
    n = math.prod(shape)
    block = np.full(n, -1, np.int64)
    tid = np.full(n, -1, np.int64)
    gx, gy, _ = tr.grid_dims(first_launch)
    lin = tr.ev["bx"][sel] + gx * (tr.ev["by"][sel] + gy * tr.ev["bz"][sel])
    # first writer wins: assign in reverse so the earliest row is the last assignment
    block[tr.ev["elem"][sel][::-1]] = lin[::-1]
    tid[tr.ev["elem"][sel][::-1]] = tr.ev["tid"][sel][::-1]
    return first_launch, block.reshape(shape), tid.reshape(shape)


def _plane(a: np.ndarray) -> np.ndarray:
    """The first 2-D plane of an array (a[0, 0, ..., :, :]); 1-D arrays become one row."""
    if a.ndim == 1:
        return a[None, :]
    while a.ndim > 2:
        a = a[0]
    return a


def grid_map(lesson: str = "matmul", versions=None, shape=None, zoom=(8, 8)) -> Figure:
    """Which block and which thread computes which output element, per version.

    Teaches: the launch configuration is a *mapping* from (block, thread) to output elements. Top row: every
    output element coloured by the block that writes it (block index in the middle). Bottom row: the top-left
    corner, each cell labelled with the thread index that writes it and shaded by warp -- naive matmul's warp
    runs *down a column* (threadIdx.x -> row), coalesced's along a row; a register-blocked thread owns a
    whole strip or tile. Measured from the tracer's record of the writes to the output.
    """
    versions = list(versions or _naive_and_best(lesson))
    n = len(versions)
    fig = _figure(min(2.7 * n + 0.6, 11.2), 7.6)
    axes = fig.subplots(2, n, squeeze=False, height_ratios=[1.25, 1])
    fs = text_pt(fig)
    panel_pt = (fig.get_figwidth() - 0.6) / n * 72 * 0.78  # an axes' width in points, roughly (less its labels)
    data = {}
    for col, version in enumerate(versions):
        tr = traced(lesson, version, shape)
        li, block, tid = _owners(tr)
        bplane, tplane = _montage(block), _plane(tid)  # every plane for the blocks, the first for threads
        bplane = np.where(np.isnan(bplane), -1, bplane).astype(np.int64)
        bdims, gdims = tr.block_dims(li), tr.grid_dims(li)
        nblocks = math.prod(gdims)
        # colour blocks with well-separated shades (neighbours differ in lightness too)
        shade = (np.arange(max(nblocks, 1)) * 0.618034) % 1.0
        img = np.where(bplane >= 0, shade[np.maximum(bplane, 0)], np.nan)
        ax = axes[0, col]
        _image(ax, img, f"{version}: {tr.launches[li][0]}\ngrid {gdims}, block {bdims}", cmap=CMAP, vmin=0, vmax=1)
        cell_pt = panel_pt / bplane.shape[1]  # one element's width (and, at most, its height) in points
        for b in np.unique(bplane[bplane >= 0]):
            ys, xs = np.nonzero(bplane == b)
            bx, by, bz = b % gdims[0], (b // gdims[0]) % gdims[1], b // (gdims[0] * gdims[1])
            label = f"{bx},{by}" if gdims[1] > 1 or gdims[2] > 1 else f"{bx}"
            # labelled where the label fits inside the block's region (else the title's grid says it)
            if (np.ptp(xs) + 1) * cell_pt >= 0.65 * fs * len(label) + 2 and (np.ptp(ys) + 1) * cell_pt >= 1.3 * fs:
                ax.text(xs.mean(), ys.mean(), label, ha="center", va="center", fontsize=fs,
                        color="white" if shade[b] < 0.55 else "black")
        if block.ndim > 2:
            ax.set_xlabel(_montage_axes_label(block.shape, tr.out_name), fontsize=fs)
        else:
            ax.set_xlabel(f"{tr.out_name}: column (of {bplane.shape[1]})", fontsize=fs)
            ax.set_ylabel(f"row (of {bplane.shape[0]})", fontsize=fs)
        # zoom: thread ids, shaded by warp -- as many columns as their labels fit
        def tlabel(t):
            x, y = t % bdims[0], (t // bdims[0]) % bdims[1]
            return f"{x},{y}" if bdims[1] > 1 else f"{x}"

        zr, zc = min(zoom[0], tplane.shape[0]), min(zoom[1], tplane.shape[1])
        while zc > 2 and panel_pt / zc < 0.65 * fs * max(len(tlabel(int(t))) for t in tplane[:zr, :zc].ravel()) + 2:
            zc -= 1
        zt = tplane[:zr, :zc]
        warp = np.where(zt >= 0, zt // 32, -1)
        zax = axes[1, col]
        bfirst = _plane(block)
        b0 = int(bfirst[bfirst >= 0].min()) if (bfirst >= 0).any() else 0
        w0 = np.argwhere((bfirst == b0) & (tplane >= 0) & (tplane < 32))
        span = (f"warp 0 of block {b0} writes {np.ptp(w0[:, 0]) + 1} x {np.ptp(w0[:, 1]) + 1} outputs"
                if len(w0) else "")
        _image(zax, np.where(warp >= 0, warp % 8, np.nan), f"top-left {zr} x {zc}: threadIdx (shade = warp)\n{span}",
               cmap=CMAP, vmin=0, vmax=9)
        for r in range(zr):
            for c in range(zc):
                t = int(zt[r, c])
                if t < 0:
                    continue
                zax.text(c, r, tlabel(t), ha="center", va="center", fontsize=fs,
                         color="white" if (warp[r, c] % 8) < 5 else "black")
        zax.set_xticks(range(zc))
        zax.set_yticks(range(zr))
        zax.tick_params(labelsize=fs)
        data[version] = {"launch": li, "block": block, "thread": tid, "grid": gdims, "block_dims": bdims,
                         "warp0_span": (int(np.ptp(w0[:, 0]) + 1), int(np.ptp(w0[:, 1]) + 1)) if len(w0) else None}
    spans = ", ".join(f"{v} {d['warp0_span'][0]} x {d['warp0_span'][1]}" for v, d in data.items() if d["warp0_span"])
    _suptitle(fig, f"{lesson} {'x'.join(map(str, tr.shape))}: who computes which output element (colour = block, "
                   f"labelled with blockIdx; zoom: threadIdx of the writer, shade = warp)",
              f"Notice the shape of one warp's outputs (rows x columns): {spans}")
    fig.gpukernels_data = {"shape": tr.shape, "versions": data}
    return fig


# -- 2. access maps and reuse ----------------------------------------------------------------------------------


def _who_mask(tr: Traced, who: str, index: int, block: int, launch: int = 0) -> tuple[np.ndarray, str]:
    gx, gy, _ = tr.grid_dims(launch)
    ev = tr.ev
    lin = ev["bx"] + gx * (ev["by"] + gy * ev["bz"])
    mask = (ev["launch"] == launch) & (lin == block)
    if who == "thread":
        mask &= ev["tid"] == index
        bd = tr.block_dims(launch)
        desc = f"thread {(index % bd[0], (index // bd[0]) % bd[1])[:2 if bd[1] > 1 else 1]} of block {block}"
    elif who == "warp":
        mask &= (ev["tid"] >> 5) == index
        desc = f"warp {index} of block {block}"
    elif who == "block":
        desc = f"block {block}"
    else:
        raise ValueError(f"who must be 'thread', 'warp' or 'block'; got {who!r}")
    return mask, desc


def access_map(lesson: str = "matmul", versions=None, who: str = "warp", index: int = 0, block: int = 0,
               shape=None) -> Figure:
    """Which elements of each input one thread, warp or block reads from global memory, per version.

    Teaches: the *footprint* of a unit of work. Naive matmul's warp 0 reads 32 full rows of A (one per lane)
    and a single column of B; after coalescing it reads one row of A and 32 neighbouring columns of B; a tiled
    block reads a strip of A and a strip of B once, however many outputs it computes. Shade = how many times
    the selection loaded the element (white: never).
    """
    versions = list(versions or _naive_and_best(lesson))
    trs = [traced(lesson, v, shape) for v in versions]
    names = trs[0].input_names
    fig = _figure(3.6 * len(names) + 0.8, 2.5 * len(versions) + 0.8)
    axes = fig.subplots(len(versions), len(names), squeeze=False)
    data = {}
    for row, (version, tr) in enumerate(zip(versions, trs)):
        mask, desc = _who_mask(tr, who, index, block)
        data[version] = {}
        for col, name in enumerate(names):
            if name not in [a["name"] for a in tr.arrays]:
                axes[row, col].set_axis_off()
                continue
            c = tr.counts(name, mask)
            img = _montage(c)
            img = np.where(img == 0, np.nan, img)  # not read: grey
            ax = axes[row, col]
            distinct, loads = int((c > 0).sum()), int(c.sum())
            top = int(c.max()) if distinct else 1
            im = _image(ax, img, f"{version}, {desc}:\nreads {distinct} of {c.size} elements of {name} ({loads} loads)",
                        vmin=1, vmax=max(top, 2))
            if distinct and min(img.shape) >= 2:  # outline what was read: a one-element strip stays visible
                ax.contour(np.nan_to_num(_montage(c > 0)), levels=[0.5], colors="black", linewidths=0.9)
            ax.set_xlabel(_montage_axes_label(c.shape, name), fontsize=text_pt(fig))
            if top > 1:
                cb = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.01)
                cb.ax.tick_params(labelsize=text_pt(fig))
                cb.set_label("loads", fontsize=text_pt(fig))
            data[version][name] = c
    footprint = ", ".join(f"{v} {sum(int((c > 0).sum()) for c in d.values())}" for v, d in data.items())
    _suptitle(fig, f"{lesson} {'x'.join(map(str, trs[0].shape))}: the global elements one {who} reads (outlined; "
                   f"shade = loads, grey = not read)",
              f"Notice the footprint (distinct elements read): {footprint}")
    _grey_background(fig)
    fig.gpukernels_data = {"who": who, "index": index, "block": block, "counts": data}
    return fig


def _grey_background(fig):
    for ax in fig.axes:
        if ax.images:
            ax.set_facecolor("0.93")


def reuse_heatmap(lesson: str = "matmul", versions=None, shape=None) -> Figure:
    """Global loads per input element over the whole launch, per version: the reuse factor made visible.

    Teaches: naive matmul loads every element of A N times and of B M times; tiling divides that by the
    tile width (N / 16), register blocking by the block tile (N / 64, N / 128). The same logarithmic shade
    scale is used for every version of an input, so a lighter map means more reuse from fast memory.
    """
    import matplotlib.colors as mcolors

    versions = list(versions or _naive_and_best(lesson))
    trs = [traced(lesson, v, shape) for v in versions]
    names = trs[0].input_names
    counts = {v: {n: tr.loads(n) for n in names if n in [a["name"] for a in tr.arrays]}
              for v, tr in zip(versions, trs)}
    fig = _figure(3.6 * len(names) + 0.8, 2.4 * len(versions) + 0.9)
    axes = fig.subplots(len(versions), len(names), squeeze=False)
    for col, name in enumerate(names):
        vmax = max(int(counts[v][name].max()) for v in versions if name in counts[v])
        norm = mcolors.LogNorm(vmin=1, vmax=max(vmax, 2))
        for row, version in enumerate(versions):
            ax = axes[row, col]
            if name not in counts[version]:
                ax.set_axis_off()
                continue
            c = counts[version][name]
            img = _montage(np.maximum(c, 0))
            img = np.where(img == 0, np.nan, img)
            mean = reuse(c.sum(), c.size)
            im = _image(ax, img, f"{version}: {name} loaded {mean:.3g} times per element "
                                 f"(max {int(c.max())})", norm=norm)
            ax.set_xlabel(_montage_axes_label(c.shape, name), fontsize=text_pt(fig))
            cb = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.01)
            cb.ax.tick_params(labelsize=text_pt(fig))
            cb.set_label("loads per element", fontsize=text_pt(fig))
    first, last = versions[0], versions[-1]
    n0 = names[0]
    r0 = reuse(counts[first][n0].sum(), counts[first][n0].size)
    r1 = reuse(counts[last][n0].sum(), counts[last][n0].size) if n0 in counts[last] else float("nan")
    _suptitle(fig, f"{lesson} {'x'.join(map(str, trs[0].shape))}: global loads per input element",
              f"Notice: {first} reads each element of {n0} {r0:.3g} times, {last} {r1:.3g} times")
    _grey_background(fig)
    fig.gpukernels_data = {"counts": counts}
    return fig


# -- 3. shared-memory tile phases ------------------------------------------------------------------------------


def staged_sources(tr: Traced, block: int, launch: int = 0) -> list[dict]:
    """For each barrier interval in which ``block`` writes shared memory: which global elements (per array)
    the shared tiles receive, and how many shared cells get a constant (zero padding, out of range).

    A shared write's source is the thread's access just before it in program order when that access is a
    global read -- the pattern ``tile[...] = x[...] if inside else 0`` of every lesson kernel."""
    ev = tr.ev
    gx, gy, _ = tr.grid_dims(launch)
    lin = ev["bx"] + gx * (ev["by"] + gy * ev["bz"])
    rows = np.flatnonzero((ev["launch"] == launch) & (lin == block))
    space = np.array([a["space"] for a in tr.arrays])
    r_tid, r_order = ev["tid"][rows], ev["order"][rows]
    lookup = {(int(t), int(o)): int(r) for t, o, r in zip(r_tid, r_order, rows)}
    phases: dict[int, dict] = {}
    for r in rows[(space[ev["aid"][rows]] == _SHARED) & (ev["kind"][rows] == _WRITE)]:
        ph = phases.setdefault(int(ev["interval"][r]), {"sources": {}, "padding": 0, "writes": 0,
                                                         "shared": set()})
        ph["writes"] += 1
        ph["shared"].add(tr.arrays[int(ev["aid"][r])]["name"])
        prev = lookup.get((int(ev["tid"][r]), int(ev["order"][r]) - 1))
        if prev is not None and space[ev["aid"][prev]] == _GLOBAL and ev["kind"][prev] == _READ:
            name = tr.arrays[int(ev["aid"][prev])]["name"]
            ph["sources"].setdefault(name, set()).add(int(ev["elem"][prev]))
        else:
            ph["padding"] += 1
    return [{"interval": k, **v} for k, v in sorted(phases.items())]


def tile_phases(lesson: str = "matmul", version: str = "tiled", block: int | None = None, shape=None,
                max_phases: int = 4) -> Figure:
    """What the shared-memory tiles hold in each barrier interval, for one block, as small multiples.

    Teaches: a tiled kernel walks its inputs phase by phase. In each interval between two ``syncthreads``
    the block stages one tile of each input (dark), computes from it, and moves on; light cells were staged
    in earlier phases, the hatched box is the block's own output region -- it never changes. For fused CBR
    the staged input tile is the output tile plus a halo of R - 1 rows and S - 1 columns, and cells outside
    the image are staged as zeros (padding).
    """
    import matplotlib.patches as mpatches

    tr = traced(lesson, version, shape)
    gdims = tr.grid_dims(0)
    if block is None:  # an interior block when there is one: its tiles are not clipped by the edges
        bx, by = min(1, gdims[0] - 1), min(1, gdims[1] - 1)
        block = bx + gdims[0] * by
    phases = [p for p in staged_sources(tr, block) if p["sources"] or p["padding"]][:max_phases]
    names = [n for n in tr.input_names if any(n in p["sources"] for p in phases)]  # inputs that are staged
    owner_launch, owner_block, _ = _owners(tr)
    out_mask = owner_block == block
    cols = names + [tr.out_name]
    fig = _figure(2.5 * len(cols) + 0.5, 2.1 * len(phases) + 0.8)
    axes = fig.subplots(len(phases), len(cols), squeeze=False)
    seen: dict[str, set] = {n: set() for n in names}
    data = []
    for row, ph in enumerate(phases):
        for col, name in enumerate(cols):
            ax = axes[row, col]
            shape_ = tr.array_shape(name)
            img = np.zeros(math.prod(shape_))
            if name in names:
                now = ph["sources"].get(name, set())
                earlier = seen[name] - now
                img[list(earlier)] = 1
                img[list(now)] = 2
                title = f"phase {row}: {name}, {len(now)} elements staged"
                if name == names[0]:
                    title += f"\n(+{ph['padding']} cells set to 0)" if ph["padding"] else "\n"
            else:
                img[out_mask.ravel()] = 1
                title = f"{name}: the block's {int(out_mask.sum())} outputs\n"
            pic = _montage(img.reshape(shape_))
            _image(ax, pic, title, cmap="Greys", vmin=0, vmax=2.4)
            if name == tr.out_name:
                ys, xs = np.nonzero(_montage(out_mask.astype(float)) > 0)
                if len(ys):
                    ax.add_patch(mpatches.Rectangle((xs.min() - 0.5, ys.min() - 0.5), xs.max() - xs.min() + 1,
                                                    ys.max() - ys.min() + 1, fill=False, hatch="///", lw=1.5,
                                                    edgecolor="black"))
            ax.set_xlabel(_montage_axes_label(shape_, name), fontsize=text_pt(fig))
        for name in names:
            seen[name] |= ph["sources"].get(name, set())
        data.append({"interval": ph["interval"], "sources": ph["sources"], "padding": ph["padding"],
                     "shared": sorted(ph["shared"])})
    g = (block % gdims[0], (block // gdims[0]) % gdims[1])
    _suptitle(fig, f"{lesson}.{version} {'x'.join(map(str, tr.shape))}, block {g}: what the shared tiles hold in "
                   f"each barrier interval (dark: staged this phase, grey: earlier phases; hatched: the block's "
                   f"outputs)",
              f"Notice: {len(data)} phases, each staging a new slice that all the block's outputs share")
    fig.gpukernels_data = {"block": block, "phases": data, "out_block_mask": out_mask}
    return fig

