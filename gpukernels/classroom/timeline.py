"""The copies in flight of a pipelined kernel, per stage, as a timeline: one row per commit group of one thread
(a ``cp.async`` group is one k tile, or one stage of the ring), from the first copy issued to the wait that
covered it, with the moment its data landed -- drawn from the tracer's record of the real run on the simulator
(`gpukernels.trace.Trace.async_events`).

    with gpukernels.trace() as t:
        gpukernels.tensor_core.pipelined(a, b)
    svg = timeline.svg(t.async_events())             # thread 0 of block (0, 0, 0) of the first launch
    timeline.stages(t.async_events(), thread=37)      # the rows as data

The x axis is the thread's own order of asynchronous events; dashed lines mark its barriers (``cuda.syncthreads()``),
so a row that spans two of them is a tile that was in flight while the block worked on another one: the pipeline.

The TMA steps (tensor_core 7-9) have no commit groups: one thread asks the copy engine for a stage's tiles and
mbarriers say when they landed and when the consumers are done. ``ring_svg(t.ring())`` draws that ring, one row per
stage (`gpukernels._ringlog`): each use of the stage from the producer's wait for it to be empty, its copies in
flight until the full barrier's phase completes, the consumers' wgmmas on it until their release completes the
empty barrier's phase, labelled with its k tile and the phase bit its waits name.

The attention lesson's steps 10 and 11 have two rings (K and V) and two consumer warpgroups: ``pingpong_svg(
_pplog.schedule(t.async_events()))`` draws block 0's warpgroups lane by lane (`gpukernels._pplog`), as
`gpukernels.viz.pingpong_timeline` does -- step 11's turns at the tensor cores handed back and forth by named
barriers, each warpgroup's products and its warps' softmax, the producer's TMA copies.
"""

from __future__ import annotations

import html

# the page's palette (page.css): in flight, landed, the wait
_FLIGHT, _LANDED, _WAIT, _INK = "#E69F00", "#56B4E9", "#B33C00", "#333333"
_IDLE = "#999999"  # the producer waiting for a stage to be released


def stages(events, launch: int = 0, block=(0, 0, 0), thread: int = 0) -> list[dict]:
    """One dict per commit group of ``thread`` in ``block`` of ``launch``: ``group``, ``copies`` (how many
    ``cp.async``), and the x position (the thread's event index) and barrier interval of ``issued`` (its first
    copy), ``committed``, ``landed`` (its last copy's data moved) and ``waited`` (the wait that covered it; None if
    the thread exited first), with ``issue_line`` and ``wait_line``."""
    mine = [e for e in events if e.launch == launch and tuple(e.block) == tuple(block) and e.thread == thread
            and e.kind == "cp.async"]
    rows: dict = {}
    pending: list = []  # issues not yet committed: they belong to the next commit's group
    group_of: dict = {}
    for x, e in enumerate(mine):
        if e.what == "issue":
            pending.append((x, e))
        elif e.what == "commit":
            row = rows[e.group] = {"group": e.group, "copies": len(pending), "issued": None, "committed": (x, e.interval),
                                   "landed": None, "waited": None, "issue_line": "", "wait_line": ""}
            if pending:
                row["issued"] = (pending[0][0], pending[0][1].interval)
                row["issue_line"] = pending[0][1].location
            for _, p in pending:
                group_of[p.op] = e.group
            pending = []
        elif e.what == "land" and e.op in group_of:
            rows[group_of[e.op]]["landed"] = (x, e.interval)
        elif e.what == "wait":
            for g in range(e.group + 1):  # a wait covers every group up to the newest one it names
                row = rows.get(g)
                if row is not None and row["waited"] is None:
                    row["waited"] = (x, e.interval)
                    row["wait_line"] = e.location
    return [rows[g] for g in sorted(rows)]


def svg(events, launch: int = 0, block=(0, 0, 0), thread: int = 0, width: int = 720) -> str:
    """The timeline of ``stages(...)`` as an SVG string ('' when the thread issued no copies)."""
    rows = stages(events, launch, block, thread)
    if not rows:
        return ""
    last = max(max(p[0] for p in (r["issued"], r["committed"], r["landed"], r["waited"]) if p) for r in rows) + 1
    left, row_h, top = 90, 18, 24
    scale = (width - left - 10) / last
    height = top + row_h * len(rows) + 24
    x = lambda pos: left + pos * scale  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12" role="img" aria-label="copies in flight per stage">',
           f'<text x="4" y="14" fill="{_INK}">thread {thread} of block {tuple(block)}: each row a commit group '
           f'(<tspan fill="{_FLIGHT}">in flight</tspan>, <tspan fill="{_LANDED}">landed</tspan>, '
           f'<tspan fill="{_WAIT}">waited</tspan>); dashed: barriers</text>']
    intervals = {}
    for r in rows:
        for p in (r["issued"], r["committed"], r["landed"], r["waited"]):
            if p:
                intervals.setdefault(p[1], p[0])
    for iv, pos in sorted(intervals.items())[1:]:
        out.append(f'<line x1="{x(pos) - 1:.1f}" x2="{x(pos) - 1:.1f}" y1="{top - 4}" y2="{height - 20}" '
                   f'stroke="#999" stroke-dasharray="3,3"><title>barrier {iv}</title></line>')
    for i, r in enumerate(rows):
        y = top + i * row_h
        start = (r["issued"] or r["committed"])[0]
        land = (r["landed"] or r["waited"] or (last, 0))[0]
        end = (r["waited"] or (last, 0))[0]
        tip = html.escape(f"group {r['group']}: {r['copies']} copies from {r['issue_line'] or 'no copy'}; "
                          f"waited at {r['wait_line'] or 'the exit'}")
        out.append(f'<text x="4" y="{y + 12}" fill="{_INK}">group {r["group"]}</text>')
        out.append(f'<g><title>{tip}</title>'
                   f'<rect x="{x(start):.1f}" y="{y + 2}" width="{max(x(land) - x(start), 2):.1f}" height="{row_h - 6}" '
                   f'fill="{_FLIGHT}"/>'
                   f'<rect x="{x(land):.1f}" y="{y + 2}" width="{max(x(end) - x(land), 0):.1f}" height="{row_h - 6}" '
                   f'fill="{_LANDED}"/>'
                   f'<rect x="{x(end):.1f}" y="{y}" width="3" height="{row_h - 2}" fill="{_WAIT}"/></g>')
    out.append(f'<text x="{left}" y="{height - 6}" fill="{_INK}">the thread\'s asynchronous events in program order '
               f'&#8594;</text></svg>')
    return "\n".join(out)


def ring_svg(uses, k_tiles: int | None = None, width: int = 720) -> str:
    """The ring of a TMA step as an SVG string ('' without TMA copies): ``uses`` from `Trace.ring()` (one block's),
    one row per stage; ``k_tiles``: the k tiles of one tile of C, to shade the consumers' epilogue between the tiles
    a persistent block walks."""
    from .._ringlog import clock, epilogues

    if not uses:
        return ""
    stages = 1 + max(u.stage for u in uses)
    ends = epilogues(uses, k_tiles) if k_tiles else []
    rank = clock(uses, [s for _, s0, s1 in ends for s in (s0, s1)])
    left, row_h, top = 64, 34, 24
    scale = (width - left - 10) / max(len(rank), 1)
    height = top + row_h * stages + 24
    x = lambda step: left + rank[step] * scale  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline ring" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12" role="img" aria-label="the TMA ring, stage by stage">',
           f'<text x="4" y="14" fill="{_INK}">each row a stage of the ring: <tspan fill="{_IDLE}">producer waits for '
           f'it</tspan>, <tspan fill="{_FLIGHT}">copies in flight</tspan>, <tspan fill="{_LANDED}">consumers\' '
           f'wgmmas</tspan>, <tspan fill="{_WAIT}">released</tspan>; label: k tile, phase bit</text>']
    for tile, s0, s1 in ends:
        out.append(f'<rect x="{x(s0):.1f}" y="{top - 4}" width="{max(x(s1) - x(s0), 2):.1f}" '
                   f'height="{row_h * stages + 4}" fill="#EEEEEE"><title>the consumers store tile {tile} of C '
                   f'(the epilogue) while the next tile\'s copies fly</title></rect>')
    for s in range(stages):
        out.append(f'<text x="4" y="{top + s * row_h + 22}" fill="{_INK}">stage {s}</text>')
    for u in uses:
        y = top + u.stage * row_h
        w = u.empty_wait
        if w and not w[2] and w[1] is not None:
            out.append(f'<line x1="{x(w[0]):.1f}" x2="{x(w[1]):.1f}" y1="{y + 14}" y2="{y + 14}" stroke="{_IDLE}" '
                       f'stroke-width="3"><title>the producer waits for the release of this stage\'s last '
                       f'use</title></line>')
        if not u.issued:
            continue
        full = u.full if u.full is not None else max(rank)
        end = u.freed if u.freed is not None else max([s for s, _ in u.wgmma], default=full)
        tip = html.escape(f"stage {u.stage}, use {u.use} (k tile {u.index}): phase bit {u.phase_bit}; "
                          f"{len(u.issued)} TMA copies, {u.nbytes} bytes on full[{u.stage}]; "
                          f"{len(u.waits)} consumer waits ({sum(a for _, _, a in u.waits)} at once), "
                          f"{len(u.wgmma)} wgmmas, {len(u.released)} releases on empty[{u.stage}]")
        out.append(f'<g><title>{tip}</title>'
                   f'<rect x="{x(u.issued[0]):.1f}" y="{y + 16}" width="{max(x(full) - x(u.issued[0]), 2):.1f}" '
                   f'height="7" fill="{_FLIGHT}"/>'
                   f'<rect x="{x(full):.1f}" y="{y + 23}" width="{max(x(end) - x(full), 2):.1f}" height="7" '
                   f'fill="{_LANDED}"/>'
                   + (f'<rect x="{x(u.freed):.1f}" y="{y + 14}" width="3" height="17" fill="{_WAIT}"/>'
                      if u.freed is not None else "")
                   + f'<text x="{x(u.issued[0]):.1f}" y="{y + 11}" fill="{_INK}">k{u.index} &#183; {u.phase_bit}'
                   '</text></g>')
    out.append(f'<text x="{left}" y="{height - 6}" fill="{_INK}">the ring\'s events in the order the simulator ran '
               f'them &#8594;</text></svg>')
    return "\n".join(out)


# the ping-pong timeline's own colours (Okabe-Ito, as viz.pingpong_timeline): each warpgroup's turns, P V beside S,
# the softmax (its legend word darker: yellow text is unreadable on white)
_TURN = {1: "#009E73", 2: "#CC79A7"}
_S, _PV, _SOFTMAX, _SOFTMAX_TEXT = "#0072B2", _LANDED, "#F0E442", "#8F8500"


def pingpong_svg(sched, width: int = 1100) -> str:
    """The consumer warpgroups of attention's steps 10 and 11 as an SVG string ('' unless ``sched`` has warpgroups'
    products fed by TMA copies): ``sched`` is block 0's `gpukernels._pplog.Schedule` (``_pplog.schedule(t.async_
    events())``). One row per lane, as `gpukernels.viz.pingpong_timeline` draws them: the producer's copies in
    flight (Q, then each stage of the K and V rings), then per warpgroup its turns at the tensor cores (step 11's named
    barriers; a step without them has no turns row and says so), its products S(t) and P(t) V(t) from the first
    wgmma issued to the wait that found them done (a tick per warp's issue), and each warp's softmax of tile t. Each
    turn is shaded down the whole drawing: what the other warpgroup does in that column, it does while this one has
    the tensor cores. Elements carry their class and numbers (``class="turn" data-warpgroup data-turn``, ``issue``,
    ``softmax``) for the tests and the browser. Its text is 14 px, the page's least in presenter mode, and it is
    1100 px wide: it fits a 1280 x 720 laptop unscaled."""
    from .._pplog import clock

    if not sched.work or not sched.copies:
        return ""
    rank = clock(sched)
    last = len(rank)
    wgs = sorted(sched.warps)
    turns = sorted(sched.turns, key=lambda t: (t.granted is None, t.granted, t.warpgroup))
    stages: dict = {}  # tensor -> the stages of its ring (Q's: one)
    for c in sched.copies:
        stages[c.tensor] = max(stages.get(c.tensor, 0), c.stage + 1)
    lanes = [("copy", name, s) for name in sorted(stages, key="QKV".find) for s in range(stages[name])]
    for wg in wgs:
        lanes += ([("turns", wg, None)] if turns else []) + [("products", wg, None), ("softmax", wg, None)]
    at = {lane: i for i, lane in enumerate(lanes)}
    left, row_h, line = 170, 32, 18  # 14 px text: lanes of 32 px, header lines of 18
    top = 4 * line + 8  # below the legend's two lines and the notice's two
    scale = (width - left - 10) / max(last, 1)
    height = top + row_h * len(lanes) + line + 8
    x = lambda step: left + rank[step] * scale  # noqa: E731
    span = lambda a, b: max(x(b) - x(a), 2)  # noqa: E731 - a bar's width: every bar visible
    order = [str(t.warpgroup) for t in turns]  # whose each turn was, in the order they were granted
    tiles = 1 + max(w.tile for w in sched.work)
    label = (f"ping-pong: {len(turns)} turns at the tensor cores, warpgroups {', '.join(order)}; {tiles} K/V tiles"
             if turns else f"two consumer warpgroups, no turns: {tiles} K/V tiles")
    tspan = lambda colour, text: f'<tspan fill="{colour}">{text}</tspan>'  # noqa: E731 - a legend word, coloured
    header = [f"block 0's warpgroups: {tspan(_FLIGHT, 'TMA copies in flight')}"
              + (f"; {tspan(_IDLE, 'waits for its turn')}, its {tspan(_TURN[1], 'turn')} "
                 f"({tspan(_TURN[2], 'the other&#39;s')}), {tspan(_WAIT, 'hands it on')}" if turns else ""),
              f"wgmmas {tspan(_S, 'S(t) = Q K(t)^T')}, {tspan(_PV, 'O += P(t) V(t)')} (a tick per warp's issue); "
              f"{tspan(_SOFTMAX_TEXT, 'softmax of tile t')}, a bar per warp"]
    header += ([f"the turns alternate, warpgroup {', '.join(order[:4])}, ...: each warpgroup's softmax of a tile",
                "runs in the other's turn (shaded in the other's colour), while the other issues its products"]
               if turns else ["no turns (no named barriers): both warpgroups issue their products",
                              "and run their softmax of a tile together"])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline pingpong" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="14" role="img" aria-label="{html.escape(label)}">']
    out += [f'<text x="4" y="{line * (i + 1) - 4}" fill="{_INK}">{text}</text>' for i, text in enumerate(header)]
    bottom = top + row_h * len(lanes)
    for t in turns:  # each turn shaded down the whole drawing, behind everything
        if t.granted is not None:
            end = max([s for s, _, _ in t.passed], default=t.granted)
            out.append(f'<rect x="{x(t.granted):.1f}" y="{top}" width="{span(t.granted, end):.1f}" '
                       f'height="{bottom - top}" fill="{_TURN.get(t.warpgroup, _IDLE)}" fill-opacity="0.13"/>')
    for lane, i in at.items():
        kind, who, s = lane
        name = (("TMA: Q" if who == "Q" else f"TMA: {who}, stage {s}") if kind == "copy"
                else f"warpgroup {who}: {kind}")
        out.append(f'<text x="4" y="{top + i * row_h + 21}" fill="{_INK}">{name}</text>')
    for c in sched.copies:
        y = top + at[("copy", c.tensor, c.stage)] * row_h
        end = c.landed if c.landed is not None else max(rank)
        what = "Q" if c.tensor == "Q" else f"{c.tensor}{c.tile}"
        tip = html.escape(f"TMA copy of {what} into stage {c.stage}: issued at step {c.issued}, landed at "
                          f"{c.landed if c.landed is not None else 'the end'}")
        out.append(f'<g class="copy"><title>{tip}</title><rect x="{x(c.issued):.1f}" y="{y + 6}" '
                   f'width="{span(c.issued, end):.1f}" height="20" fill="{_FLIGHT}"/><text x="{x(c.issued) + 2:.1f}" '
                   f'y="{y + 21}" fill="{_INK}">{what}</text></g>')
    for t in turns:
        y = top + at[("turns", t.warpgroup, None)] * row_h
        asked = min(s for s, _ in t.asked)
        start = t.granted if t.granted is not None else asked
        end = max([s for s, _, _ in t.passed], default=start)
        tip = html.escape(f"warpgroup {t.warpgroup}'s turn {t.turn}: its warps wait at named barrier {t.barrier} "
                          f"from step {asked}, the turn begins at {start}; {len(t.passed)} arrivals hand it on")
        parts = [f'<g class="turn" data-warpgroup="{t.warpgroup}" data-turn="{t.turn}"><title>{tip}</title>']
        if x(start) > x(asked):
            parts.append(f'<line x1="{x(asked):.1f}" x2="{x(start):.1f}" y1="{y + 16}" y2="{y + 16}" '
                         f'stroke="{_IDLE}" stroke-width="3"/>')
        parts.append(f'<rect class="held" x="{x(start):.1f}" y="{y + 6}" width="{span(start, end):.1f}" height="20" '
                     f'fill="{_TURN.get(t.warpgroup, _IDLE)}"/>')
        parts += [f'<rect x="{x(s) - 1:.1f}" y="{y + 3}" width="3" height="26" fill="{_WAIT}"/>'
                  for s, _, _ in t.passed]  # each warp's arrival at the other's barrier: the turn handed on
        parts.append(f'<text x="{x(start) + 3:.1f}" y="{y + 21}" fill="{_INK}">{t.turn}</text></g>')
        out.append("".join(parts))
    for step, wg, warp, barrier in sched.handoffs:
        if ("turns", wg, None) in at:
            y = top + at[("turns", wg, None)] * row_h
            out.append(f'<rect x="{x(step) - 1:.1f}" y="{y + 3}" width="3" height="26" fill="{_WAIT}"><title>warp '
                       f'{warp} arrives at named barrier {barrier} before its first turn: the other warpgroup goes '
                       f'first</title></rect>')
    for w in sched.work:
        y = top + at[("products", w.warpgroup, None)] * row_h
        for issued, done, dy, colour, what in ((w.s_issued, w.s_done, 3, _S, "S"),
                                               (w.pv_issued, w.pv_done, 18, _PV, "PV")):
            if not issued:
                continue
            start = min(s for s, _ in issued)
            end = max(s for s, _ in done) if done else max(rank)
            tip = html.escape(f"warpgroup {w.warpgroup}, tile {w.tile}: {'S' if what == 'S' else 'P V'}'s "
                              f"{len(issued)} wgmmas issued from step {start}, found done by step {end}")
            out.append(f'<g class="product"><title>{tip}</title><rect x="{x(start):.1f}" y="{y + dy}" '
                       f'width="{span(start, end):.1f}" height="11" fill="{colour}"/>'
                       f'<text x="{x(start) - 2:.1f}" y="{y + dy + 11}" text-anchor="end" '
                       f'fill="{_INK}">{what}{w.tile}</text>'
                       + "".join(f'<line class="issue" data-warpgroup="{w.warpgroup}" x1="{x(s):.1f}" x2="{x(s):.1f}" '
                                 f'y1="{y + dy - 1}" y2="{y + dy + 12}" stroke="{_INK}"/>' for s, _ in issued)
                       + '</g>')
        y = top + at[("softmax", w.warpgroup, None)] * row_h
        warps = sched.warps.get(w.warpgroup, [])
        h = 24 / max(len(warps), 1)
        for a, b, warp in w.softmax:
            out.append(f'<rect class="softmax" data-warpgroup="{w.warpgroup}" data-tile="{w.tile}" data-warp="{warp}" '
                       f'x="{x(a):.1f}" y="{y + 4 + h * warps.index(warp):.1f}" width="{span(a, b):.1f}" '
                       f'height="{h:.1f}" fill="{_SOFTMAX}" stroke="{_INK}" stroke-width="0.3"><title>warp {warp}\'s '
                       f'softmax of tile {w.tile}: steps {a} to {b}</title></rect>')
    out.append(f'<text x="{left}" y="{height - 6}" fill="{_INK}">the events in the order the simulator ran them (an '
               f'order, not a time) &#8594;</text></svg>')
    return "\n".join(out)
