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
"""

from __future__ import annotations

import html

# the page's palette (page.css): in flight, landed, the wait
_FLIGHT, _LANDED, _WAIT, _INK = "#E69F00", "#56B4E9", "#B33C00", "#333333"


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
