"""What a classroom page embeds, computed from one traced run of a lesson version.

Everything comes from the tracer's public interface (``trace(events=True)``, ``Trace.events()``,
``traffic()``, ``coalescing()``, ``bank_conflicts()``, ``hazards()``, ``launches``); this module only regroups
the event log for the page:

* *steps*: the barrier intervals of each launch grouped into phases -- a phase starts at an interval in which
  the block writes shared memory (tiled matmul: one per K tile; fused CBR: one per channel chunk); a launch with
  no shared writes is one step. A version's steps are its launches' phases in launch order;
* per step and global array, the loads of every element (all blocks): their running sum is the page's "loads
  so far", and after the last step it is the tracer's ``traffic()`` count (tests/test_classroom_data.py);
* per step, block and thread, the elements each thread reads and writes, as arithmetic runs
  ``(start, stride, count)`` (a naive matmul thread's row of A is one run);
* per step and block, what each shared tile holds: the global element a thread loaded just before it stored
  that shared cell in the same statement, -1 for a cell such a statement filled with a constant (the zero
  padding), or -2 for a value the block computed (a statement that never copies: a reduction's partial results);
* per step, block and warp, the first warp access of each line: element per lane (its first: a 16-byte vector
  access of ``load4`` or ``store4`` moves 4, the line's ``width``), and its 32-byte sectors (global) or bank
  conflict degree (shared) by the tracer's own definitions (``gpukernels.trace`` docstring): warp accesses are
  the tracer's (its ``occurrence``; a vector access is one, at the kernel's line that called the intrinsic), so
  summed over *all* of them these equal the tracer's ``coalescing()`` and ``bank_conflicts()`` numbers, which
  the page shows beside them per line;
* for a broken variant, the tracer's ``hazards()`` races with their source lines, and the elements of each
  racing pair of lines (program order, as the tracer pairs them: the counts are the tracer's ``elements``).
"""

from __future__ import annotations

import linecache
import os
from collections import defaultdict

import numpy as np

from ..trace import trace

#: The event log costs about 1.6 KB per access (Trace.events() is a record array with string columns), and
#: local arrays are in it too: above this many accesses a version is refused with a message naming the size.
MAX_EVENTS = 700_000


class TooLarge(ValueError):
    """The traced run would record more accesses than a page can embed."""


def count_accesses(run, inputs) -> int:
    """Accesses of global and shared memory one run records (what the page's log keeps; local arrays are not
    observed): a cheap trace without the event log, to decide before the real one."""
    with trace(count_local=False) as t:
        run(*inputs)
    return sum(x.loads + x.stores - x.atomics for x in t.traffic(space=None))


def record(run, inputs, label: str = "", limit: int | None = MAX_EVENTS):
    """Trace ``run(*inputs)`` with the full event log; refuse (TooLarge) when it would not fit in a page."""
    if limit is not None:
        n = count_accesses(run, inputs)
        if n > limit:
            raise TooLarge(f"{label or 'this version'} records {n:,} accesses at this size (a page holds at most "
                           f"{limit:,}); choose a smaller --size")
    with trace(events=True, count_local=False) as t:  # the page shows global and shared memory, never registers
        out = run(*inputs)
    return t, out


# -------------------------------------------------------------------------------------------------------------
# Helpers over the event log
# -------------------------------------------------------------------------------------------------------------


def _codes(values: np.ndarray) -> tuple[list, np.ndarray]:
    names, inv = np.unique(values, return_inverse=True)
    return names.tolist(), inv.ravel().astype(np.int64)


def _groups(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by equal ``cols``: (order, starts) -- ``order[starts[i]:starts[i+1]]`` are group i's rows."""
    if not len(cols[0]):
        return np.zeros(0, np.int64), np.zeros(1, np.int64)
    order = np.lexsort(cols[::-1])
    keys = np.stack([c[order] for c in cols], 1)
    change = np.r_[True, (keys[1:] != keys[:-1]).any(1)]
    starts = np.r_[np.flatnonzero(change), len(order)]
    return order, starts


def runs(elements) -> list[tuple[int, int, int]]:
    """Sorted distinct elements as arithmetic runs ``(start, stride, count)``, greedily: [0,1,2,3,8,16] ->
    (0,1,4), (8,8,2)."""
    out = []
    xs = sorted(set(int(x) for x in elements))
    i = 0
    while i < len(xs):
        if i + 1 == len(xs):
            out.append((xs[i], 1, 1))
            break
        stride = xs[i + 1] - xs[i]
        j = i + 1
        while j + 1 < len(xs) and xs[j + 1] - xs[j] == stride:
            j += 1
        out.append((xs[i], stride, j - i + 1))
        i = j + 1
    return out


def expand(start: int, stride: int, count: int) -> list[int]:
    return [start + stride * i for i in range(count)]


def sectors(elements, itemsize: int) -> tuple[int, int]:
    """The tracer's coalescing of one warp access: 32-byte sectors touched, and the fewest the same bytes need."""
    el = {int(e) for e in elements}
    return len({e * itemsize >> 5 for e in el}), -(-(len(el) * itemsize) // 32)


def conflict_degree(elements, itemsize: int) -> int:
    """The tracer's conflict degree of one shared warp access: the most distinct 4-byte words in one bank."""
    per_bank = defaultdict(set)
    for e in elements:
        word = int(e) * itemsize >> 2
        per_bank[word & 31].add(word)
    return max((len(w) for w in per_bank.values()), default=0)


def source_of(location: str) -> str:
    """The text of ``file:line`` as the tracer names it (a path relative to the working directory or to the folder
    holding the package: `gpukernels.sim._source.short_path`)."""
    from ..sim._source import full_path

    path, _, line = location.rpartition(":")
    try:
        return linecache.getline(os.path.abspath(full_path(path)), int(line)).strip()
    except ValueError:
        return ""


class Events:
    """The event log of one trace with the page's derived columns: linear block and thread ids, the step of
    every access, and its occurrence (the n-th time its thread made it: what makes a warp access)."""

    def __init__(self, t):
        self.t = t
        ev = self.ev = t.events()
        self.launches = t.launches
        self.info = {(a.launch, a.array): a for a in t.traffic(space=None)}
        li = ev["launch"].astype(np.int64)
        grid = np.array([tuple(l.grid) + (1,) * (3 - len(l.grid)) for l in self.launches], np.int64)
        block = np.array([tuple(l.block) + (1,) * (3 - len(l.block)) for l in self.launches], np.int64)
        g, b = grid[li], block[li]
        self.li = li
        self.blk = ev["block"][:, 0] + ev["block"][:, 1] * g[:, 0] + ev["block"][:, 2] * g[:, 0] * g[:, 1]
        self.tid = ev["thread"][:, 0] + ev["thread"][:, 1] * b[:, 0] + ev["thread"][:, 2] * b[:, 0] * b[:, 1]
        self.arrays, self.aid = _codes(ev["array"]) if len(ev) else ([], np.zeros(0, np.int64))
        self.locs, self.lid = _codes(ev["location"]) if len(ev) else ([], np.zeros(0, np.int64))
        self.space = ev["space"]
        self.write = ev["kind"] != "read"
        self.read = ev["kind"] != "write"
        self.interval = ev["interval"].astype(np.int64)
        self.kind = np.select([ev["kind"] == "read", ev["kind"] == "write"], [0, 1], 2)
        # copies: a shared store right after its thread's global load at the same line and interval (one statement
        # ``tile[ty, tx] = a[row, k0 + tx]``, a copy_async) -- or at the ``return`` of a helper in another file that
        # the statement called (``sa[...] = half_at(a, i, j)``, whose load is ``return x[i, j]``): what stages a tile
        self.order = order = np.lexsort((ev["order"], self.tid, self.blk, li)) if len(ev) else np.zeros(0, np.int64)
        self.prev = prev = np.full(len(ev), -1, np.int64)
        prev[order[1:]] = order[:-1]
        p = np.maximum(prev, 0)
        files = np.array([loc.rpartition(":")[0] for loc in self.locs] or [""])
        returned = np.array([source_of(loc).startswith("return ") for loc in self.locs] or [False])
        same_statement = (self.lid[p] == self.lid) | ((files[self.lid[p]] != files[self.lid]) & returned[self.lid[p]])
        self.copied = ((self.space == "shared") & self.write & (prev >= 0) & (li[p] == li) & (self.blk[p] == self.blk)
                       & (self.tid[p] == self.tid) & same_statement & (self.interval[p] == self.interval)
                       & (self.space[p] == "global") & (self.kind[p] == 0))
        # steps: per launch, a phase starts at each interval with a shared write -- except an interval that only
        # writes values the block computed right after a phase that staged tiles (attention's probabilities of the
        # K/V tile just staged): that is the same tile's work, not a phase of its own
        self.steps = []  # (launch, phase, first interval, last interval)
        self.staged = []  # per step: the shared tiles it copies from global memory
        self.step = np.zeros(len(ev), np.int64)
        for launch in range(len(self.launches)):
            mine = li == launch
            intervals = np.unique(self.interval[mine])
            starts = np.unique(self.interval[mine & (self.space == "shared") & self.write])
            copying = set(np.unique(self.interval[mine & self.copied]).tolist())
            keep = []
            for s in starts.tolist():
                if not keep or s in copying or keep[-1] not in copying:
                    keep.append(s)
            starts = np.array(keep, np.int64)
            if not len(starts) or (len(intervals) and intervals[0] < starts[0]):
                starts = np.r_[intervals[:1], starts] if len(intervals) else np.zeros(1, np.int64)
            phase = np.clip(np.searchsorted(starts, self.interval[mine], side="right") - 1, 0, None)
            base = len(self.steps)
            last = int(intervals.max()) if len(intervals) else 0
            for p, s in enumerate(starts.tolist()):
                end = starts[p + 1] - 1 if p + 1 < len(starts) else last
                self.steps.append((launch, p, int(s), int(end)))
                here = mine & self.copied & (self.interval >= s) & (self.interval <= end)
                self.staged.append(tuple(sorted(set(self.arrays[a] for a in np.unique(self.aid[here]).tolist()))))
            self.step[mine] = base + phase
        # the tracer's occurrence (the n-th time a thread made this access: what makes a warp access; the four
        # floats of a 16-byte load4 share one), row for row the same log as events()
        self.occ = t.accesses()["occurrence"].astype(np.int64) if len(ev) else np.zeros(0, np.int64)

    def itemsize(self, launch: int, array: str) -> int:
        return self.info[(launch, array)].itemsize

    # -- warp accesses ----------------------------------------------------------------------------------------
    def warp_accesses(self, first_per_step: bool = False) -> list[dict]:
        """Every warp access to global or shared memory (``first_per_step``: only the first occurrence of each
        line per step, block and warp), with the tracer's measures."""
        sel = np.flatnonzero(self.space != "local")
        warp = self.tid >> 5
        order, st = _groups(*(c[sel] for c in (self.li, self.blk, warp, self.aid, self.lid, self.kind, self.occ)))
        out, seen = [], set()
        for g in range(len(st) - 1):
            rows = sel[order[st[g]:st[g + 1]]]
            r0 = rows[0]
            launch, array = int(self.li[r0]), self.arrays[self.aid[r0]]
            key = (int(self.step[r0]), int(self.blk[r0]), int(warp[r0]), array, self.locs[self.lid[r0]],
                   int(self.kind[r0]))
            if first_per_step:
                if key in seen:
                    continue
                seen.add(key)
            lanes, per_lane = [-1] * 32, [0] * 32
            for r in rows.tolist():  # a lane's first element (a 16-byte vector access: 4 consecutive ones)
                lane, e = int(self.tid[r]) & 31, int(self.ev["element"][r])
                lanes[lane] = e if lanes[lane] < 0 else min(lanes[lane], e)
                per_lane[lane] += 1
            elems = [int(self.ev["element"][r]) for r in rows.tolist()]
            isz = self.itemsize(launch, array)
            item = {"step": key[0], "block": key[1], "warp": key[2], "array": array, "location": key[4],
                    "kind": ("read", "write", "atomic")[key[5]], "space": str(self.space[r0]), "lanes": lanes,
                    "width": max(per_lane), "itemsize": isz, "order": int(self.ev["order"][rows].min())}
            if item["space"] == "global":
                item["sectors"], item["min_sectors"] = sectors(elems, isz)
            else:
                item["degree"] = conflict_degree(elems, isz)
            out.append(item)
        return out

    # -- races ------------------------------------------------------------------------------------------------
    def race_cells(self) -> dict:
        """(array, first line, first kind, second line, second kind) -> [(step, block, element), ...]: the
        elements where that pair of lines races, paired in program order as the tracer pairs them."""
        sel = np.flatnonzero(self.space != "local")
        order, st = _groups(*(c[sel] for c in (self.li, self.blk, self.aid, self.ev["element"].astype(np.int64),
                                                self.interval)))
        out = defaultdict(list)
        for g in range(len(st) - 1):
            rows = sel[order[st[g]:st[g + 1]]]
            if not self.write[rows].any() or len(set(self.tid[rows].tolist())) < 2:
                continue
            items = sorted((int(self.ev["order"][r]), int(r)) for r in rows.tolist())
            found = set()
            for i, (_, r1) in enumerate(items):
                for _, r2 in items[i + 1:]:
                    k1, k2 = int(self.kind[r1]), int(self.kind[r2])
                    if self.tid[r1] == self.tid[r2] or (k1 == 0 and k2 == 0) or (k1 == 2 and k2 == 2):
                        continue
                    found.add((self.arrays[self.aid[r1]], self.locs[self.lid[r1]], k1, self.locs[self.lid[r2]], k2))
            r0 = rows[0]
            for key in found:
                out[key].append((int(self.step[r0]), int(self.blk[r0]), int(self.ev["element"][r0])))
        return dict(out)


# -------------------------------------------------------------------------------------------------------------
# The page's data for one version
# -------------------------------------------------------------------------------------------------------------


def step_labels(E: Events, word: str) -> list[str]:
    """Each step's label, from what it does. Where a launch stages the same shared tiles in several steps (a K phase,
    a K/V tile, a channel chunk: its loop), those steps are numbered "word i of n" and a step that stages other tiles
    says which (attention's Q before its K/V tiles); otherwise the phases are numbered as they come."""
    from collections import Counter

    labels = []
    for launch in sorted({s[0] for s in E.steps}):
        mine = [i for i, s in enumerate(E.steps) if s[0] == launch]
        kernel, n = E.launches[launch].kernel, len(mine)
        counts = Counter(E.staged[i] for i in mine if E.staged[i])
        loop = max(counts, key=lambda k: (counts[k], mine.index(next(i for i in mine if E.staged[i] == k))),
                   default=None)
        looped = [i for i in mine if loop and E.staged[i] == loop]
        for i in mine:
            _, phase, i0, i1 = E.steps[i]
            if n == 1:
                labels.append(f"{kernel}: no barrier between its loads" if i0 == i1
                              else f"{kernel}: {word} 1 of 1 (barrier intervals {i0}-{i1})")
            elif len(looped) >= 2 and i in looped:
                labels.append(f"{kernel}: {word} {looped.index(i) + 1} of {len(looped)}")
            elif len(looped) >= 2 and E.staged[i]:
                when = "before" if i < looped[0] else "after"
                labels.append(f"{kernel}: stages {', '.join(E.staged[i])} ({when} {word} "
                              f"{1 if when == 'before' else len(looped)})")
            elif len(looped) >= 2:
                labels.append(f"{kernel}: {'no tile staged' if i < looped[0] else 'after the last ' + word}")
            else:
                labels.append(f"{kernel}: {word} {phase + 1} of {n}")
    return labels


def kernel_lines(location: str, array: str, kernel_files) -> list[str]:
    """Where a helper's line loads or stores for the kernel (``return x[i, j]`` in tensor_core's ``half_at``, a line
    of _common.py): the kernel's own lines that call the helper on ``array`` (``half_at(a, row, k)``), found in
    ``kernel_files`` -- what the student wrote, shown above the helper's line. [] when the line is the kernel's own
    or no call names the array."""
    import re

    from ..sim._source import full_path

    path, _, line = location.rpartition(":")
    if not path or path in kernel_files or not line.isdigit():
        return []
    lines = linecache.getlines(full_path(path))
    helper = next((m.group(1) for k in range(min(int(line), len(lines)) - 1, -1, -1)
                   if (m := re.match(r"\s*def (\w+)\(", lines[k]))), None)
    if helper is None:
        return []
    call = re.compile(rf"\b{helper}\(\s*{re.escape(array)}\b")
    return [f"{f}:{i}" for f in sorted(kernel_files)
            for i, text in enumerate(linecache.getlines(full_path(f)), 1) if call.search(text)]


def version_data(t, name: str, idea: str, step_word: str = "phase", races: bool = False,
                 kernel_files=()) -> dict:
    """JSON-able data of one traced version (see the module docstring); ``kernel_files``: the files of its kernels
    (their lines are the student's: a helper's line is shown under the kernel lines that call it)."""
    E = Events(t)
    ev = E.ev
    launches = [{"kernel": l.kernel, "grid": list(l.grid), "block": list(l.block)} for l in E.launches]
    # global arrays by name (the same array across a version's launches); shared arrays per launch
    garrays, sarrays = {}, {}
    for (launch, array), a in E.info.items():
        if a.space == "global":
            g = garrays.setdefault(array, {"name": array, "shape": list(a.shape), "itemsize": a.itemsize,
                                           "loads": 0, "stores": 0, "written": False})
            g["loads"] += a.loads
            g["stores"] += a.stores
            g["written"] |= a.stores > 0
        elif a.space == "shared":
            sarrays[f"{launch}:{array}"] = {"name": array, "launch": launch, "shape": list(a.shape),
                                            "itemsize": a.itemsize}
    steps = []
    labels = step_labels(E, step_word)
    for (launch, phase, i0, i1), label, staged in zip(E.steps, labels, E.staged):
        steps.append({"launch": launch, "phase": phase, "intervals": [i0, i1], "label": label,
                      "staged": list(staged), "loads": {}, "stores": {}})
    gsel = E.space == "global"
    for name_ in garrays:
        size = int(np.prod(garrays[name_]["shape"])) if garrays[name_]["shape"] else 1
        a = gsel & (ev["array"] == name_)
        for s in range(len(steps)):
            here = a & (E.step == s)
            for key, mask in (("loads", E.read), ("stores", E.write)):
                el = ev["element"][here & mask]
                if len(el):
                    steps[s][key][name_] = np.bincount(el, minlength=size).astype(int).tolist()
    # per thread: elements read / written, as runs, per (array, read|write)
    access = {}
    for kind, mask in (("read", E.read), ("write", E.write)):
        rows = np.flatnonzero(gsel & mask)
        order, st = _groups(*(c[rows] for c in (E.aid, E.step, E.blk, E.tid)))
        for g in range(len(st) - 1):
            rr = rows[order[st[g]:st[g + 1]]]
            r0 = rr[0]
            flat = access.setdefault(f"{E.arrays[E.aid[r0]]}:{kind}", [])
            for run in runs(ev["element"][rr].tolist()):
                flat += [int(E.step[r0]), int(E.blk[r0]), int(E.tid[r0]), *run]
    # shared tiles: the global element loaded just before each shared store by the same statement (same thread,
    # interval and line: ``a_tile[ty, tx] = a[row, k0 + tx]``, a copy_async); a statement that stages values this way
    # fills its other cells with a constant (-1: the zero padding), and the cells of a statement that never copies
    # hold values the block computed (-2: softmax's partial maxima and sums)
    tiles, stores, copying = {}, [], set()
    order = E.order
    for pos in np.flatnonzero((E.space[order] == "shared") & E.write[order]).tolist():
        r = int(order[pos])
        p = int(E.prev[r])
        src, src_array = None, None
        if E.copied[r]:
            src, src_array = int(ev["element"][p]), E.arrays[E.aid[p]]
            copying.add((int(E.li[r]), int(E.lid[r])))
        key = f"{int(E.li[r])}:{E.arrays[E.aid[r]]}"
        tile = tiles.setdefault(key, {"sources": defaultdict(int), "cells": {}})
        if src_array:
            tile["sources"][src_array] += 1
        where, line = f"{int(E.step[r])}:{int(E.blk[r])}", (int(E.li[r]), int(E.lid[r]))
        stores.append((tile, where, int(ev["element"][r]), src, line))
    for tile, where, element, src, line in stores:
        tile["cells"].setdefault(where, {})[element] = src if src is not None else -1 if line in copying else -2
    for key, tile in tiles.items():
        sarrays[key]["source"] = max(tile["sources"], key=tile["sources"].get) if tile["sources"] else None
        sarrays[key]["cells"] = {k: [x for e, s in sorted(v.items()) for x in (e, s)] for k, v in tile["cells"].items()}
    # warp accesses, with the tracer's per-line numbers beside them
    coal = {(x.location, x.array, x.kind): x for x in t.coalescing().lines}
    banks = {(x.location, x.array, x.kind): x for x in t.bank_conflicts()}
    lines, line_ids, warps = [], {}, defaultdict(list)
    for w in E.warp_accesses(first_per_step=True):
        key = (w["location"], w["array"], w["kind"])
        if key not in line_ids:
            line_ids[key] = len(lines)
            line = {"location": w["location"], "array": w["array"], "kind": w["kind"], "space": w["space"],
                    "itemsize": w["itemsize"], "width": w["width"], "source": source_of(w["location"])}
            callers = kernel_lines(w["location"], w["array"], set(kernel_files))
            if callers:  # the kernel's lines first: the helper's line is how they reach memory
                line["kernel"] = [{"location": c, "source": source_of(c)} for c in callers]
            if key in coal:
                c = coal[key]
                line.update(requests=c.requests, sectors=c.sectors, min_sectors=c.min_sectors, efficiency=c.efficiency)
            elif key in banks:
                b = banks[key]
                line.update(requests=b.requests, wavefronts=b.wavefronts, max_degree=b.max_degree,
                            mean_degree=b.mean_degree)
            lines.append(line)
        lines[line_ids[key]]["width"] = max(lines[line_ids[key]]["width"], w["width"])
        # [line, lanes x 32, sectors, min sectors] (global) or [line, lanes x 32, degree] (shared)
        measure = [w["sectors"], w["min_sectors"]] if w["space"] == "global" else [w["degree"]]
        warps[f"{w['step']}:{w['block']}:{w['warp']}"].append((w["order"], [line_ids[key], *w["lanes"], *measure]))
    warps = {k: [x for _, x in sorted(v, key=lambda item: item[0])] for k, v in warps.items()}  # program order
    out = {"name": name, "idea": idea, "launches": launches, "global": list(garrays.values()),
           "shared": list(sarrays.values()), "steps": steps, "access": access, "lines": lines,
           "warps": warps,
           "coalescing": t.coalescing().per_kernel}
    if races:
        cells = E.race_cells()
        kinds = ("read", "write", "atomic")
        out["races"] = []
        for r in t.hazards().races:
            key = (r.array, r.first_location, kinds.index(r.first_kind), r.second_location,
                   kinds.index(r.second_kind))
            out["races"].append({
                "array": r.array, "space": r.space, "hazard": r.hazard, "elements": r.elements,
                "first": {"location": r.first_location, "kind": r.first_kind, "source": source_of(r.first_location)},
                "second": {"location": r.second_location, "kind": r.second_kind,
                           "source": source_of(r.second_location)},
                "hint": r.hint, "cells": [x for c in cells.get(key, []) for x in c],
            })
    return out
