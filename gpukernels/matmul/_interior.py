"""The kernel factory behind steps 10-17: step 9's ``unrolled`` kernel with its choices made parameters.

Each later step is one call of `make_interior_kernel` that changes one argument (its own file says which and
what it measured): ``interior`` is the base, ``deep_k`` sets ``bk=16``, ``swizzled`` ``group=8``, ``wave_fit``
adds a 64 x 64 tile, ``vector_loads`` sets ``vec=True``, ``thread_16x8`` ``rows=16`` (with a 256 x 128 tile) and
``split_k`` sets ``split_k=True``.
"""

from __future__ import annotations

from numba import cuda, float32, int32, uint64

from .._intrinsics import async_commit, async_wait, copy_async, copy_async16, load4


def make_interior_kernel(bm: int, bn: int, bk: int = 8, group: int = 1, launch_bounds=None, rows: int = 8,
                         vec: bool = False, split_k: bool = False, clamp: bool = True, stream_k: bool = False,
                         stages: int = 0, fixup: bool = False, spread: bool = False):
    """The ``unrolled`` kernel, generalised: a bm x bn block tile (multiples of 64), ``rows`` x 8 outputs per
    thread (8 or 16 rows, as rows/4 x 2 sub-blocks of 4 x 4), bk-deep k tiles (8 or 16), an unguarded path for
    interior tiles, an optional grouped block order (``group`` tile rows per group) and optional 16-byte global
    loads on the interior path (``vec``; the launcher must have checked the alignment), and an optional split of
    K over the grid's z (``split_k``: block z sums its slice of K and adds it to C with atomics, so C must start
    at zero), and whether edge blocks clamp their indices (``clamp``, see `load_tile`) or guard every load as
    ``interior`` first did, and whether the blocks share out the last waves' k tiles evenly (``stream_k``, see
    `stream_k_kernel` below), and whether interior tiles are copied global -> shared by ``cp.async`` through a ring of
    ``stages`` shared buffers instead of through registers (``stages``, see `async_loop`; its 16-byte copies of B
    need aligned rows, which the launcher checks as for ``vec``), and whether the slices of K meet in a workspace
    instead of by atomics into C (``fixup``, see `split_fixup_kernel`: no zero pass, and the same bits whichever
    slice finishes last; ``optimized`` weighs it against the atomics), and whether a stream-K tile may be cut
    between more than two blocks (``spread``, see `stream_k_kernel`). All of them size shared
    tiles, register arrays or the thread layout, or pick code, so they are compile-time constants: one kernel is
    compiled per combination."""
    tn, tm = bn // 8, bm // rows  # threads along the columns and along the rows of the tile
    threads = tm * tn
    tn_shift = tn.bit_length() - 1
    subs = rows // 4  # 4 x 4 sub-blocks per thread along M, qm rows apart
    qm, hn = bm // subs, bn // 2  # the second 4 x 4 sub-block along N starts half a tile further
    k_runs = bk // 4  # 4-float runs per row of the A tile
    k_shift = k_runs.bit_length() - 1
    a_runs = bm * bk // 4 // threads  # 4-float runs of the A tile (along k) each thread loads
    b_runs = bk * bn // 4 // threads  # 4-float runs of the B tile (along n) each thread loads
    a_regs, b_regs = a_runs * 4, b_runs * 4  # prefetch registers (compile-time sizes of the local arrays)
    b_row_runs = bn // 4
    b_shift = b_row_runs.bit_length() - 1
    nbuf = max(2, stages)  # shared buffers per tile: 2 (register prefetch) or the cp.async ring
    a_elems = bm * bk // threads  # A elements each thread copies per tile with cp.async (4 bytes each)
    a_rows, b_rows = threads // bk, threads // (bn // 4)  # tile rows between a thread's copies of A, of B
    bk_shift = bk.bit_length() - 1
    waits = stages - 2  # cp.async groups that may stay in flight when a tile is used (a compile-time constant)
    row_len = bm + 4  # transposed A tile row: a multiple of 4 floats (16-byte aligned), spreads the stores
    assert tm * rows == bm and tn * 8 == bn and a_runs >= 1 and b_runs >= 1 and 1 << tn_shift == tn
    assert bk in (8, 16) and rows in (4, 8, 16) and stages in (0, 3, 4)
    assert not stages or (a_elems * threads == bm * bk and threads % bk == 0 and threads % (bn // 4) == 0)

    @cuda.jit(device=True, forceinline=True)
    def load_tile(a, b, a_next, b_next, k, row0, col0, t, inside, clamp):
        # Global -> registers: the A tile as runs of 4 consecutive k in a row, the B tile as runs of 4
        # consecutive columns (a warp reads contiguous bytes). `inside` (the same for the whole block) means the
        # k tile lies wholly inside K and, unless `clamp`, the tile wholly inside A and B: no comparisons, no
        # selects -- 8 plain loads. `clamp` (a block on the right or bottom edge) moves a row of A past M back
        # to row M - 1 and a run of B past N back to the last one: what they load lands only in rows and columns
        # of C that are never stored, so the loads need no selects, and 16-byte ones still work. Tiles that cross
        # K (the last one) load 0 for elements outside (0 * x adds nothing).
        m, kdim = a.shape
        n = b.shape[1]
        if inside:
            for l in range(a_runs):
                run = t + l * threads
                gr, gk = uint64(row0 + (run >> k_shift)), uint64(k + (run & (k_runs - 1)) * 4)
                if clamp:
                    gr = min(gr, uint64(m - 1))
                if vec:  # one 16-byte load (the launcher checked the alignment)
                    a_next[l * 4], a_next[l * 4 + 1], a_next[l * 4 + 2], a_next[l * 4 + 3] = load4(a, gr, gk)
                else:
                    for q in range(4):
                        a_next[l * 4 + q] = a[gr, gk + uint64(q)]
            for l in range(b_runs):
                run = t + l * threads
                gk, gc = uint64(k + (run >> b_shift)), uint64(col0 + (run & (b_row_runs - 1)) * 4)
                if vec:
                    if clamp:  # N is a multiple of 4 here (aligned rows), so is every run's start
                        gc = min(gc, uint64(n - 4))
                    b_next[l * 4], b_next[l * 4 + 1], b_next[l * 4 + 2], b_next[l * 4 + 3] = load4(b, gk, gc)
                else:
                    for q in range(4):
                        b_next[l * 4 + q] = b[gk, min(gc + uint64(q), uint64(n - 1)) if clamp else gc + uint64(q)]
        else:
            for l in range(a_runs):
                run = t + l * threads
                gr, gk = row0 + (run >> k_shift), k + (run & (k_runs - 1)) * 4
                for q in range(4):
                    a_next[l * 4 + q] = a[gr, gk + q] if gr < m and gk + q < kdim else float32(0.0)
            for l in range(b_runs):
                run = t + l * threads
                gk, gc = k + (run >> b_shift), col0 + (run & (b_row_runs - 1)) * 4
                for q in range(4):
                    b_next[l * 4 + q] = b[gk, gc + q] if gk < kdim and gc + q < n else float32(0.0)

    @cuda.jit(device=True, forceinline=True)
    def store_tile(a_tile, b_tile, a_next, b_next, buf, t):
        for l in range(a_runs):
            run = t + l * threads
            for q in range(4):
                a_tile[buf, (run & (k_runs - 1)) * 4 + q, run >> k_shift] = a_next[l * 4 + q]
        for l in range(b_runs):
            run = t + l * threads
            for q in range(4):
                b_tile[buf, run >> b_shift, (run & (b_row_runs - 1)) * 4 + q] = b_next[l * 4 + q]

    @cuda.jit(device=True, forceinline=True)
    def outer_product(a_tile, b_tile, cur, kk, ty4, tx4, acc, a_frag, b_frag):
        for s in range(subs):
            for i in range(4):
                a_frag[4 * s + i] = a_tile[cur, kk, s * qm + ty4 + i]
        for i in range(4):
            b_frag[i] = b_tile[cur, kk, tx4 + i]
            b_frag[4 + i] = b_tile[cur, kk, hn + tx4 + i]
        for i in range(rows):
            for j in range(8):
                acc[i, j] += a_frag[i] * b_frag[j]

    @cuda.jit(device=True, forceinline=True)
    def multiply_tile(a_tile, b_tile, cur, ty4, tx4, acc, a_frag, b_frag):
        # One bk-deep tile of shared buffer `cur` into the accumulators, written out as bk calls (the kk loop
        # stays rolled otherwise: `unrolled`).
        outer_product(a_tile, b_tile, cur, 0, ty4, tx4, acc, a_frag, b_frag)
        outer_product(a_tile, b_tile, cur, 1, ty4, tx4, acc, a_frag, b_frag)
        outer_product(a_tile, b_tile, cur, 2, ty4, tx4, acc, a_frag, b_frag)
        outer_product(a_tile, b_tile, cur, 3, ty4, tx4, acc, a_frag, b_frag)
        outer_product(a_tile, b_tile, cur, 4, ty4, tx4, acc, a_frag, b_frag)
        outer_product(a_tile, b_tile, cur, 5, ty4, tx4, acc, a_frag, b_frag)
        outer_product(a_tile, b_tile, cur, 6, ty4, tx4, acc, a_frag, b_frag)
        outer_product(a_tile, b_tile, cur, 7, ty4, tx4, acc, a_frag, b_frag)
        if bk == 16:  # a closure constant: the branch is resolved at compile time
            outer_product(a_tile, b_tile, cur, 8, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 9, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 10, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 11, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 12, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 13, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 14, ty4, tx4, acc, a_frag, b_frag)
            outer_product(a_tile, b_tile, cur, 15, ty4, tx4, acc, a_frag, b_frag)

    @cuda.jit(device=True, forceinline=True)
    def main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, inside_mn,
                  k_begin, k_end):
        # The double-buffered k loop of `unrolled`. It is inlined twice, with inside_mn the constant True
        # (interior blocks) or False (edge blocks, which clamp their rows and columns), so each copy is compiled
        # with only the loads it needs. Tiles [k0, k0 + bk) for k0 = k_begin, k_begin + bk, ... < k_end. A slice of
        # K (split_k) is a whole number of tiles long, so a tile crosses k_end only at K itself, where the edge
        # loads' guards stop it.
        if stages and inside_mn:
            async_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, t, tx4, ty4, row0, col0, k_begin, k_end)
            return
        kdim = a.shape[1]
        clamped = clamp and not inside_mn  # edge blocks: clamped indices (or, without clamp, guarded loads)
        guarded = not clamp and not inside_mn
        load_tile(a, b, a_next, b_next, k_begin, row0, col0, t, k_begin + bk <= kdim and not guarded, clamped)
        store_tile(a_tile, b_tile, a_next, b_next, 0, t)
        cuda.syncthreads()
        step = 0
        for k0 in range(k_begin, k_end, bk):
            cur = step & 1
            k1 = k0 + bk
            if k1 < k_end:
                load_tile(a, b, a_next, b_next, k1, row0, col0, t, k1 + bk <= kdim and not guarded, clamped)
            multiply_tile(a_tile, b_tile, cur, ty4, tx4, acc, a_frag, b_frag)
            if k1 < k_end:
                store_tile(a_tile, b_tile, a_next, b_next, cur ^ 1, t)
            cuda.syncthreads()
            step += 1

    @cuda.jit(device=True, forceinline=True)
    def copy_tile(a, b, a_tile, b_tile, stage, k, a_src, b_src, a_dst, b_dst, t):
        # Global -> shared without registers (cp.async), from flat element offsets the caller advances by one
        # tile (a_src: A[row0 + t / bk, k + t % bk]; b_src: B[k + t / (bn / 4), col0 + 4 (t % (bn / 4))]), so each
        # copy is one add and an immediate offset. The A tile goes one float at a time, so that each lands
        # transposed (a warp copies 4 rows x 8 k: 4 whole 32-byte sectors, into 32 different banks); the B tile 16
        # bytes at a time. Interior blocks only (every row and column inside); k past K copies zeros.
        kdim, n = a.shape[1], b.shape[1]
        a_off, b_off = stage * (bk * row_len) + a_dst, stage * (bk * bn) + b_dst
        if k + bk <= kdim:
            for l in range(a_elems):
                copy_async(a_tile, a_off + l * a_rows, a, a_src + uint64(l * a_rows * kdim), 4)
            for l in range(b_runs):
                copy_async16(b_tile, b_off + l * b_rows * bn, b, b_src + uint64(l * b_rows * n), 16)
        else:  # the tile that crosses K: a zero-length copy reads nothing (its source is any valid address)
            live = (t & (bk - 1)) < kdim - k
            for l in range(a_elems):
                copy_async(a_tile, a_off + l * a_rows, a, a_src + uint64(l * a_rows * kdim) if live else uint64(0),
                           4 if live else 0)
            for l in range(b_runs):
                live = (t >> b_shift) + l * b_rows < kdim - k
                copy_async16(b_tile, b_off + l * b_rows * bn, b, b_src + uint64(l * b_rows * n) if live else uint64(0),
                             16 if live else 0)

    @cuda.jit(device=True, forceinline=True)
    def async_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, t, tx4, ty4, row0, col0, k_begin, k_end):
        # The k loop of an interior tile with a ring of `stages` shared buffers filled by cp.async: while tile i
        # is multiplied, tiles i + 1 .. i + stages - 1 are on their way, and no register holds them (the
        # register prefetch of `main_loop` needs 12 registers per thread and a store after the loads land). One
        # barrier per tile: it makes tile i's copies visible to the block, and tells every thread that all are
        # done with the buffer tile i - 1 used, which the copy issued just after it overwrites.
        kdim, n = a.shape[1], b.shape[1]
        ntiles = (k_end - k_begin + bk - 1) // bk
        a_src = uint64(row0 + (t >> bk_shift)) * uint64(kdim) + uint64(k_begin + (t & (bk - 1)))
        b_src = uint64(k_begin + (t >> b_shift)) * uint64(n) + uint64(col0 + (t & (b_row_runs - 1)) * 4)
        a_dst = (t & (bk - 1)) * row_len + (t >> bk_shift)
        b_dst = (t >> b_shift) * bn + (t & (b_row_runs - 1)) * 4
        k = k_begin
        for p in range(stages - 1):
            if p < ntiles:
                copy_tile(a, b, a_tile, b_tile, p, k, a_src, b_src, a_dst, b_dst, t)
                a_src += uint64(bk)
                b_src += uint64(bk * n)
                k += bk
            async_commit()  # an empty group when there is no tile: the wait below counts groups
        cur = 0
        nxt = stages - 1
        for i in range(ntiles):
            async_wait(waits)
            cuda.syncthreads()
            if i + stages - 1 < ntiles:
                copy_tile(a, b, a_tile, b_tile, nxt, k, a_src, b_src, a_dst, b_dst, t)
                a_src += uint64(bk)
                b_src += uint64(bk * n)
                k += bk
            async_commit()
            multiply_tile(a_tile, b_tile, cur, ty4, tx4, acc, a_frag, b_frag)
            cur = 0 if cur == stages - 1 else cur + 1
            nxt = 0 if nxt == stages - 1 else nxt + 1
        cuda.syncthreads()  # the next user of the buffers (another tile's prologue) waits for the last reads

    def interior_kernel(a, b, c):
        # `unrolled` checks every global load against the matrix edges: in the SASS each load costs a compare,
        # a select or branch and 64-bit index arithmetic, ~200 instructions per 8-deep tile against 512 FFMAs.
        # Only the blocks on the right and bottom edges (and the last k tile) need those checks: a block whose
        # whole tile is inside takes an unguarded copy of the loop (~50 instructions of loads per tile). The
        # test is the same for every thread of a block, so no warp diverges and every thread reaches every
        # barrier on either path. Edge blocks clamp their indices instead of guarding each load (`load_tile`), so
        # only their stores and the last k tile are checked: at 1000^3, where 15 of 64 tiles are edge tiles and
        # the slowest block sets the time, guarded edge loads cost about a third of the run (benchmarks/NOTES.md).
        a_tile = cuda.shared.array((nbuf, bk, row_len), float32, alignment=16)
        b_tile = cuda.shared.array((nbuf, bk, bn), float32, alignment=16)
        acc = cuda.local.array((rows, 8), float32)
        a_frag = cuda.local.array(rows, float32)
        b_frag = cuda.local.array(8, float32)
        a_next = cuda.local.array(a_regs, float32)
        b_next = cuda.local.array(b_regs, float32)
        t = cuda.threadIdx.x
        tx4, ty4 = (t & (tn - 1)) * 4, (t >> tn_shift) * 4
        m, kdim = a.shape
        n = b.shape[1]
        if split_k:
            # Block z of gridDim.z sums K's z-th slice, a whole number of bk-deep tiles long.
            k_chunk = (kdim + cuda.gridDim.z * bk - 1) // (cuda.gridDim.z * bk) * bk
            k_begin = cuda.blockIdx.z * k_chunk
            k_end = min(k_begin + k_chunk, kdim)
        else:
            k_begin, k_end = 0, kdim
        if group > 1:
            # Blocks start roughly in blockIdx order, row by row of the grid: the ~132 running blocks would
            # cover 4 tile rows of C but all 32 tile columns, i.e. all of B (64 MB at 4096^2, more than the
            # 50 MB L2). Numbered down columns of `group` tile rows instead, the running blocks need 8 row
            # panels of A and ~17 column panels of B, which stay in L2 while they are reused.
            gx, gy = cuda.gridDim.x, cuda.gridDim.y
            bid = cuda.blockIdx.y * gx + cuda.blockIdx.x
            first = (bid // (group * gx)) * group
            group_rows = min(gy - first, group)
            within = bid % (group * gx)
            row0 = (first + within % group_rows) * bm
            col0 = (within // group_rows) * bn
        else:
            row0 = cuda.blockIdx.y * bm
            col0 = cuda.blockIdx.x * bn
        for i in range(rows):
            for j in range(8):
                acc[i, j] = 0.0
        if row0 + bm <= m and col0 + bn <= n:
            main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, True,
                      k_begin, k_end)
            for i in range(rows):
                for j in range(8):
                    row, col = row0 + (i >> 2) * qm + ty4 + (i & 3), col0 + (j >> 2) * hn + tx4 + (j & 3)
                    if split_k:  # another block adds its slice of K to the same element
                        cuda.atomic.add(c, (row, col), acc[i, j])
                    else:
                        c[row, col] = acc[i, j]
        else:
            main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, False,
                      k_begin, k_end)
            for i in range(rows):
                row = row0 + (i >> 2) * qm + ty4 + (i & 3)
                for j in range(8):
                    col = col0 + (j >> 2) * hn + tx4 + (j & 3)
                    if row < m and col < n:
                        if split_k:
                            cuda.atomic.add(c, (row, col), acc[i, j])
                        else:
                            c[row, col] = acc[i, j]

    @cuda.jit(device=True, forceinline=True)
    def tile_origin(tile, gx, gy):
        # Tile number -> (row0, col0) of C, numbered down columns of `group` tile rows (see interior_kernel).
        first = (tile // (group * gx)) * group
        group_rows = min(gy - first, group)
        within = tile % (group * gx)
        return (first + within % group_rows) * bm, (within // group_rows) * bn

    @cuda.jit(device=True, forceinline=True)
    def store_c(c, acc, row0, col0, ty4, tx4):
        # The thread's 16 x 8 (or 8 x 8) outputs: unguarded when the whole tile is inside C.
        m, n = c.shape
        if row0 + bm <= m and col0 + bn <= n:
            for i in range(rows):
                for j in range(8):
                    c[row0 + (i >> 2) * qm + ty4 + (i & 3), col0 + (j >> 2) * hn + tx4 + (j & 3)] = acc[i, j]
        else:
            for i in range(rows):
                row = row0 + (i >> 2) * qm + ty4 + (i & 3)
                for j in range(8):
                    col = col0 + (j >> 2) * hn + tx4 + (j & 3)
                    if row < m and col < n:
                        c[row, col] = acc[i, j]

    def stream_k_kernel(a, b, c, ws, cnt):
        # Stream-K (Osama et al., 2023), as a hybrid: with T tiles and P = ws.shape[0] blocks resident at once
        # (one per SM), whole waves of tiles would leave the last wave T % P / P full -- at 4096^3, 512 tiles of
        # 256 x 128 are 3.88 waves, so the fourth runs on 116 of 132 SMs and the product takes 4 waves' time.
        # Here the first gridDim.x - P blocks take one whole tile each ("data-parallel" waves), and the last P
        # blocks share out the remaining tiles' k tiles evenly: P + T % P tiles, between one and two tiles of work
        # per block, so every block ends at the same time. A block's share is a run of (tile, k tile) units, so it
        # may start inside one tile (its tail: k from some k0 to K) and end inside another (its head: k from 0):
        # each tile is shared by at most two neighbouring blocks. Both write their partial sums to the
        # workspace `ws` (the 128 accumulators of each thread: 128 KB per tile, written and read once), fence,
        # and count themselves in `cnt`; the second to arrive adds the other's partial to its own registers and
        # stores the tile. No block ever waits for another, and the last one resets the counter, so `cnt` is all
        # zeros between launches.
        # ``spread`` (`stream_k_blocks(spread=True)`: fewer tiles than blocks, a product under one wave spread over
        # every SM): a share may be less than a tile, and a tile cut between three or more neighbouring blocks.
        # Each writes its partial to ws[block, 0] (the tile it starts inside) or ws[block, 1] (the tile it ends
        # inside) and counts itself in cnt[tile]; the last to arrive sums the tile's partials from the workspace
        # in block order -- its own included, so the bits do not depend on the order of arrival. (A kernel of its
        # own: the general sum, compiled into the 256 x 128 kernels, measured 2-7% slower on their large
        # products, benchmarks/NOTES.md.)
        flag = cuda.shared.array(1, int32)
        a_tile = cuda.shared.array((nbuf, bk, row_len), float32, alignment=16)
        b_tile = cuda.shared.array((nbuf, bk, bn), float32, alignment=16)
        acc = cuda.local.array((rows, 8), float32)
        a_frag = cuda.local.array(rows, float32)
        b_frag = cuda.local.array(8, float32)
        a_next = cuda.local.array(a_regs, float32)
        b_next = cuda.local.array(b_regs, float32)
        t = cuda.threadIdx.x
        tx4, ty4 = (t & (tn - 1)) * 4, (t >> tn_shift) * 4
        m, kdim = a.shape
        n = b.shape[1]
        gx, gy = (n + bn - 1) // bn, (m + bm - 1) // bm
        iters = (kdim + bk - 1) // bk  # k tiles per tile: a tile is `iters` units of work
        sk = ws.shape[0]  # the blocks that share out the last tiles
        dp = cuda.gridDim.x - sk  # tiles (and blocks) before them, one whole tile each
        bid = cuda.blockIdx.x
        if bid < dp:
            # A whole tile, as interior_kernel runs it. This straight-line copy matters: with these blocks also
            # going through the run loop below, the kernel took 3.32 ms at 4096 x 4224 x 4096 (exactly 4 waves,
            # nothing shared) against 3.06 with it, and thread_16x8's kernel 3.22 (H200, benchmarks/NOTES.md):
            # ptxas schedules the k loop worse inside the outer loop.
            row0, col0 = tile_origin(bid, gx, gy)
            for i in range(rows):
                for jj in range(8):
                    acc[i, jj] = 0.0
            if row0 + bm <= m and col0 + bn <= n:
                main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, True,
                          0, kdim)
            else:
                main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, False,
                          0, kdim)
            store_c(c, acc, row0, col0, ty4, tx4)
            return
        j = bid - dp  # the j-th sharing block: units [u, u_end) of the last gx * gy - dp tiles
        units = (gx * gy - dp) * iters
        u, u_end = dp * iters + j * units // sk, dp * iters + (j + 1) * units // sk
        while u < u_end:
            tile = u // iters
            it0 = u - tile * iters
            it1 = min(iters, it0 + u_end - u)
            row0, col0 = tile_origin(tile, gx, gy)
            for i in range(rows):
                for jj in range(8):
                    acc[i, jj] = 0.0
            inside = row0 + bm <= m and col0 + bn <= n
            if inside:
                main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, True,
                          it0 * bk, min(it1 * bk, kdim))
            else:
                main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, False,
                          it0 * bk, min(it1 * bk, kdim))
            last = True
            if (it0 > 0 or it1 < iters) and not spread:
                # a tile shared by two blocks: boundary `jb` between blocks jb - 1 (head) and jb (tail)
                jb = j + (1 if it0 == 0 else 0)
                mine = 1 if it0 > 0 else 0
                for i in range(rows):
                    for jj in range(8):
                        ws[jb, mine, i * 8 + jj, t] = acc[i, jj]  # a warp writes 128 consecutive bytes
                cuda.threadfence()  # the partial is visible to the whole GPU before the count says it is there
                cuda.syncthreads()
                if t == 0:
                    flag[0] = cuda.atomic.add(cnt, jb, 1)
                cuda.syncthreads()
                last = flag[0] == 1
                if last:  # a + b == b + a exactly: the same bits whichever comes second
                    cuda.threadfence()
                    for i in range(rows):
                        for jj in range(8):
                            acc[i, jj] += ws[jb, 1 - mine, i * 8 + jj, t]
                    if t == 0:
                        cnt[jb] = 0
            elif it0 > 0 or it1 < iters:  # spread: blocks `first` .. `final` have a part of the tile
                x0 = (tile - dp) * iters  # the tile's first unit, counted from the first shared one
                first = ((x0 + 1) * sk - 1) // units  # the block whose share holds unit x (the largest j with
                final = ((x0 + iters) * sk - 1) // units  # j * units // sk <= x), for the tile's first and last
                for i in range(rows):
                    for jj in range(8):
                        ws[j, 0 if it0 > 0 else 1, i * 8 + jj, t] = acc[i, jj]
                cuda.threadfence()  # the partial is visible to the whole GPU before the count says it is there
                cuda.syncthreads()
                if t == 0:
                    flag[0] = cuda.atomic.add(cnt, tile - dp, 1)
                cuda.syncthreads()
                last = flag[0] == final - first
                if last:
                    cuda.threadfence()
                    for i in range(rows):
                        for jj in range(8):
                            acc[i, jj] = 0.0
                    for q in range(first, final + 1):
                        end = 0 if q * units // sk > x0 else 1  # block q starts inside the tile, or before it
                        for i in range(rows):
                            for jj in range(8):
                                acc[i, jj] += ws[q, end, i * 8 + jj, t]
                    if t == 0:
                        cnt[tile - dp] = 0
            if last:
                store_c(c, acc, row0, col0, ty4, tx4)
            u += it1 - it0

    def split_fixup_kernel(a, b, c, ws, cnt):
        # Split-K without the zero pass and without atomics into C: block z of gridDim.z sums K's z-th slice as
        # interior_kernel does, writes its partial tile to the workspace (ws[tile, z]: each thread's accumulators,
        # a warp writing 128 consecutive bytes), fences, and counts itself in cnt[tile]. The last of the slices to
        # arrive adds the partials in slice order (so the sum is the same whichever arrives last) and stores the
        # tile; it resets the count, so `cnt` is all zeros between launches. No block waits for another.
        flag = cuda.shared.array(1, int32)
        a_tile = cuda.shared.array((nbuf, bk, row_len), float32, alignment=16)
        b_tile = cuda.shared.array((nbuf, bk, bn), float32, alignment=16)
        acc = cuda.local.array((rows, 8), float32)
        a_frag = cuda.local.array(rows, float32)
        b_frag = cuda.local.array(8, float32)
        a_next = cuda.local.array(a_regs, float32)
        b_next = cuda.local.array(b_regs, float32)
        t = cuda.threadIdx.x
        tx4, ty4 = (t & (tn - 1)) * 4, (t >> tn_shift) * 4
        m, kdim = a.shape
        n = b.shape[1]
        slices, z = cuda.gridDim.z, cuda.blockIdx.z
        k_chunk = (kdim + slices * bk - 1) // (slices * bk) * bk
        k_begin = z * k_chunk
        k_end = min(k_begin + k_chunk, kdim)
        row0, col0 = cuda.blockIdx.y * bm, cuda.blockIdx.x * bn
        tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
        for i in range(rows):
            for jj in range(8):
                acc[i, jj] = 0.0
        if row0 + bm <= m and col0 + bn <= n:
            main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, True,
                      k_begin, k_end)
        else:
            main_loop(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, t, tx4, ty4, row0, col0, False,
                      k_begin, k_end)
        for i in range(rows):
            for jj in range(8):
                ws[tile, z, i * 8 + jj, t] = acc[i, jj]
        cuda.threadfence()  # the partial is visible to the whole GPU before the count says it is there
        cuda.syncthreads()
        if t == 0:
            flag[0] = cuda.atomic.add(cnt, tile, 1)
        cuda.syncthreads()
        if flag[0] == slices - 1:
            cuda.threadfence()
            for i in range(rows):
                for jj in range(8):
                    acc[i, jj] = 0.0
            for q in range(slices):
                for i in range(rows):
                    for jj in range(8):
                        acc[i, jj] += ws[tile, q, i * 8 + jj, t]
            if t == 0:
                cnt[tile] = 0
            store_c(c, acc, row0, col0, ty4, tx4)

    if stream_k:
        interior_kernel = stream_k_kernel  # noqa: F811
    if fixup:
        interior_kernel = split_fixup_kernel  # noqa: F811

    # Named after its parameters, so that profiles and `gpukernels resources` tell the variants apart.
    name = (f"tile{bm}x{bn}x{bk}" + (f"_rows{rows}" if rows != 8 else "") + (f"_group{group}" if group > 1 else "")
            + ("_vec" if vec else "") + (f"_async{stages}" if stages else "") + ("_splitk" if split_k else "")
            + ("_fixup" if fixup else "")
            + ("_streamk" if stream_k else "") + ("_spread" if spread else "")
            + ("" if clamp else "_guarded"))
    interior_kernel.__name__ = interior_kernel.__qualname__ = name + "_kernel"
    kernel = cuda.jit(**({"launch_bounds": launch_bounds} if launch_bounds else {}))(interior_kernel)
    kernel.tile = (bm, bn)
    kernel.threads = threads
    kernel.bk = bk
    kernel.split_k = split_k
    kernel.stream_k = stream_k
    kernel.rows = rows
    kernel.stages = stages
    kernel.params = dict(bm=bm, bn=bn, bk=bk, group=group, launch_bounds=launch_bounds, rows=rows, vec=vec,
                         split_k=split_k, clamp=clamp, stream_k=stream_k, stages=stages, fixup=fixup, spread=spread)
    return kernel


_TWINS = {}


def fixup_twin(kernel):
    """The same kernel with its slices of K meeting in a workspace instead of by atomics (``fixup=True``), built
    once: what ``optimized`` runs when its estimate prefers the workspace, and what the benchmarks compare a split
    kernel with (benchmarks/NOTES.md)."""
    key = tuple(sorted(kernel.params.items()))
    if key not in _TWINS:
        _TWINS[key] = make_interior_kernel(**{**kernel.params, "split_k": False, "fixup": True})
    return _TWINS[key]

