"""Warp diagrams of the memory system, from the tracer: one warp access's lanes -> 32-byte sectors (global)
and lanes -> banks (shared), measured with the tracer's definitions (``gpukernels.trace.sector_counts``,
``coalescing_efficiency``, ``conflict_degree``) so that a figure and the table under it agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ._common import ROOT, _figure, _naive_and_best, _rect, _suptitle, _trace_module, text_pt
from .traced import _GLOBAL, _READ, _SHARED, _WRITE, Traced, traced

# The module gpukernels.trace (the package attribute of that name is its context manager): its definitions
# of sectors, coalescing efficiency and conflict degree are the ones every figure and table quotes.
tracer = _trace_module()

# -- 4. warp diagrams: sectors and banks ------------------------------------------------------------------------


def _warp_access(tr: Traced, space: int, array: str | None, kind: int | None, block: int, warp: int,
                 pick: str = "worst"):
    """One warp access: rows of one (line, occurrence) of ``warp`` in ``block`` of launch 0 touching
    ``array`` with ``kind``. Without ``array``: the access that touches the most sectors (global) or has the
    highest conflict degree (shared). Returns (rows, array name, kind, location)."""
    ev = tr.ev
    gx, gy, _ = tr.grid_dims(0)
    lin = ev["bx"] + gx * (ev["by"] + gy * ev["bz"])
    sp = np.array([a["space"] for a in tr.arrays])
    mask = (ev["launch"] == 0) & (lin == block) & ((ev["tid"] >> 5) == warp) & (sp[ev["aid"]] == space)
    if array is not None:
        mask &= tr.select(array=array)
    if kind is not None:
        mask &= ev["kind"] == kind
    rows = np.flatnonzero(mask)
    if not len(rows):
        raise ValueError(f"{tr.lesson}.{tr.version}: warp {warp} of block {block} makes no such access")
    groups: dict = {}
    for r in rows:
        groups.setdefault((int(ev["aid"][r]), int(ev["pc"][r]), int(ev["kind"][r]), int(ev["occ"][r])), []).append(r)

    def score(item):
        (aid, _, _, _), rs = item
        isz = tr.arrays[aid]["itemsize"]
        if space == _GLOBAL:
            return tracer.sector_counts(ev["elem"][rs], isz)[0]
        return tracer.conflict_degree(ev["elem"][rs], isz)

    first_order = lambda item: min(int(ev["order"][r]) for r in item[1])  # noqa: E731
    items = list(groups.items())
    chosen = max(items, key=lambda it: (score(it), -first_order(it))) if pick == "worst" \
        else min(items, key=first_order)
    (aid, pc, k, _), rs = chosen
    fname, lineno = tr.lines[pc]
    return np.array(rs), tr.arrays[aid]["name"], k, f"{_cited(fname)}:{lineno}"


def _cited(fname: str) -> str:
    """A source file as a figure names it: its path in the repository (gpukernels/softmax/k01_naive.py), so that a
    reader can open it; a file outside it (a notebook cell's) by its name alone, without the machine's folders."""
    try:
        return Path(fname).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return Path(fname).name


def warp_sectors(lesson: str = "matmul", versions=None, array: str | None = None, kind: str | None = None,
                 block: int = 0, warp: int = 0, shape=None) -> Figure:
    """Lanes -> 32-byte sectors for one warp's global access, per version.

    Teaches: a warp's 32 loads are served in 32-byte sectors. When lanes read consecutive floats, 32 lanes
    need 4 sectors (128 bytes, all used); when each lane is a row apart, they need 32 sectors and use 4 bytes
    of each 32 -- an eighth of the bandwidth. A broadcast (all lanes, one address) needs one: the fewest
    possible, so 100% efficient although it uses 4 of the 32 bytes moved. Efficiency is the tracer's
    (``gpukernels.trace.coalescing_efficiency``: sectors needed / sectors moved), the number the coalescing
    table quotes. By default the access whose efficiency improves most from the first version to the last is
    shown.
    """
    versions = list(versions or _naive_and_best(lesson))
    fig = _figure(9.5, 2.5 * len(versions) + 0.8)
    fs = text_pt(fig)
    axes = fig.subplots(len(versions), 1, squeeze=False)[:, 0]
    kind_code = None if kind is None else {"read": _READ, "write": _WRITE}[kind]
    if array is None:
        array, kind_code = _most_improved(lesson, versions, shape, block, warp, kind_code)
    data, effs = {}, []
    for ax, version in zip(axes, versions):
        tr = traced(lesson, version, shape)
        rows, name, k, loc = _warp_access(tr, _GLOBAL, array, kind_code, block, warp)
        lanes = tr.ev["tid"][rows] & 31
        elems = tr.ev["elem"][rows]
        isz = _itemsize(tr, rows)
        sectors = elems * isz // tracer.SECTOR_BYTES
        moved, needed = tracer.sector_counts(elems, isz)
        eff = tracer.coalescing_efficiency(needed, moved)
        uniq = sorted(set(sectors.tolist()))
        pos = {s: i for i, s in enumerate(uniq)}
        width = max(len(uniq), 1)
        for lane, sec in zip(lanes.tolist(), sectors.tolist()):
            x1 = (pos[sec] + 0.5) * 32 / width
            ax.plot([lane + 0.5, x1], [1, 0.12], color="0.35", lw=0.7)
        for lane in range(32):
            active = lane in set(lanes.tolist())
            ax.add_patch(_rect(lane + 0.05, 1, 0.9, 0.3, "0.25" if active else "white"))
        # each sector labelled with its first byte (every n-th when they are narrow: labels never touch)
        slot_pt = 0.85 * fig.get_figwidth() * 72 / width
        every = 1
        while every < width and slot_pt * every < 0.62 * fs * len(f"byte {uniq[-1] * 32}") + 4:
            every += 1
        for s, i in pos.items():
            ax.add_patch(_rect(i * 32 / width + 0.08, -0.25, 32 / width - 0.16, 0.37, "0.7", hatch="//"))
            if i % every == 0:
                ax.text((i + 0.5) * 32 / width, -0.06, f"byte {s * 32}", ha="center", va="center", fontsize=fs,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
        used = isz * len(set(elems.tolist()))
        ax.set_xlim(0, 32)
        ax.set_ylim(-0.35, 1.45)
        ax.set_yticks([1.15, -0.06], ["lanes", "sectors"], fontsize=fs)
        ax.set_xticks([])
        verdict = "the fewest" if moved == needed else f"{needed} would hold them"
        ax.set_title(_wrapped(fig, f"{version}, {loc} ({name} {'read' if k == _READ else 'write'}): "
                     f"{len(set(lanes.tolist()))} lanes -> {moved} sector{'s' if moved > 1 else ''} "
                     f"({moved * tracer.SECTOR_BYTES} bytes moved, {used} used); {verdict}: efficiency {eff:.0%}",
                     fs), fontsize=fs, loc="left")
        for sp in ax.spines.values():
            sp.set_visible(False)
        data[version] = {"array": name, "lanes": lanes, "elements": elems, "sectors": moved,
                         "min_sectors": needed, "efficiency": eff, "bytes_used": used, "location": loc}
        effs.append(f"{version} {eff:.0%}")
    _suptitle(fig, f"{lesson}: one warp access, lanes -> 32-byte sectors (warp {warp} of block {block})",
              f"Notice: the fewer sectors per warp, the less bandwidth wasted -- coalescing efficiency "
              f"{', '.join(effs)}")
    fig.gpukernels_data = data
    return fig


def _wrapped(fig: Figure, text: str, fontsize: float) -> str:
    """``text`` wrapped to the figure's width (a panel's title of one figure-wide axes)."""
    import textwrap

    return textwrap.fill(text, max(40, int(fig.get_figwidth() * 72 / (0.6 * fontsize))))


def _itemsize(tr: Traced, rows: np.ndarray) -> int:
    return tr.arrays[int(tr.ev["aid"][rows[0]])]["itemsize"]


def _efficiency(tr: Traced, rows: np.ndarray) -> float:
    """The tracer's coalescing efficiency of one warp access (``rows``)."""
    moved, needed = tracer.sector_counts(tr.ev["elem"][rows], _itemsize(tr, rows))
    return tracer.coalescing_efficiency(needed, moved)


def _most_improved(lesson, versions, shape, block, warp, kind_code):
    """The (array, kind) of global access whose coalescing efficiency improves most from the first version to
    the last (ties: the one whose last version uses more bytes, then the first version's worst) -- e.g. matmul's
    store of C: 32 sectors for 4 needed in naive, 4 for 4 in coalesced."""
    first, last = traced(lesson, versions[0], shape), traced(lesson, versions[-1], shape)
    best = None
    names = [a["name"] for a in first.arrays if a["space"] == _GLOBAL]
    for name in dict.fromkeys(names):
        for k in ((_READ, _WRITE) if kind_code is None else (kind_code,)):
            try:
                r0 = _warp_access(first, _GLOBAL, name, k, block, warp)[0]
                r1 = _warp_access(last, _GLOBAL, name, k, block, warp)[0]
            except ValueError:
                continue
            # ties (matmul: a's read and c's store both go from 12.5% to 100%): the access whose last version
            # uses more bytes -- c's store of 128 bytes shows coalescing, a's read became a 4-byte broadcast
            used = len(np.unique(last.ev["elem"][r1])) * _itemsize(last, r1)
            gain = (round(_efficiency(last, r1) - _efficiency(first, r0), 6), used,
                    tracer.sector_counts(first.ev["elem"][r0], _itemsize(first, r0))[0])
            if best is None or gain > best[0]:
                best = (gain, name, k)
    if best is None:
        _, name, k, _ = _warp_access(first, _GLOBAL, None, kind_code, block, warp)
        return name, k
    return best[1], best[2]


def warp_banks(lesson: str = "matmul", versions=("regblock_2d", "conflict_free"), array: str | None = None,
               kind: str | None = None, block: int = 0, warp: int = 0, shape=(128, 128, 8)) -> Figure:
    """Lanes -> shared-memory banks for one warp's shared access, per version.

    Teaches: shared memory has 32 banks of 4-byte words; a warp access takes as many passes as the largest
    number of *different* words it needs from one bank (lanes reading the same word share it: a broadcast).
    Stacked boxes in a bank column are the words that bank must serve one after another. By default the
    first version's worst access (highest conflict degree) is shown, and the same array and kind in the
    others: regblock_2d's transposed store of A into its tile hits one bank 8 times; conflict_free pads the
    tile's rows and serves it in one pass.
    """
    versions = list(versions or _naive_and_best(lesson))
    fig = _figure(9.5, 2.8 * len(versions) + 0.8)
    fs = text_pt(fig)
    axes = fig.subplots(len(versions), 1, squeeze=False)[:, 0]
    kind_code = None if kind is None else {"read": _READ, "write": _WRITE}[kind]
    data = {}
    for ax, version in zip(axes, versions):
        tr = traced(lesson, version, shape)
        rows, name, k, loc = _warp_access(tr, _SHARED, array, kind_code, block, warp)
        array, kind_code = name, k
        lanes = tr.ev["tid"][rows] & 31
        isz = _itemsize(tr, rows)
        words = tr.ev["elem"][rows] * isz // tracer.BANK_WORD_BYTES  # float32: one word per element
        banks = words % tracer.BANKS
        degree = tracer.conflict_degree(tr.ev["elem"][rows], isz)
        stack: dict[int, list] = {}
        for w in sorted(set(words.tolist())):
            stack.setdefault(w % 32, []).append(w)
        top = 1.0 + 0.35 * max(degree, 1)
        for lane, w in zip(lanes.tolist(), words.tolist()):
            level = stack[w % 32].index(w)
            ax.plot([lane + 0.5, w % 32 + 0.5], [top, 0.35 * level + 0.3], color="0.35", lw=0.7)
        for lane in range(32):
            ax.add_patch(_rect(lane + 0.05, top, 0.9, 0.3, "0.25" if lane in set(lanes.tolist()) else "white"))
        for b in range(32):
            for level, w in enumerate(stack.get(b, [])):
                ax.add_patch(_rect(b + 0.08, 0.35 * level, 0.84, 0.3, "0.6" if level else "0.85",
                                   hatch="xx" if level else ""))
        ax.set_xlim(0, 32)
        ax.set_ylim(-0.1, top + 0.4)
        ax.set_yticks([top + 0.15, 0.15], ["lanes", "banks"], fontsize=fs)
        ax.set_xticks([b + 0.5 for b in range(0, 32, 4)], [str(b) for b in range(0, 32, 4)], fontsize=fs)
        ax.set_title(_wrapped(fig, f"{version}, {loc} ({name} {'read' if k == _READ else 'write'}): "
                              + ("conflict-free (one pass)" if degree <= 1 else f"{degree}-way bank conflict "
                                                                                 f"({degree} passes)"), fs),
                     fontsize=fs, loc="left")
        for sp in ax.spines.values():
            sp.set_visible(False)
        data[version] = {"array": name, "lanes": lanes, "words": words, "banks": banks, "degree": degree,
                         "location": loc}
    degrees = ", ".join(f"{v} {d['degree']}-way" for v, d in data.items())
    _suptitle(fig, f"{lesson}: one warp's shared-memory access, lanes -> banks",
              f"Notice: stacked boxes are different words of one bank, served one after another -- conflict degree "
              f"{degrees}")
    fig.gpukernels_data = data
    return fig
