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
           f'font-family="sans-serif" font-size="11" role="img" aria-label="copies in flight per stage">',
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
           f'font-family="sans-serif" font-size="11" role="img" aria-label="the TMA ring, stage by stage">',
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
