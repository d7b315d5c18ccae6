"""Step 8 of the softmax lesson, ``optimized``: the dispatcher -- per shape, the step and its configuration, by a
rule a student can call and read (``softmax.optimized.choose(M, N)``).

No kernel here is new: each regime of the suite has its step, and the rule is two thresholds on N and one on M
against the SM count.
"""

from __future__ import annotations

from .._intrinsics import aligned16
from .._launch import Choice, Launch, check_choose, sm_count, version
from ._common import WARP, Config, _check
from .k03_online import ONLINE_THREADS, make_online_kernel
from .k04_registers import MAX_CACHED, cached_kernel_for, cached_launches, registers_config
from .k05_warp_rows import WARP_ROWS_MAX_N, warp_kernel_for, warp_launches, warp_rows_config
from .k06_vector_rows import warp_vec_kernel_for, with_vector_access
from .k07_split_row import SPLIT_MIN_CHUNK, split_pieces, split_row_launches, use_split_row


def optimized_config(n: int) -> Config:
    """The `Config` a row of n values runs with when no rows are split: ``warp_rows``' lanes for n <= 512,
    ``registers``' block up to MAX_CACHED, else ``online``'s block of ONLINE_THREADS (``cached`` False)."""
    return warp_rows_config(n) or registers_config(n) or Config(ONLINE_THREADS, 1, False)


def optimized_kernel(cfg: Config):
    """The compiled kernel for ``cfg`` (built once per configuration): the step that runs such a configuration."""
    if not cfg.cached:
        return make_online_kernel(cfg.threads)
    if cfg.threads <= WARP:
        return warp_vec_kernel_for(cfg) if cfg.vec else warp_kernel_for(cfg)
    return cached_kernel_for(cfg)


def config_launches(cfg: Config, x, y) -> list[Launch]:
    """The launches for rows run with ``cfg`` (the benchmarks' sweeps time configurations `choose` does not pick)."""
    if not cfg.cached:
        return [Launch(make_online_kernel(cfg.threads), (x.shape[0],), (cfg.threads,), (x, y))]
    if cfg.threads <= WARP:
        return warp_launches(cfg, optimized_kernel(cfg), x, y)
    return cached_launches(cfg, x, y)


def choose(m: int, n: int, aligned: bool = True, sms: int | None = None) -> Choice:
    """The step and configuration for M rows of N values; ``aligned``: x and y 16-byte aligned.

    1. **Few long rows** (fewer rows than SMs, each longer than MAX_CACHED, or at least SPLIT_MIN_ROW values on
       fewer than a quarter of the SMs): ``split_row``, so that the pieces of the rows fill the SMs.
    2. **Short rows** (N <= 512): ``warp_rows``, several rows per warp; ``vector_rows`` when rows are at most 128
       values, a multiple of 4 and 16-byte aligned.
    3. **Rows that fit on chip** (N <= MAX_CACHED = 32768): ``registers``, a block per row, read once.
    4. **Longer rows**: ``online``, read twice.

    Nothing here names a shape: the thresholds are row lengths and a row count against the SMs."""
    check_choose({"m": m, "n": n}, {"aligned": aligned}, sms)
    sms = sms or sm_count()
    if use_split_row(m, n, sms):
        pieces = split_pieces(m, n, sms)
        return Choice("split_row", {"pieces": pieces},
                      f"{m} row(s) for {sms} SMs: a block per row would leave SMs idle"
                      + (" and read its row twice" if n > MAX_CACHED else " streaming its row")
                      + f", so each row of {n} values is cut into {pieces} pieces of >= {SPLIT_MIN_CHUNK} values")
    if n > MAX_CACHED:
        return Choice("online", {"threads": ONLINE_THREADS},
                      f"rows of {n} values are longer than the {MAX_CACHED} a block keeps on chip: max and sum in "
                      "one read, then a normalising read")
    cfg = optimized_config(n)
    if n <= WARP_ROWS_MAX_N:
        cfg = with_vector_access(cfg, n, aligned)
        return Choice("vector_rows" if cfg.vec else "warp_rows",
                      {"lanes": cfg.threads, "elems": cfg.elems, "rows_per_block": cfg.rows_per_block},
                      f"rows of {n} <= {WARP_ROWS_MAX_N} values: {cfg.threads} lane(s) x {cfg.elems} values per row, "
                      f"{WARP // cfg.threads} row(s) per warp, no barrier"
                      + (", 16-byte loads and stores" if cfg.vec else ""))
    return Choice("registers", {"threads": cfg.threads, "elems": cfg.elems, "shared": cfg.shared},
                  f"a block of {cfg.threads} threads per row of {n} values keeps {cfg.elems} per thread in registers"
                  + (f" and {cfg.shared} in shared memory" if cfg.shared else "") + ": one read, one write")


@version("softmax", _check)
def optimized(x, y):
    """The dispatcher: per shape, the step that choose() picks (split_row, vector_rows, warp_rows, registers, online)."""
    m, n = x.shape
    choice = choose(m, n, aligned16(x, y))
    if choice.step == "split_row":
        return split_row_launches(x, y, choice.config["pieces"])
    cfg = optimized_config(n)
    if choice.step == "vector_rows":
        cfg = with_vector_access(cfg, n, True)
    return config_launches(cfg, x, y)


def describe(x) -> str:
    """What ``optimized`` runs for x, in words (the suite's JSON records it)."""
    return str(choose(*x.shape, aligned16(x)))


optimized.choose = choose
optimized.steps = ("online", "registers", "warp_rows", "vector_rows", "split_row")  # what it dispatches to
optimized.describe = describe
