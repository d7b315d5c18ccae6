// The classroom page: plain SVG drawn from the JSON that gpukernels.classroom embedded (id="data").
// Two versions side by side share every control: the step slider (barrier intervals grouped into phases), the
// selection mode (block / warp / thread), the warp access shown, and presenter mode. No library, no network.
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const SVGNS = "http://www.w3.org/2000/svg";
// Okabe-Ito (colour-blind safe), chosen for distinct lightness so that greyscale keeps them apart
// "read earlier" is a hatch (id "earlier", defined in the page) so that it differs from the count shading in greyscale
const COL = {sel: "#B33C00", earlier: "url(#earlier)", out: "#009E73", held: "#0072B2", zero: "#BBBBBB", halo: "#666666",
             computed: "#CC79A7", race: "#D55E00", grid: "#333333"};
const SRC_COL = ["#0072B2", "#E69F00", "#56B4E9", "#666666"];  // the global array a tile stages (#CC79A7: computed)
const fmt = (n) => Number(n).toLocaleString("en-US");

// ---- sizes: every drawing is sized from its column's measured width, in px of a 1920 x 1080 design scaled by
// U (the page's CSS does the same with --u), and text never drops below MIN px (14 in presenter mode, 12 else)
// -- so that the page fits any projector from 1280 x 720 to 3840 x 2160 without scrolling sideways.
const U = () => Math.min(window.innerWidth / 1920, window.innerHeight / 1080);
const MIN = () => (state.presenter ? 14 : 12);
const px = (design) => Math.max(MIN(), Math.round(design * U()));  // a font size in px
const textWidth = (text, size) => String(text).length * size * 0.64;  // DejaVu Sans digits and letters, roughly
const widthOf = (box) => Math.max(120, Math.floor(box.getBoundingClientRect().width));

const state = {step: 0, mode: "block", sel: [], access: 0, race: -1, section: 0, presenter: false};

function el(tag, attrs, parent, text) {
  const e = tag === "div" || tag === "span" || tag === "p" || tag === "h2" || tag === "h3" || tag === "button"
    ? document.createElement(tag) : document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (tag === "svg" && attrs && attrs.width) e.setAttribute("viewBox", `0 0 ${attrs.width} ${attrs.height}`);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

// ---- per-version indexes -----------------------------------------------------------------------------------
function prepare(v) {
  v.size = {};
  for (const g of v.global) v.size[g.name] = g.shape.reduce((a, b) => a * b, 1);
  // cumulative loads per element after each step
  v.cum = [];
  let run = {};
  for (const g of v.global) run[g.name] = new Int32Array(v.size[g.name]);
  v.steps.forEach((s, i) => {
    const next = {};
    for (const g of v.global) {
      next[g.name] = run[g.name].slice();
      const add = s.loads[g.name];
      if (add) for (let e = 0; e < add.length; e++) next[g.name][e] += add[e];
    }
    v.cum.push(next);
    run = next;
  });
  v.max = {};
  for (const g of v.global) v.max[g.name] = Math.max(1, ...(v.cum.length ? v.cum[v.cum.length - 1][g.name] : [1]));
  // access runs by (array:kind) -> rows [step, block, thread, start, stride, count]
  v.rows = {};
  for (const [key, flat] of Object.entries(v.access)) {
    const rows = [];
    for (let i = 0; i < flat.length; i += 6) rows.push(flat.slice(i, i + 6));
    v.rows[key] = rows;
  }
  v.nsteps = v.steps.length;
}

function stepOf(v) { return Math.min(state.step, v.nsteps - 1); }
function launchOf(v) { return v.steps[stepOf(v)].launch; }
function nblocks(v, li) { const g = v.launches[li].grid; return g.reduce((a, b) => a * b, 1); }
function nthreads(v, li) { const b = v.launches[li].block; return b.reduce((a, b) => a * b, 1); }

function matches(v, side, row) {
  const s = state.sel[side], li = launchOf(v);
  if (v.steps[row[0]].launch !== li || row[1] !== Math.min(s.block, nblocks(v, li) - 1)) return false;
  if (state.mode === "warp") return (row[2] >> 5) === s.warp;
  if (state.mode === "thread") return row[2] === s.thread;
  return true;
}

// elements of `array` touched (kind) by the selection: {now: Set, before: Set}
function touched(v, side, array, kind) {
  const now = new Set(), before = new Set(), step = stepOf(v);
  for (const r of v.rows[`${array}:${kind}`] || []) {
    if (r[0] > step || !matches(v, side, r)) continue;
    const into = r[0] === step ? now : before;
    for (let i = 0; i < r[5]; i++) into.add(r[3] + r[4] * i);
  }
  return {now, before};
}

// ---- drawing helpers ---------------------------------------------------------------------------------------
// an array as panels of 2-D planes: [count, rows, cols, elements per panel]. A row longer than FOLD values
// (softmax's rows of 1024) is a panel of its own, folded into lines of 32: a warp's 32 consecutive values are a line
const FOLD = 128;
function panels(shape) {
  shape = shape.slice();
  while (shape.length > 1 && shape[shape.length - 1] === 1) shape.pop();  // w (K, C, 1, 1) is a K x C plane
  if (shape.length === 0) return [1, 1, 1, 1];
  if (shape.length === 1) shape = [1, shape[0]];
  const rows = shape[shape.length - 2], cols = shape[shape.length - 1], n = shape.slice(0, -2).reduce((a, b) => a * b, 1);
  if (cols > FOLD) return [n * rows, Math.ceil(cols / 32), 32, cols];
  return [n, rows, cols, rows * cols];
}

function folded(shape) { const s = shape.filter((d, i) => d > 1 || i === 0); return s[s.length - 1] > FOLD; }

function heat(count, max) {  // white -> mid blue, by lightness (reads in greyscale), never as dark as a selection
  const t = Math.min(1, count / max), l = 97 - 37 * t;
  return `hsl(212, 60%, ${l}%)`;
}

const STROKE_MIN = 10;  // px on screen: a smaller cell is drawn without an outline
// the drawing's scale on screen: 1 unless the column is narrower than the drawing (its viewBox shrinks it)
function scaleOf(opts) { return opts.scale || 1; }

// draws an array into at most opts.width x opts.height px (panels laid out for the largest cells); fill(e) gives
// each element's colour; returns the svg
function drawArray(parent, shape, fill, opts) {
  const [np, rows, cols, plen] = panels(shape);
  let best = null;
  for (let pcols = 1; pcols <= np; pcols++) {
    const prows = Math.ceil(np / pcols), W = pcols * cols + (pcols - 1), H = prows * rows + (prows - 1);
    const cell = Math.min(opts.maxCell || 22, (opts.width - 2) / W, opts.height / H);
    if (!best || cell > best.cell + 1e-9) best = {pcols, W, H, cell};
  }
  const {pcols, W, H} = best;
  const cell = Math.max(1, Math.floor(best.cell));
  const svg = el("svg", {width: W * cell + 2, height: H * cell + 2, class: "array"}, parent);
  for (let p = 0; p < np; p++) {
    const ox = (p % pcols) * (cols + 1), oy = Math.floor(p / pcols) * (rows + 1);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
      if (r * cols + c >= plen) continue;  // the last line of a folded row
      const e = p * plen + r * cols + c, f = fill(e);
      const rect = el("rect", {x: 1 + (ox + c) * cell, y: 1 + (oy + r) * cell, width: cell, height: cell,
        fill: f.fill, "data-e": e}, svg);
      // an outline only where the cell stays its legend's colour inside it: on cells of fewer than STROKE_MIN px
      // a border would be most of what shows (drawn inside the cell, a tenth of it wide)
      if (f.stroke && cell * scaleOf(opts) >= STROKE_MIN) {
        const sw = Math.max(1, Math.round(cell / 10));
        for (const [k, v] of [["x", 1 + (ox + c) * cell + sw / 2], ["y", 1 + (oy + r) * cell + sw / 2],
                              ["width", cell - sw], ["height", cell - sw]]) rect.setAttribute(k, v);
        rect.setAttribute("stroke", f.stroke); rect.setAttribute("stroke-width", sw);
      }
      if (f.title) el("title", {}, rect, f.title);
    }
    el("rect", {x: 1 + ox * cell, y: 1 + oy * cell, width: cols * cell, height: rows * cell, fill: "none",
      stroke: COL.grid, "stroke-width": 1.5, "pointer-events": "none"}, svg);
  }
  return svg;
}

// n panes side by side in a box `width` px wide, none narrower than `least` px: [panes per line, pane width]
function paneWidth(width, n, least) {
  const gap = Math.round(18 * U()), k = Math.max(1, Math.min(n, Math.floor((width + gap) / (least + gap))));
  return [k, Math.floor((width - (k - 1) * gap) / k) - 1];
}

function unravel(e, shape) {
  const idx = [];
  for (let i = shape.length - 1; i >= 0; i--) { idx.unshift(e % shape[i]); e = Math.floor(e / shape[i]); }
  return idx;
}

// ---- section 1: blocks, threads, global arrays, shared tiles ----------------------------------------------
function drawGrid(v, side, box) {
  const li = launchOf(v), g = v.launches[li].grid, n = nblocks(v, li), s = state.sel[side], W = widthOf(box);
  const gx = g[0], gy = (g[1] || 1) * (g[2] || 1), font = px(20);
  const cell = Math.max(8, Math.min(Math.round(64 * U()), Math.floor(Math.min(W, 400 * U()) / gx),
                                    Math.floor(Math.max(300 * U(), 4 * font) / gy)));
  const wrap = el("div", {class: "panel"}, box);
  el("h3", {}, wrap, `${v.launches[li].kernel}: grid ${g.join(" x ")} blocks`);
  const svg = el("svg", {width: gx * cell + 2, height: gy * cell + 2, class: "grid"}, wrap);
  for (let b = 0; b < n; b++) {
    const x = b % gx, y = Math.floor(b / gx), on = b === Math.min(s.block, n - 1);
    const r = el("rect", {x: 1 + x * cell, y: 1 + y * cell, width: cell - 2, height: cell - 2, rx: Math.min(4, cell / 6),
      fill: on ? "#222" : "#e8e8e8", stroke: "#222", "stroke-width": cell > 12 ? 2 : 1, class: "block", "data-block": b,
      "data-side": side}, svg);
    r.addEventListener("click", () => { state.sel[side].block = b; render(); });
    if (cell - 4 < Math.max(font, textWidth(b, font))) continue;  // too small to be labelled: the title says which
    const t = el("text", {x: 1 + x * cell + cell / 2 - 1, y: 1 + y * cell + cell / 2 + font * 0.35, "text-anchor": "middle",
      fill: on ? "#fff" : "#222", class: "blocklabel", "font-size": font}, svg, String(b));
    t.addEventListener("click", () => { state.sel[side].block = b; render(); });
  }
  // the block's threads, one row per warp (labelled every `every` warps when the rows are lower than the text)
  const nt = nthreads(v, li), nw = Math.ceil(nt / 32), lab = px(14), labW = textWidth(`w${nw - 1}`, lab) + 6;
  const tc = Math.max(3, Math.min(Math.round(16 * U()), Math.floor((W - labW - 4) / 32),
                                  Math.floor(Math.max(300 * U(), 8 * lab) / nw)));
  const every = Math.ceil((lab + 1) / tc);
  const wrap2 = el("div", {class: "panel"}, box);
  el("h3", {}, wrap2, `block ${Math.min(s.block, n - 1)}: ${nt} threads, ${nw} warps`);
  const svg2 = el("svg", {width: 32 * tc + labW + 2, height: nw * tc + 2 + (every > 1 ? lab : 0), class: "threads"}, wrap2);
  for (let w = 0; w < nw; w++) {
    const pick = () => { Object.assign(state.sel[side], {warp: w, thread: w * 32}); state.mode = "warp"; render(); };
    if (w % every === 0) {
      const t = el("text", {x: 0, y: w * tc + Math.max(tc, lab) - 1, class: "warplabel", "font-size": lab}, svg2, `w${w}`);
      t.addEventListener("click", pick);
    }
    for (let l = 0; l < 32 && w * 32 + l < nt; l++) {
      const t = w * 32 + l;
      const on = state.mode === "block" || (state.mode === "warp" && w === s.warp) || (state.mode === "thread" && t === s.thread);
      const r = el("rect", {x: labW + l * tc, y: 1 + w * tc, width: Math.max(1, tc - 1), height: Math.max(1, tc - 1),
        fill: on ? COL.sel : "#e8e8e8", class: "thread", "data-thread": t, "data-side": side}, svg2);
      r.addEventListener("click", () => {
        Object.assign(state.sel[side], {thread: t, warp: w});
        if (state.mode === "block") state.mode = "thread";
        render();
      });
    }
  }
}

function selectionName(v, side) {
  const s = state.sel[side], b = Math.min(s.block, nblocks(v, launchOf(v)) - 1);
  if (state.mode === "warp") return `block ${b}, warp ${s.warp}`;
  if (state.mode === "thread") return `block ${b}, thread ${s.thread}`;
  return `block ${b}`;
}

function drawArrays(v, side, box) {
  const step = stepOf(v), cum = v.cum[step], held = heldElements(v, side);
  const wrap = el("div", {class: "arrays"}, box);
  const [, width] = paneWidth(widthOf(box), v.global.length, Math.max(150, 200 * U()));
  const height = state.presenter ? Math.max(120, (window.innerHeight - headerHeight()) * 0.3) : 300 * U();
  for (const g of v.global) {
    const pane = el("div", {class: "panel", "data-array": g.name, style: `width: ${width}px`}, wrap);
    const reads = touched(v, side, g.name, "read"), writes = g.written ? touched(v, side, g.name, "write") : null;
    el("h3", {}, pane, `${g.name} ${g.shape.join("x")}${folded(g.shape) ? " (a row per square)" : ""}` +
      `${g.written ? " (output: click an element)" : ""}`);
    const svg = drawArray(pane, g.shape, (e) => {
      const c = cum[g.name][e];
      let fill = heat(c, v.max[g.name]), stroke = null;
      if (writes && (writes.now.has(e) || writes.before.has(e))) fill = COL.out;
      if (reads.before.has(e)) fill = COL.earlier;
      if (reads.now.has(e)) { fill = COL.sel; stroke = "#000"; }
      if (held.has(`${g.name}:${e}`)) stroke = "#000";
      return {fill, stroke, title: `${g.name}[${unravel(e, g.shape).join(", ")}]: ${c} loads so far`};
    }, {width, height});
    if (g.written) svg.addEventListener("click", (ev) => {  // an output element: who computes it, on both sides
      const e = ev.target.getAttribute("data-e");
      if (e !== null) { selectOwner(g.name, Number(e)); render(); }
    });
    const total = cum[g.name].reduce((a, b) => a + b, 0);
    if (writes) {
      const r = el("p", {class: "counts"}, pane);
      el("span", {class: "label"}, r, `${selectionName(v, side)} writes `);
      el("span", {class: "selwrites", id: `s${side}-${g.name}-selwrites`}, r, fmt(writes.now.size + writes.before.size));
      el("span", {class: "label"}, r, " elements");
    }
    if (!g.loads) continue;  // an output that is only written: no loads to count
    const p = el("p", {class: "counts"}, pane);
    el("span", {class: "label"}, p, "loads so far ");
    el("span", {class: "loads", id: `s${side}-${g.name}-loads`}, p, fmt(total));
    el("span", {class: "label"}, p, ` of ${fmt(g.loads)}`);
    const q = el("p", {class: "counts"}, pane);
    el("span", {class: "label"}, q, `${selectionName(v, side)} reads `);
    el("span", {class: "selreads", id: `s${side}-${g.name}-selreads`}, q, fmt(reads.now.size));
    el("span", {class: "label"}, q, ` elements this step`);
  }
}

// select, on every side, the block and thread that write element e of output `array` (the last writer: the pass
// that finishes it), and show that thread
function selectOwner(array, e) {
  DATA.versions.forEach((v, side) => {
    let owner = null;
    for (const r of v.rows[`${array}:write`] || [])
      if ((e - r[3]) % r[4] === 0 && e >= r[3] && e <= r[3] + r[4] * (r[5] - 1)) owner = r;
    if (!owner) return;
    Object.assign(state.sel[side], {block: owner[1], thread: owner[2], warp: owner[2] >> 5});
  });
  if (state.mode === "block") state.mode = "thread";
}

function tileCells(v, tile, side) {
  const b = Math.min(state.sel[side].block, nblocks(v, launchOf(v)) - 1);
  return (tile.cells || {})[`${stepOf(v)}:${b}`] || [];
}

function heldElements(v, side) {
  const out = new Set();
  for (const tile of v.shared) {
    if (tile.launch !== launchOf(v) || !tile.source) continue;
    const cells = tileCells(v, tile, side);
    for (let i = 0; i < cells.length; i += 2) if (cells[i + 1] >= 0) out.add(`${tile.source}:${cells[i + 1]}`);
  }
  return out;
}

function describeHeld(v, tile, cells) {
  const src = v.global.find((g) => g.name === tile.source);
  let lo = null, hi = null, zeros = 0, computed = 0, n = 0;
  for (let i = 0; i < cells.length; i += 2) {
    if (cells[i + 1] === -1) { zeros++; continue; }
    if (cells[i + 1] < 0 || !src) { computed++; continue; }
    n++;
    const idx = unravel(cells[i + 1], src.shape);
    lo = lo ? lo.map((x, k) => Math.min(x, idx[k])) : idx.slice();
    hi = hi ? hi.map((x, k) => Math.max(x, idx[k])) : idx.slice();
  }
  const parts = [];
  if (lo) parts.push(`${n} values of ${tile.source}[${lo.map((x, k) => (x === hi[k] ? `${x}` : `${x}:${hi[k] + 1}`)).join(", ")}]`);
  if (zeros) parts.push(`${zeros} zeros${lo ? "" : " (padding)"}`);
  if (computed) parts.push(`${computed} value${computed === 1 ? "" : "s"} the block computed (partial results)`);
  return parts.join(", ");
}

// What of a tile to draw: where the values a block staged fill a small corner of a large tile (CBR's 6 x 6 image in
// an 18 x 66 tile), the rows and columns around them and one more on each side -- so that the zeros next to the
// image, the halo a 3 x 3 filter reads, are cells one can see (COL.halo), not one pixel of a grey bar.
function cropped(shape, src) {
  const [np, rows, cols, plen] = panels(shape), whole = {shape, at: (e) => e, halo: () => false, note: ""};
  if (plen !== rows * cols || rows < 3) return whole;  // a folded row: nothing to crop
  let r0 = rows, r1 = -1, c0 = cols, c1 = -1;
  for (const [e, s] of src) if (s >= 0) {
    const r = Math.floor((e % plen) / cols), c = e % cols;
    r0 = Math.min(r0, r); r1 = Math.max(r1, r); c0 = Math.min(c0, c); c1 = Math.max(c1, c);
  }
  if (r1 < 0) return whole;
  const near = (e) => {  // a zero cell beside a staged value, in its plane
    const p = Math.floor(e / plen), r = Math.floor((e % plen) / cols), c = e % cols;
    for (let dr = -1; dr <= 1; dr++) for (let dc = -1; dc <= 1; dc++) {
      const rr = r + dr, cc = c + dc;
      if ((dr || dc) && rr >= 0 && rr < rows && cc >= 0 && cc < cols && (src.get(p * plen + rr * cols + cc) ?? -1) >= 0) return true;
    }
    return false;
  };
  r0 = Math.max(0, r0 - 1); r1 = Math.min(rows - 1, r1 + 1); c0 = Math.max(0, c0 - 1); c1 = Math.min(cols - 1, c1 + 1);
  const h = r1 - r0 + 1, w = c1 - c0 + 1;
  if (h * w * 2 > rows * cols) return {...whole, halo: near};  // most of the tile: draw it whole
  const lead = shape.slice(0, shape.length - 2);
  return {shape: [...lead, h, w], halo: near,
          at: (e2) => { const p = Math.floor(e2 / (h * w)), r = Math.floor((e2 % (h * w)) / w), c = e2 % w;
                        return p * plen + (r0 + r) * cols + c0 + c; },
          note: `rows ${r0}-${r1}, columns ${c0}-${c1} shown (the rest: zeros)`};
}

// A flat shared array that stages a 2-D matrix (the tensor-core steps' sa and sb, which the kernel addresses through
// a layout function such as swizzled_a): drawn as shared memory is served, in lines of 128 bytes -- the 32 banks --
// each 16-byte chunk coloured by which chunk of its matrix row it holds (0-7, CHUNK_COL). A row-major tile shows the
// chunks in order on every line; the XOR swizzle shows as their order changing from line to line.
const CHUNK_COL = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#8C564B"];
function byLines(tile, from) {
  if (tile.shape.length !== 1 || !from || from.shape.length !== 2 || !tile.itemsize) return null;
  const per = Math.max(1, Math.floor(128 / tile.itemsize)), cols = from.shape[1];
  return {shape: [Math.ceil(tile.shape[0] / per), per], at: (e) => e, halo: () => false,
          colour: (s) => CHUNK_COL[Math.floor(((s % cols) * from.itemsize) / 16) % 8],
          note: `in 128-byte lines (the 32 banks); colour: which 16-byte chunk (0-7) of a row of ${from.name} ` +
                `each chunk holds`};
}

function drawTiles(v, side, box, raceCells) {
  const mine = v.shared.filter((t) => t.launch === launchOf(v));
  const wrap = el("div", {class: "tiles"}, box);
  if (!mine.length) { el("p", {class: "note"}, wrap, "no shared memory: every load goes to global memory"); return; }
  const [, width] = paneWidth(widthOf(box), mine.length, Math.max(150, 220 * U()));
  const height = state.presenter ? Math.max(100, (window.innerHeight - headerHeight()) * 0.22) : 260 * U();
  for (const tile of mine) {
    const cells = tileCells(v, tile, side), src = new Map();
    for (let i = 0; i < cells.length; i += 2) src.set(cells[i], cells[i + 1]);
    const pane = el("div", {class: "panel", "data-tile": tile.name, style: `max-width: ${width}px`}, wrap);
    const from = v.global.find((g) => g.name === tile.source);
    const lines = byLines(tile, from);
    const view = lines || cropped(tile.shape, src);
    el("h3", {}, pane, `${tile.name} ${tile.shape.join("x")} (shared)` + (view.note ? `: ${view.note}` : ""));
    const ci = Math.max(0, v.global.findIndex((g) => g.name === tile.source));
    const racing = raceCells ? raceCells(tile.name) : null;
    drawArray(pane, view.shape, (e2) => {
      const e = view.at(e2);
      if (src.get(e) === -1 && view.halo(e)) state.haloShown = true;
      let fill = !src.has(e) ? "#f4f4f4" : src.get(e) === -1 ? (view.halo(e) ? COL.halo : COL.zero)
        : src.get(e) < 0 ? COL.computed : lines ? lines.colour(src.get(e)) : SRC_COL[ci % SRC_COL.length];
      let stroke = null;
      if (racing && racing.has(e)) { fill = COL.race; stroke = "#000"; }
      return {fill, stroke};
    }, {width, height, maxCell: Math.max(4, Math.round(16 * U()))});
    el("p", {class: "counts held", id: `s${side}-${tile.name}-held`}, pane,
      cells.length ? `holds ${describeHeld(v, tile, cells)}` : "not written in this step");
  }
}

// ---- section 2: one warp access -------------------------------------------------------------------------
function warpAccesses(v, side) {
  const s = state.sel[side], b = Math.min(s.block, nblocks(v, launchOf(v)) - 1);
  const w = Math.min(s.warp, Math.ceil(nthreads(v, launchOf(v)) / 32) - 1);
  return {list: v.warps[`${stepOf(v)}:${b}:${w}`] || [], b, w};
}

// numbers under a row of n slots `pitch` px apart, every `every`-th one so that they never touch
function labelEvery(n, pitch, size, widest) {
  let every = 1;
  while (every < n && pitch * every < textWidth(widest, size) + size * 0.4) every *= 2;
  return every;
}

function drawWarp(v, side, box) {
  const {list, b, w} = warpAccesses(v, side);
  const pane = el("div", {class: "panel warp"}, box);
  if (!list.length) { el("p", {class: "note"}, pane, `block ${b}, warp ${w}: no access in this step`); return; }
  const a = list[state.access % list.length], line = v.lines[a[0]], lanes = a.slice(1, 33), width = line.width || 1;
  el("h3", {}, pane, `block ${b}, warp ${w}, access ${state.access % list.length + 1} of ${list.length}: ` +
    `${line.kind} of ${line.array} (${line.space})` + (width > 1 ? `, ${width * line.itemsize} bytes per lane` : ""));
  // the kernel's own lines first; a helper's line (tensor_core's half_at: `return x[i, j]`) is how they reach memory
  for (const k of line.kernel || []) el("p", {class: "source"}, pane, `${k.location}: ${k.source}`);
  el("p", {class: line.kernel ? "source helper" : "source"}, pane,
     (line.kernel ? "through the helper's line " : "") + `${line.location}: ${line.source}`);
  // geometry: 32 lanes across the column, their numbers above, sectors or banks below
  const W = widthOf(pane), font = px(14), pad = 4, lw = Math.max(4, Math.floor((W - 2 * pad) / 32));
  const laneY = font + 6, laneH = Math.round(Math.max(16, 30 * U())), lowY = laneY + laneH + Math.round(Math.max(60, 150 * U()));
  const lowH = Math.round(Math.max(40, 60 * U())), H = lowY + lowH + font + 8, xs = (i, pitch) => pad + i * pitch;
  const svg = el("svg", {width: 32 * lw + 2 * pad, height: H, class: "lanes"}, pane);
  const every = labelEvery(32, lw, font, "31");
  for (let l = 0; l < 32; l++) {
    el("rect", {x: xs(l, lw), y: laneY, width: lw - Math.min(3, lw / 4), height: laneH, fill: lanes[l] < 0 ? "#eee" : "#222"}, svg);
    if (l % every === 0) el("text", {x: xs(l, lw) + lw / 2, y: font, "text-anchor": "middle", "font-size": font}, svg, String(l));
  }
  const laneX = (l) => xs(l, lw) + lw / 2;
  const caption = el("p", {class: "counts"}, pane);
  if (line.space === "global") {
    // lane l moves bytes [e * itemsize, (e + width) * itemsize): one 32-byte sector, or two when it straddles
    const sectorsOf = (e) => { const lo = (e * line.itemsize) >> 5, hi = ((e + width) * line.itemsize - 1) >> 5;
      return Array.from({length: hi - lo + 1}, (_, i) => lo + i); };
    const secs = [...new Set(lanes.filter((e) => e >= 0).flatMap(sectorsOf))].sort((x, y) => x - y);
    const sw = Math.min(Math.round(120 * U()) + 10, Math.floor((32 * lw) / Math.max(1, secs.length)));
    const long = textWidth(`sector ${secs[secs.length - 1]}`, font) + 6 <= sw;
    const severy = long ? 1 : labelEvery(secs.length, sw, font, String(secs[secs.length - 1]));
    secs.forEach((sct, i) => {
      el("rect", {x: xs(i, sw), y: lowY, width: Math.max(1, sw - Math.min(4, sw / 4)), height: lowH, fill: SRC_COL[0]}, svg);
      if (i % severy === 0) el("text", {x: xs(i, sw) + sw / 2, y: lowY + lowH + font + 2, "text-anchor": "middle",
        "font-size": font}, svg, long ? `sector ${sct}` : String(sct));
    });
    lanes.forEach((e, l) => {
      if (e < 0) return;
      for (const sct of sectorsOf(e)) el("line", {x1: laneX(l), y1: laneY + laneH, x2: xs(secs.indexOf(sct), sw) + sw / 2,
        y2: lowY, stroke: "#444", "stroke-width": 1.5}, svg);
    });
    const eff = a[34] / a[33];
    el("span", {class: "label"}, caption, "this access: ");
    el("span", {class: "sectors", id: `s${side}-sectors`}, caption, String(a[33]));
    el("span", {class: "label"}, caption, ` sectors of 32 bytes, minimum ${a[34]}: efficiency `);
    el("span", {class: "eff", id: `s${side}-eff`}, caption, `${(100 * eff).toFixed(0)}%`);
    if (width > 1) el("span", {class: "label"}, caption, ` (one ${width * line.itemsize}-byte access per lane: ` +
      `${fmt(32 * width * line.itemsize)} bytes for the warp when every lane takes part)`);
    el("p", {class: "counts tracer", id: `s${side}-line`}, pane, `this line over the whole run (tracer): ` +
      `${fmt(line.requests)} warp accesses, ${fmt(line.sectors)} sectors, minimum ${fmt(line.min_sectors)}, ` +
      `efficiency ${(100 * line.efficiency).toFixed(1)}%`);
  } else {
    // the 4-byte words each lane uses (a 16-byte access: 4 of them), stacked per bank in the order needed
    const wordsOf = (e) => { const lo = (e * line.itemsize) >> 2, hi = ((e + width) * line.itemsize - 1) >> 2;
      return Array.from({length: hi - lo + 1}, (_, i) => lo + i); };
    const words = {};
    lanes.forEach((e) => { if (e >= 0) for (const wd of wordsOf(e)) (words[wd & 31] ||= new Set()).add(wd); });
    const levels = {};
    for (const [bank, set] of Object.entries(words)) levels[bank] = [...set].sort((x, y) => x - y);
    const deepest = Math.max(1, ...Object.values(levels).map((l) => l.length));
    const bankTop = laneY + laneH + Math.round(Math.max(40, 100 * U())), bankH = lowY + lowH - bankTop;
    const lh = Math.min(Math.round(22 * U()) + 2, (bankH - 4) / deepest);
    const bevery = labelEvery(32, lw, font, "31");
    for (let k = 0; k < 32; k++) {
      el("rect", {x: xs(k, lw), y: bankTop, width: lw - Math.min(3, lw / 4), height: bankH, fill: "#f4f4f4", stroke: "#999"}, svg);
      if (k % bevery === 0) el("text", {x: xs(k, lw) + lw / 2, y: lowY + lowH + font + 2, "text-anchor": "middle",
        "font-size": font}, svg, String(k));
      (levels[k] || []).forEach((wd, i) => el("rect", {x: xs(k, lw) + 2, y: bankTop + bankH - 2 - (i + 1) * lh,
        width: Math.max(1, lw - Math.min(3, lw / 4) - 4), height: Math.max(1, lh - 2), fill: i === 0 ? SRC_COL[0] : COL.race}, svg));
    }
    lanes.forEach((e, l) => {
      if (e < 0) return;
      for (const wd of wordsOf(e)) {
        const k = wd & 31, i = levels[k].indexOf(wd);
        el("line", {x1: laneX(l), y1: laneY + laneH, x2: xs(k, lw) + lw / 2, y2: bankTop + bankH - 2 - i * lh - lh / 2,
          stroke: "#444", "stroke-width": 1.5}, svg);
      }
    });
    el("span", {class: "label"}, caption, "this access: conflict degree ");
    el("span", {class: "degree", id: `s${side}-degree`}, caption, String(a[33]));
    el("span", {class: "label"}, caption, a[33] === 1 ? " (conflict-free: one wavefront)" : ` (${a[33]} wavefronts: the banks serve them one after another)`);
    el("p", {class: "counts tracer", id: `s${side}-line`}, pane, `this line over the whole run (tracer): ` +
      `${fmt(line.requests)} warp accesses, mean degree ${line.mean_degree.toFixed(2)}, max ${line.max_degree}`);
  }
}

// ---- section 3: the missing barrier --------------------------------------------------------------------
function drawRace(box) {
  const v = DATA.broken;
  if (!v) { el("p", {class: "note"}, box, "this lesson has no broken variant"); return; }
  const side = 2, b = Math.min(state.sel[side].block, nblocks(v, launchOf(v)) - 1), step = stepOf(v);
  const cellsOf = (r) => { const s = new Set(); for (let i = 0; i < r.cells.length; i += 3)
    if (r.cells[i] === step && r.cells[i + 1] === b) s.add(r.cells[i + 2]); return s; };
  const left = el("div", {class: "side"}, box), right = el("div", {class: "side"}, box);
  el("h2", {}, left, `${v.name}: ${DATA.missing} removed`);
  drawGrid(v, side, el("div", {class: "row"}, left));
  drawTiles(v, side, left, (name) => {
    const s = new Set();
    v.races.forEach((r, i) => { if (r.array === name && (state.race < 0 || state.race === i)) for (const e of cellsOf(r)) s.add(e); });
    return s;
  });
  el("h2", {}, right, `${v.races.length} racing pair${v.races.length === 1 ? "" : "s"} of lines (tracer)`);
  v.races.forEach((r, i) => {
    const item = el("div", {class: "race" + (state.race === i ? " on" : ""), "data-race": i}, right);
    el("p", {class: "hazard"}, item, `${r.hazard} on ${r.array}: ${fmt(r.elements)} elements in all blocks; ` +
      `${fmt(cellsOf(r).size)} in block ${b}, this step`);
    el("p", {class: "source"}, item, `${r.first.location} (${r.first.kind}): ${r.first.source}`);
    el("p", {class: "source"}, item, `${r.second.location} (${r.second.kind}): ${r.second.source}`);
    item.addEventListener("click", () => { state.race = state.race === i ? -1 : i; render(); });
  });
  if (v.races.length) el("p", {class: "note"}, right, v.races[0].hint);
}

// ---- the page ------------------------------------------------------------------------------------------
const SECTIONS = [["blocks", "Blocks, threads and the elements they touch"], ["warp", "One warp access at a time"],
                  ["race", "The missing barrier"]];

function render() {
  const maxSteps = Math.max(...DATA.versions.map((v) => v.nsteps), DATA.broken ? DATA.broken.nsteps : 1);
  const slider = document.getElementById("step");
  slider.max = maxSteps - 1;
  slider.value = state.step;
  // a page of one step (no version has barrier phases at this size) has nothing to slide: say so, not "step 1 of 1"
  slider.disabled = maxSteps < 2;
  document.body.classList.toggle("onestep", maxSteps < 2);
  const labels = DATA.versions.map((v) => `${v.name}: ${v.steps[stepOf(v)].label}`).join(" | ");
  document.getElementById("steplabel").textContent = maxSteps < 2
    ? `one step at this size (no barrier phases to walk through): ${labels}` : `step ${state.step + 1} of ${maxSteps}: ${labels}`;
  for (const m of ["block", "warp", "thread"]) document.getElementById(`mode-${m}`).classList.toggle("on", state.mode === m);
  document.body.classList.toggle("presenter", state.presenter);
  document.getElementById("presenter").classList.toggle("on", state.presenter);
  const main = document.getElementById("main");
  main.innerHTML = "";
  state.haloShown = false;
  SECTIONS.forEach(([id, title], i) => {
    if (id === "race" && !DATA.broken) return;
    const sec = el("div", {class: "section", id: `sec-${id}`}, main);
    if (state.presenter && i !== state.section) sec.style.display = "none";
    el("h2", {class: "sectitle"}, sec, title);
    const body = el("div", {class: "sides"}, sec);
    if (id === "race") { drawRace(body); return; }
    // both columns first: each drawing is sized from its column's width, which the other column halves
    const cols = DATA.versions.map((v, side) => el("div", {class: "side", id: `side${side}`}, body));
    DATA.versions.forEach((v, side) => {
      const col = cols[side];
      el("h2", {}, col, `${v.name}: ${v.idea}`);
      if (id === "blocks") {
        drawGrid(v, side, el("div", {class: "row"}, col));
        drawArrays(v, side, col);
        drawTiles(v, side, col);
      } else drawWarp(v, side, col);
    });
  });
  document.getElementById("legend-halo").style.display = state.haloShown ? "" : "none";  // only where drawn
}

// presenter mode shows one view, its drawings sized to the screen below the header (text is never scaled down)
function headerHeight() { return document.querySelector("header").getBoundingClientRect().height; }

function go(delta) {
  const maxSteps = Number(document.getElementById("step").max) + 1;
  state.step = Math.max(0, Math.min(maxSteps - 1, state.step + delta));
  render();
}

function init() {
  DATA.versions.forEach(prepare);
  if (DATA.broken) prepare(DATA.broken);
  state.sel = [0, 1, 2].map(() => ({block: 0, warp: 0, thread: 0}));
  document.getElementById("title").textContent = DATA.title;
  document.getElementById("step").addEventListener("input", (e) => { state.step = Number(e.target.value); render(); });
  for (const m of ["block", "warp", "thread"])
    document.getElementById(`mode-${m}`).addEventListener("click", () => { state.mode = m; render(); });
  document.getElementById("presenter").addEventListener("click", () => { state.presenter = !state.presenter; render(); });
  let pending = 0;  // every drawing is sized from the window: draw again once a resize settles
  window.addEventListener("resize", () => { clearTimeout(pending); pending = setTimeout(render, 60); });
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT" && (e.key === "ArrowLeft" || e.key === "ArrowRight")) { e.preventDefault(); }
    const sections = DATA.broken ? 3 : 2;
    if (e.key === "ArrowRight") go(1);
    else if (e.key === "ArrowLeft") go(-1);
    else if (e.key === "ArrowDown") { state.access++; render(); }
    else if (e.key === "ArrowUp") { state.access = Math.max(0, state.access - 1); render(); }
    // Space / PgDn / PgUp change the view in presenter mode only: otherwise the page scrolls, by keyboard or clicker
    else if (state.presenter && (e.key === "PageDown" || e.key === " " || e.key === "n")) { state.section = (state.section + 1) % sections; render(); }
    else if (state.presenter && (e.key === "PageUp" || e.key === "Backspace")) { state.section = (state.section + sections - 1) % sections; render(); }
    else if (e.key === "p") { state.presenter = !state.presenter; render(); }
    else if (e.key === "b" || e.key === "w" || e.key === "t") { state.mode = {b: "block", w: "warp", t: "thread"}[e.key]; render(); }
    else if (/^[0-9]$/.test(e.key)) { state.sel.forEach((s) => { s.block = Number(e.key); }); render(); }
    else return;
    e.preventDefault();
  });
  render();
}
init();
