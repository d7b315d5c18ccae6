"""One self-contained HTML file: the style, the script and the data inlined, nothing fetched."""

from __future__ import annotations

import html
import json
from importlib import resources

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="data:,">
<style>{css}</style>
</head><body>
<header>
<h1 id="title">{title}</h1>
<label for="step">step</label><input type="range" id="step" min="0" max="0" value="0">
<button id="mode-block">block</button><button id="mode-warp">warp</button><button id="mode-thread">thread</button>
<button id="presenter">presenter mode</button>
<span class="keys">keys: &larr; &rarr; step &middot; &uarr; &darr; warp access &middot; b w t select &middot;
0-9 block &middot; p presenter (then space / PgDn: next view)</span>{next}
<div id="steplabel"></div>
<div class="legend"><span><i style="background:#B33C00"></i>read by the selection this step</span>
<span><i style="background:repeating-linear-gradient(45deg,#B33C00 0 3px,#fff 3px 6px)"></i>read by it in
earlier steps</span>
<span><i style="background:#009E73"></i>written by it</span>
<span><i style="background:hsl(212,60%,60%)"></i>loads so far, all blocks (darker = more)</span>
<span><i style="background:#BBBBBB"></i>shared cell set to zero</span>
<span id="legend-halo"><i style="background:#666666"></i>zero beside the image (the halo)</span>
<span><i style="background:#CC79A7"></i>shared cell computed by the block</span></div>
</header>
<svg width="0" height="0" style="position:absolute"><defs><pattern id="earlier" width="6" height="6"
patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>
<rect width="3" height="6" fill="#B33C00"/></pattern></defs></svg>
<div id="main"></div>{timelines}
<script type="application/json" id="data">{data}</script>
<script>{js}</script>
</body></html>
"""


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def render(data: dict, next_page: str | None = None) -> str:
    """The page for ``data`` (gpukernels.classroom.page_data); ``next_page``: the file name of the next lesson's page
    beside it (``make classroom`` writes them all into one folder), linked from the header."""
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    nxt = ""
    if next_page:
        stem = next_page.rsplit(".", 1)[0]
        nxt = f'<a id="next" href="{html.escape(next_page, quote=True)}">next lesson: {html.escape(stem)} &rarr;</a>'
    return _TEMPLATE.format(title=html.escape(data["title"]), css=_asset("page.css"), js=_asset("page.js"), data=blob,
                            next=nxt, timelines=_timelines(data))


def _heading(svg: str) -> str:
    """What a timeline shows, by its SVG's class (gpukernels.classroom.timeline)."""
    if 'class="timeline pingpong"' in svg:
        return ("its consumer warpgroups, turn by turn" if 'class="turn"' in svg
                else "its consumer warpgroups (no turns)")
    return "its TMA ring, stage by stage" if 'class="timeline ring"' in svg else "copies in flight"


def _timelines(data: dict) -> str:
    """The copies in flight per stage of each version that issues cp.async, its TMA ring's stages and mbarrier
    phases, or its consumer warpgroups' turns, products and softmax (gpukernels.classroom.timeline)."""
    parts = [f'<h2>{html.escape(name)}: {_heading(svg)}</h2>{svg}'
             for name, svg in data.get("timelines", {}).items() if svg]
    return f'\n<section id="timelines">{"".join(parts)}</section>' if parts else ""
