"""Figures of thread, block and shared-memory behaviour, every one measured from the real kernels.

Each plot function returns a ``matplotlib.figure.Figure`` (made without pyplot, so it works the same in a
notebook, a script or ``make plots``) and keeps the numbers it drew in ``fig.gpukernels_data`` (a dict), which is
what the tests check. Where the numbers come from:

* the **compiler** (``gpukernels.resources``): registers, shared memory and occupancy, for the launch
  configuration the launcher really makes (``Version.launches``);
* the **tracer** (``gpukernels.trace``): every global and shared memory access of a simulated launch, with its
  block, thread, warp, lane and barrier interval -- grid maps, access maps, reuse, tile phases, sectors, banks;
* the **benchmark** (``benchmarks/results/*.json``, written by ``gpukernels bench`` on a GPU): measured times.
  Without one, the performance figures are a *model* and say so in their title.

The figures, each with what it teaches (the function's docstring says more):

=========================  ================================================================================
``grid_map``               which block and which thread computes which output element
``access_map``             which input elements one thread / warp / block reads, naive vs optimized
``reuse_heatmap``          global loads per input element: "naive reads A N times, tiled N/T times"
``tile_phases``            what the shared tile holds in each barrier interval (tiled matmul, fused CBR)
``warp_sectors``           lanes -> 32-byte sectors of one warp's global access (coalesced vs strided)
``warp_banks``             lanes -> shared-memory banks of one warp's shared access (conflicts)
``occupancy_bars``         resident warps per SM per version, and which budget binds
``occupancy_vs_block_size`` occupancy as the block size varies, same registers and shared memory
``performance_bars``       naive vs optimized vs the library peer (measured, or a labelled model)
``roofline``               each version against the FP32 and memory-bandwidth ceilings
``mma_fragments``          which lane holds which element of A, B and C of one mma.sync (tensor cores)
``ldmatrix_banks``         one ldmatrix pass's rows in the bank groups, before and after the swizzle
``attention_traffic``      global bytes against S: naive's stored scores grow as S^2, the fused steps' as S*D
``online_rescaling``       one row's online softmax tile by tile: running max, exp(m_old - m_new), sum
``tma_box``                one TMA box landing in shared memory: each 16-byte chunk's slot under the 128-byte swizzle
``ring_timeline``          a TMA ring's stages over a simulated run: mbarrier waits, copies, wgmmas, releases, phases
``pingpong_timeline``      attention's two consumer warpgroups over a simulated run: turns, products, softmax
=========================  ================================================================================

``gpukernels plots`` (``make plots``) writes all of them to ``docs/figures/`` and ``docs/gallery.md``.
The package is split by figure family; every name is also here, so ``from gpukernels import viz;
viz.grid_map(...)`` is the way to call them:

====================  =========================================================================================
``viz.occupancy``     occupancy_bars, occupancy_vs_block_size (the compiler)
``viz.performance``   performance_bars, roofline, roofline_model, suite_heatmap, load_bench, bench_results
``viz.maps``          grid_map, access_map, reuse_heatmap, tile_phases, staged_sources (the tracer)
``viz.memory``        warp_sectors, warp_banks (the tracer, with its definitions of efficiency and degree)
``viz.traced``        traced, traffic, Traced, FIGURE_SHAPES: one traced run, read via the tracer's public API
``viz.attention``     attention_traffic, online_rescaling, online_softmax_steps (the attention lesson)
``viz.fragments``     mma_fragments, ldmatrix_banks, tf32_split (the tensor-core lesson: layout code)
``viz.hopper``        tma_box, tma_landing, ring_timeline, ring_run (the tensor-core lesson's TMA steps: the simulator)
``viz.pingpong``      pingpong_timeline, pingpong_run (the attention lesson's ping-pong schedule: the simulator)
``viz.gallery``       figure_specs, FigureSpec, GALLERY, write_gallery, plots_main (``gpukernels plots``)
====================  =========================================================================================
"""

from __future__ import annotations

# a few private names too, for code written against the one-file viz (the demo saves PNGs with viz._save_png)
from ._common import (CMAP, CMAP_DIVERGE, GREYS, HATCHES, LIMIT_MARKERS, MARKERS, ROOT, _figure,  # noqa: F401
                      _not_available, _save_png, _trace_module, tracer_available, unavailable)
from .attention import attention_traffic, online_rescaling, online_softmax_steps
from .fragments import fragment_owners, ldmatrix_banks, ldmatrix_phases, mma_fragments, tf32_parts, tf32_split
from .hopper import ring_run, ring_timeline, tma_box, tma_landing
from .pingpong import pingpong_run, pingpong_timeline
from .gallery import GALLERY, GALLERY_HEADER, FigureSpec, figure_specs, plots_main, write_gallery
from .maps import access_map, grid_map, reuse_heatmap, staged_sources, tile_phases
from .memory import warp_banks, warp_sectors
from .occupancy import occupancy_bars, occupancy_vs_block_size
from .performance import (RESULTS_DIR, bench_results, load_bench, performance_bars, roofline, roofline_model,
                          suite_heatmap)
from .traced import FIGURE_SHAPES, Traced, traced, traffic

__all__ = ["mma_fragments", "ldmatrix_banks", "fragment_owners", "ldmatrix_phases", "tf32_parts", "tf32_split",
    "attention_traffic", "online_rescaling", "online_softmax_steps", "tma_box", "tma_landing", "ring_timeline",
    "ring_run", "pingpong_timeline", "pingpong_run",
    "CMAP", "CMAP_DIVERGE", "GREYS", "HATCHES", "LIMIT_MARKERS", "MARKERS", "ROOT", "RESULTS_DIR", "FIGURE_SHAPES",
    "GALLERY", "GALLERY_HEADER", "FigureSpec", "Traced",
    "unavailable", "tracer_available", "figure_specs", "plots_main", "write_gallery",
    "access_map", "grid_map", "reuse_heatmap", "staged_sources", "tile_phases", "warp_banks", "warp_sectors",
    "occupancy_bars", "occupancy_vs_block_size",
    "bench_results", "load_bench", "performance_bars", "roofline", "roofline_model", "suite_heatmap",
    "traced", "traffic",
]
