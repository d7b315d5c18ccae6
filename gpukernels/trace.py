"""Memory-access tracer: what every thread of a simulated launch reads and writes, and what that means.

Everything here comes from a real execution of the unchanged ``@cuda.jit`` kernels on ``gpukernels.sim``:
while a trace is active, the simulator wraps kernel arrays in hooked classes that report each element access
(global, shared and local) with its thread, barrier interval, source line and program order.

    with gpukernels.trace() as t:
        gpukernels.matmul.tiled(a, b)
    t.summary()                 # all analyses; prints as rich tables, .to_dict() for JSON
    t.traffic()                 # [ArrayTraffic]   loads, stores, bytes, loads per element (reuse)
    t.coalescing()              # Coalescing       32-byte sectors per warp access vs the minimum, per line
    t.bank_conflicts()          # [BankConflicts]  conflict degree of each warp's shared access, per line
    t.hazards()                 # Hazards          races within a barrier interval; uninitialised shared reads
    t.divergence()              # [Divergence]     active lanes per warp and source line
    t.barriers()                # [Barriers]       syncthreads / syncwarp executed, shared arrays, per launch
    t.collectives()             # [{kind: count}]  tensor-core instructions (mma, ldmatrix) executed, per launch
    t.async_events()            # [AsyncEvent]     cp.async / wgmma issued, committed, landed, waited
    t.ring()                    # [StageUse]       a TMA ring's stages: mbarrier phases, copies, wgmmas

Memory stays bounded: accesses are buffered for one block at a time and folded into per-line counters when
the block ends. ``trace(events=True)`` also keeps the full event log (``trace(events=True, local=False)``: of global
and shared memory only -- a thread's private local arrays, often most of the accesses, are then only counted, as
without the log), readable two ways:

    t.accesses()                # one numeric record per access (ACCESS_DTYPE): launch, block, thread, array,
                                # element, kind, barrier interval, line, occurrence, program order
    t.arrays()                  # [ArrayInfo]  what ``accesses()["array"]`` indexes: name, space, shape, ...
    t.lines()                   # [(filename, lineno)]  what ``accesses()["line"]`` indexes
    t.launches                  # [LaunchInfo] what ``accesses()["launch"]`` indexes: kernel, grid, block
    t.events()                  # the same accesses with names spelled out (strings: ~20x the memory)

The three measures the figures, tables, demo and grader quote are defined once, below under "Definitions"
(``sector_counts``, ``coalescing_efficiency``, ``conflict_degree``, ``reuse``), and the analyses here use
those functions.

Conventions (stated so the numbers can be checked by hand):

* a *warp access* is the accesses of one warp at one program point (the same bytecode offset of the same
  source line) on the same dynamic occurrence (the n-th time each lane executed it) -- what a GPU issues as
  one instruction;
* a vector instruction of ``gpukernels._intrinsics`` (``load4``, ``store4``, ``copy_async16``: one 16-byte
  access per lane on the GPU, four element accesses in the simulator) is one access at the kernel's line that
  called it: a warp's ``load4`` of 32 consecutive 16-byte runs is one request of 512 bytes, 16 sectors for
  16 needed (100%), as Nsight Compute counts it;
* global allocations start on a 256-byte boundary (as cudaMalloc's do), so element ``e`` of an array of
  ``itemsize`` bytes lies in sector ``e * itemsize // 32``;
* *coalescing efficiency* of a warp access = the fewest 32-byte sectors that can hold the distinct bytes its
  lanes use / the sectors it touches, in (0, 1]; over many warp accesses it is the ratio of the sums (not a
  mean of ratios), so a line executed often weighs more. A broadcast (every lane, one float) is 1 sector for
  1 needed: 100%, nothing to fix -- although it uses 4 of the 32 bytes moved. Lanes a row apart: 32 sectors
  for 4 needed, 12.5%;
* *lane utilisation* of a line's global accesses = the lanes that took part in its requests / (32 x requests)
  (``LineCoalescing.lanes``, ``lane_utilisation``): one lane walking a row alone wastes no sector but uses 1/32
  of the warp, as Nsight Compute's sectors per request (1 where 4 are ideal) shows;
* each shared array starts at bank 0; banks are 32 words of 4 bytes; lanes reading the same word are a
  broadcast, not a conflict; the *conflict degree* of a warp access is the largest number of distinct words
  it needs from one bank (1 = conflict-free); a line's ``mean_degree`` is the ratio of the sums (wavefronts /
  warp accesses);
* *reuse* of an array = its loads / its elements (``loads_per_element``): 1 means each element read once;
* an atomic (``cuda.atomic.add`` and the others) is a load and a store of its element: ``traffic()`` counts it
  in ``loads`` and ``stores`` (and in ``atomics``), and the race analysis treats it as a read and a write;
* every view a kernel makes of an array (a slice, ``a[:, 0]``, ``.T``, ``reshape``, ``ravel``) is the array:
  its accesses count as accesses to the elements it views, under the array's name;
* two accesses race when they touch the same element in the same barrier interval of one block, from
  different threads, at least one a write or an atomic -- except two atomics, which the hardware orders
  (threads of one warp separated by ``cuda.syncwarp()`` are ordered too), and a TMA copy's writes and a
  wgmma's reads (the async proxy: mbarriers order them, and the simulator's asynchronous model checks that
  order). Local arrays are private and never race;
* divergence is seen where memory is accessed: a line that touches no array does not appear.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np

from ._tables import Table
from .sim import _state
from .sim import arrays as _arrays
from .sim._async import launch_events as _launch_async_events
from .sim._source import INTRINSICS as _INTRINSICS, location, source_line, user_frame

READ, WRITE, ATOMIC = _arrays.READ, _arrays.WRITE, _arrays.ATOMIC  # accesses()["kind"]
_SPACES = {_arrays.GLOBAL: 0, _arrays.SHARED: 1, _arrays.LOCAL: 2}
_SPACE_NAMES = {v: k for k, v in _SPACES.items()}
# columns of a block's event buffer
TID, AID, ELEM, KIND, BAR, WSYNC, PC, OCC, ORDER = range(9)

__all__ = [
    "trace",
    "Trace",
    "ArrayTraffic",
    "LineCoalescing",
    "Coalescing",
    "BankConflicts",
    "Race",
    "UninitializedRead",
    "Hazards",
    "Divergence",
    "Barriers",
    "Summary",
    "ArrayInfo",
    "LaunchInfo",
    "ACCESS_DTYPE",
    "READ",
    "WRITE",
    "ATOMIC",
    "SECTOR_BYTES",
    "BANKS",
    "BANK_WORD_BYTES",
    "sector_counts",
    "coalescing_efficiency",
    "lane_utilisation",
    "WARP_LANES",
    "conflict_degree",
    "reuse",
    "trace_main",
]


# -------------------------------------------------------------------------------------------------------------
# Definitions: the one place that says what coalescing efficiency, conflict degree and reuse are. The
# tracer's analyses, the figures (gpukernels.viz), the demo and the grader all call these.
# -------------------------------------------------------------------------------------------------------------

SECTOR_BYTES = 32  # global memory moves in 32-byte sectors (an L2 / DRAM transaction)
BANKS = 32  # shared memory: 32 banks ...
BANK_WORD_BYTES = 4  # ... of 4-byte words
WARP_LANES = 32  # lanes of a warp: a memory request of a warp is issued for up to 32 lanes


def _group_sectors(group: np.ndarray, elements: np.ndarray, itemsize, ngroups: int) -> tuple:
    """Per warp access (``group`` id): (sectors touched, fewest sectors that hold the distinct bytes used).

    Global allocations start on a 256-byte boundary (as cudaMalloc's do), so element ``e`` lies in sector
    ``e * itemsize // 32``."""
    isz = np.broadcast_to(np.asarray(itemsize, np.int64), elements.shape)
    moved = _count_distinct(group, (elements * isz) // SECTOR_BYTES, ngroups)
    distinct = _count_distinct(group, elements, ngroups)
    g_isz = np.zeros(ngroups, np.int64)
    g_isz[group] = isz  # one array (one itemsize) per warp access
    needed = -(-(distinct * g_isz) // SECTOR_BYTES)
    return moved, needed


def _group_conflict_degree(group: np.ndarray, elements: np.ndarray, itemsize, ngroups: int) -> np.ndarray:
    """Per warp access (``group`` id): the largest number of distinct 4-byte words it needs from one bank."""
    isz = np.broadcast_to(np.asarray(itemsize, np.int64), elements.shape)
    words = (elements * isz) // BANK_WORD_BYTES
    span = int(words.max()) + 1
    pairs = np.unique(group * span + words)  # distinct words per warp access: a broadcast counts once
    pg, pw = pairs // span, pairs % span
    gb, counts = np.unique(pg * BANKS + pw % BANKS, return_counts=True)  # distinct words per (access, bank)
    degree = np.zeros(ngroups, np.int64)
    np.maximum.at(degree, gb // BANKS, counts)
    return degree


def sector_counts(elements, itemsize: int = 4) -> tuple[int, int]:
    """(sectors moved, sectors needed) for ONE warp access: the flat ``elements`` its lanes touch in one
    global array. Sectors needed = ceil(distinct bytes used / 32): the fewest any access of those bytes
    could move."""
    e = np.asarray(elements, np.int64).ravel()
    if not len(e):
        return 0, 0
    moved, needed = _group_sectors(np.zeros(len(e), np.int64), e, itemsize, 1)
    return int(moved[0]), int(needed[0])


def coalescing_efficiency(sectors_needed, sectors_moved) -> float:
    """Sectors needed / sectors moved, in (0, 1]; give sums over many warp accesses for their aggregate (a
    ratio of sums). 1.0 when nothing moved."""
    return sectors_needed / sectors_moved if sectors_moved else 1.0


def conflict_degree(elements, itemsize: int = 4) -> int:
    """Conflict degree of ONE warp access to a shared array (flat ``elements`` of its lanes): the passes the
    banks need, 1 = conflict-free (lanes reading the same word are a broadcast); 0 for no access."""
    e = np.asarray(elements, np.int64).ravel()
    if not len(e):
        return 0
    return int(_group_conflict_degree(np.zeros(len(e), np.int64), e, itemsize, 1)[0])


def lane_utilisation(lanes, requests) -> float:
    """Lanes that took part / (32 x requests): the share of the warp's lanes a line's memory requests used, in
    (0, 1] (sums over many requests give their aggregate). A request costs an instruction and its latency whatever
    the number of lanes in it, so idle lanes are waste, as they are in Nsight Compute's sectors per request (4 for
    32 lanes reading 32 consecutive floats, 1 for one lane). 1.0 when nothing was requested."""
    return lanes / (WARP_LANES * requests) if requests else 1.0


def reuse(loads, elements) -> float:
    """Loads per element of an array (sums over launches for several): 1 = each element read once."""
    return loads / elements if elements else 0.0


# -------------------------------------------------------------------------------------------------------------
# Results: plain data
# -------------------------------------------------------------------------------------------------------------


@dataclass
class ArrayTraffic:
    """Accesses of one array in one launch. ``loads_per_element`` = loads / elements (the reuse factor).

    ``loads`` and ``stores`` include the ``atomics`` (each is one of both); ``elements_loaded`` and
    ``elements_stored`` count the distinct elements loaded (atomics included) or stored at least once, so
    ``elements_loaded == elements`` means every element was read."""

    launch: int
    kernel: str
    array: str
    space: str
    shape: tuple
    itemsize: int
    elements: int
    loads: int
    stores: int
    atomics: int
    bytes_loaded: int
    bytes_stored: int
    loads_per_element: float
    elements_loaded: int = 0
    elements_stored: int = 0


@dataclass
class LineCoalescing:
    """Global accesses at one source line: warp accesses, 32-byte sectors touched, and the fewest sectors
    that the same bytes could have needed. ``efficiency`` = min_sectors / sectors, in [0, 1]. ``lanes``: the lanes
    that took part, summed over the requests; ``lane_utilisation`` = lanes / (32 x requests), the share of the
    warp's lanes that issued the line's requests (one lane walking a row alone: 1/32)."""

    kernel: str
    location: str
    source: str
    array: str
    kind: str
    requests: int
    sectors: int
    min_sectors: int
    efficiency: float
    lanes: int = 0

    @property
    def lane_utilisation(self) -> float:
        return lane_utilisation(self.lanes, self.requests)


@dataclass
class Coalescing:
    lines: list
    per_kernel: dict  # kernel -> efficiency over all its global accesses

    def by_array(self) -> dict:
        """(array, kind) -> coalescing efficiency over all its lines and launches (a ratio of sums)."""
        sums: dict = {}
        for x in self.lines:
            acc = sums.setdefault((x.array, x.kind), [0, 0])
            acc[0] += x.min_sectors
            acc[1] += x.sectors
        return {key: coalescing_efficiency(need, moved) for key, (need, moved) in sums.items()}


@dataclass
class BankConflicts:
    """Shared accesses at one source line. ``wavefronts`` = sum of conflict degrees (``requests`` if none)."""

    kernel: str
    location: str
    source: str
    array: str
    kind: str
    requests: int
    wavefronts: int
    max_degree: int
    mean_degree: float


@dataclass
class Race:
    """Accesses to one element from two threads in one barrier interval, at least one a write, ``first`` and
    ``second`` in program order. ``elements`` counts the elements (over all blocks, per barrier interval) that
    race between these two lines in this order."""

    kernel: str
    array: str
    space: str
    hazard: str  # "read-after-write", "write-after-read" or "write-after-write"
    first_location: str
    first_kind: str
    second_location: str
    second_kind: str
    elements: int
    example_element: tuple
    example_block: tuple
    example_threads: tuple  # (first thread, second thread), each (x, y, z)
    example_interval: int
    hint: str


@dataclass
class UninitializedRead:
    """Shared memory read before any thread of the block wrote that element (in the simulated order)."""

    kernel: str
    array: str
    location: str
    reads: int
    example_element: tuple
    example_block: tuple
    example_thread: tuple


@dataclass
class Hazards:
    races: list
    uninitialized: list


@dataclass
class Barriers:
    """Synchronisation and shared memory of one launch.

    ``syncthreads``: block-wide barriers completed (``cuda.syncthreads()`` and its ``_count`` / ``_and`` /
    ``_or`` variants, ``grid.sync()``), summed over blocks -- a loop of 4 barriers in 8 blocks gives 32;
    ``syncthreads_calls``: threads arriving at them (``syncthreads`` x threads per block);
    ``syncwarp``: ``cuda.syncwarp()`` completed, one per warp and call; ``syncwarp_calls``: threads calling it;
    ``shared_arrays``: names of the shared arrays the kernel allocated (``cuda.shared.array``, static or
    dynamic), whether or not it then touched them; ``shared_accesses``: loads + stores + atomics of them.
    "No shared memory and no barrier" is ``not b.shared_arrays and b.syncthreads == 0``."""

    launch: int
    kernel: str
    syncthreads: int
    syncthreads_calls: int
    syncwarp: int
    syncwarp_calls: int
    shared_arrays: list
    shared_accesses: int


@dataclass
class Divergence:
    """Warp ``warp`` (of every block) at one source line: how many of its lanes took part, per execution."""

    kernel: str
    location: str
    source: str
    warp: int
    lanes_in_warp: int
    executions: int
    mean_active: float
    min_active: int


# -------------------------------------------------------------------------------------------------------------
# Recording
# -------------------------------------------------------------------------------------------------------------


@dataclass
class _ArrayInfo:
    launch: int
    kernel: str
    name: str
    space: int
    shape: tuple
    itemsize: int
    size: int


@dataclass
class LaunchInfo:
    """One traced launch (``Trace.launches[i]``; ``accesses()["launch"]`` indexes them)."""

    index: int
    kernel: str
    grid: tuple
    block: tuple


_LaunchInfo = LaunchInfo


@dataclass(frozen=True)
class ArrayInfo:
    """One array of one launch, as the tracer names it (``Trace.arrays()[i]``; ``accesses()["array"]``
    indexes them). ``name`` is the kernel's parameter name (or the shared / local array's variable);
    ``space`` is "global", "shared" or "local"; ``size`` its element count."""

    index: int
    launch: int
    kernel: str
    name: str
    space: str
    shape: tuple
    itemsize: int
    size: int


#: One record per access, numbers only (about 50 bytes each, so the half a million accesses of a 64^3 matmul
#: fit easily; ``events()`` spells names out as strings instead). ``thread`` is the linear thread index in
#: the block (x fastest): its warp is ``thread // 32`` and lane ``thread % 32``. ``kind``: READ, WRITE or
#: ATOMIC. ``interval``: barriers the thread had passed. ``line``: index into ``Trace.lines()``.
#: ``occurrence``: how many times before this thread made this access (same array, kind and line) --
#: accesses with equal (launch, block, warp, array, kind, line, occurrence) are one *warp access*.
#: ``order``: the access's index in its thread's program order.
ACCESS_DTYPE = np.dtype([("launch", "i4"), ("block", "i4", (3,)), ("thread", "i4"), ("array", "i4"),
                         ("element", "i8"), ("kind", "i1"), ("interval", "i4"), ("line", "i4"),
                         ("occurrence", "i4"), ("order", "i8")])


class Trace:
    """Collects the accesses of every simulated launch made while it is active; see the module docstring."""

    def __init__(self, events: bool = False, local: bool = True, count_local: bool = True):
        self.keep_events = events
        self.keep_local = events and local and count_local  # local arrays' accesses in the event log too
        self.count_local = count_local  # False: local arrays are not observed at all (see trace())
        self.launches: list[LaunchInfo] = []
        self._arrays: list[_ArrayInfo] = []
        self._akeys: dict = {}
        self._pcs: list = []  # pc id -> (filename, lineno): one per source line
        self._lines: dict = {}
        self._pcs_by_code: dict = {}  # code -> {bytecode offset -> pc}
        self._local_counts = defaultdict(int)  # aid * 3 + kind -> accesses (local arrays, no event log)
        self._local_seen = defaultdict(set)  # aid * 3 + kind -> elements (local arrays, no event log)
        self._seen = {}  # (aid, loaded?) -> bool array: elements loaded / stored at least once
        self._sync = {}  # launch -> (syncthreads, syncthreads_calls, syncwarp, syncwarp_calls), when it ended
        self._collectives = {}  # launch -> {kind: count} of gpukernels._mma's warp instructions, when it ended
        self._space = np.zeros(0, np.int64)
        self._isz = np.zeros(0, np.int64)
        self._traffic = np.zeros((0, 3), np.int64)
        self._coal: dict = defaultdict(lambda: [0, 0, 0, 0])  # (aid, pc, kind) -> requests, sectors, min, lanes
        self._banks: dict = defaultdict(lambda: [0, 0, 0])  # (aid, pc, kind) -> requests, wavefronts, max
        self._div: dict = defaultdict(lambda: [0, 0, 10**9])  # (launch, pc, warp) -> execs, lanes, min
        self._races: dict = {}
        self._uninit: dict = {}
        self._events: list = []
        self._vector_calls: dict = {}  # (tid, aid, kind) -> the vector intrinsic's frame of that thread's last access
        self._warp_lanes: dict = {}
        self._async: list = []  # [AsyncEvent] of every launch's cp.async and wgmma (async_events())
        self.seconds = 0.0

    # -- called by the simulator ----------------------------------------------------------------------------
    def register(self, launch, a, name, space, key):
        full = (len(self.launches) - 1, key if key is not None else id(a))
        aid = self._akeys.get(full)
        if aid is None:
            aid = len(self._arrays)
            self._akeys[full] = aid
            self._arrays.append(
                _ArrayInfo(len(self.launches) - 1, launch.name, name, _SPACES[space], tuple(a.shape), a.itemsize,
                           a.size)
            )
        return aid

    def begin(self, launch):
        self.launches.append(LaunchInfo(len(self.launches), launch.name, launch.grid, launch.block))
        self._launch = launch

    def hook_for(self, launch):
        # Kept lean (this runs for every access): the occurrence and program-order columns are computed per
        # block with NumPy from the execution order, in which each thread's accesses are in program order.
        # Local arrays are private to a thread, so unless the full log is asked for they are only counted.
        ev = self._ev = []
        pcs_by_code, getframe = self._pcs_by_code, sys._getframe
        append = ev.append
        local, keep_local = _arrays.LOCAL, self.keep_local
        local_counts, local_seen = self._local_counts, self._local_seen

        def hook(arr, elem, kind):
            if arr.space is local and not keep_local:
                local_counts[arr.aid * 3 + kind] += 1
                local_seen[arr.aid * 3 + kind].add(elem)
                return
            f = getframe(3 if kind == ATOMIC else 2)
            by_offset = pcs_by_code.get(f.f_code)
            pc = by_offset.get(f.f_lasti) if by_offset is not None else None
            if pc is None:
                pc = self._new_pc(f)
            t = launch.cur
            if pc < 0:  # inside a vector intrinsic: the calling line's pc, and whether it continues the call's access
                pc, part = self._vector_pc(f, t.tid, arr.aid, kind)
                name = f.f_code.co_name
                if name.startswith("ldmatrix"):  # served in phases of 8 lanes (bit 2 of `part`)
                    part |= 2
                elif name == "wgmma":  # wgmma's tiles, read by the tensor cores, not by lanes (bit 4)
                    part |= 4
                elif name == "_sim_wgmma_wait":  # ... and the same reads again where they end (bit 8: no traffic)
                    part |= 12
                elif name == "tma_load_2d":  # a TMA copy's box, moved by the copy engine (bit 16)
                    part |= 16

                append((t.tid, arr.aid, elem, kind, t.barriers, t.wsyncs, pc, part))
                return
            append((t.tid, arr.aid, elem, kind, t.barriers, t.wsyncs, pc, 0))

        return hook

    def _vector_pc(self, frame, tid, aid, kind):
        """An element access inside one of gpukernels._intrinsics' instructions (``load4``, ``store4``,
        ``copy_async16``: Python in the simulator, one 16-byte instruction on the GPU): its line is the kernel's
        line that called the instruction, and the elements one call moves of one array are one access. Returns
        (pc, 1 if this element continues the call's access else 0)."""
        caller = user_frame(frame.f_back)
        while _is_intrinsic(caller.f_code.co_filename):
            caller = user_frame(caller.f_back)
        by_offset = self._pcs_by_code.get(caller.f_code)
        pc = by_offset.get(caller.f_lasti) if by_offset is not None else None
        if pc is None:
            pc = self._new_pc(caller)
        key = (tid, aid, kind)
        part = self._vector_calls.get(key) is frame  # the same call (frame) as this thread's last such access
        self._vector_calls[key] = frame
        return pc, int(part)

    def _new_pc(self, frame):
        # One id per source line. (Keyed by bytecode offset first because that is cheap to read, but one
        # access can report two offsets: CPython 3.11 specialises instructions after a few runs.)
        if _is_intrinsic(frame.f_code.co_filename):  # never a line of its own: see _vector_pc
            self._pcs_by_code.setdefault(frame.f_code, {})[frame.f_lasti] = -1
            return -1
        line = (frame.f_code.co_filename, frame.f_lineno)
        pc = self._lines.get(line)
        if pc is None:
            pc = self._lines[line] = len(self._pcs)
            self._pcs.append(line)
        self._pcs_by_code.setdefault(frame.f_code, {})[frame.f_lasti] = pc
        return pc

    def end_block(self, launch):
        if self._ev:
            raw = np.array(self._ev, dtype=np.int64)
            e = np.empty((len(raw), 9), np.int64)
            e[:, :7] = raw[:, :7]
            # OCC: the n-th access of a thread to an array, of a kind, at a line (the elements of one vector
            # instruction are one access: they share its OCC); ORDER: the n-th of the thread
            e[:, OCC] = _rank_within(_mix(e[:, TID], e[:, PC], e[:, AID], e[:, KIND]), raw[:, 7] & 1 == 0)
            e[:, ORDER] = _rank_within(e[:, TID])
            self._analyse_block(launch, e, raw[:, 7] & 2 != 0, raw[:, 7] & 4 != 0, raw[:, 7] & 8 != 0,
                                raw[:, 7] & 20 != 0)
        self._ev.clear()
        self._vector_calls.clear()

    def end(self, launch):
        self._sync[len(self.launches) - 1] = launch.sync_counts()
        self._collectives[len(self.launches) - 1] = dict(getattr(launch, "collectives", {}))
        self._async += _launch_async_events(launch, len(self.launches) - 1)
        self._launch = None

    # -- per-block analysis ----------------------------------------------------------------------------------
    def _grow(self):
        n = len(self._arrays)
        if len(self._space) < n:
            self._space = np.array([a.space for a in self._arrays], np.int64)
            self._isz = np.array([a.itemsize for a in self._arrays], np.int64)
            t = np.zeros((n, 3), np.int64)
            t[: len(self._traffic)] = self._traffic
            self._traffic = t

    def _mark_seen(self, aid, elem, kind):
        """Remember which elements of each array were loaded (reads, atomics) and stored (writes, atomics)."""
        for loaded, sel in ((True, kind != WRITE), (False, kind != READ)):
            if not sel.any():
                continue
            a, el = aid[sel], elem[sel]
            for x in np.unique(a).tolist():
                mine = el[a == x]
                top = int(mine.max()) + 1
                seen = self._seen.get((x, loaded))
                if seen is None or len(seen) < top:
                    grown = np.zeros(max(top, self._arrays[x].size), bool)
                    if seen is not None:
                        grown[: len(seen)] = seen
                    self._seen[(x, loaded)] = seen = grown
                seen[mine] = True

    def _analyse_block(self, launch, e, phased, no_lanes, repeat, proxy=None):
        """One block's accesses ``e``; ``phased``: an ldmatrix's (served 8 lanes at a time); ``no_lanes``: the tensor
        cores' reads of a wgmma's tiles; ``repeat``: those reads again where the wgmma completes (for the race
        check only, not traffic); ``proxy``: the async proxy's accesses (the tensor cores' and the copy engine's),
        which mbarriers order among themselves, as the simulator's asynchronous model checks: no race between two
        of them."""
        self._grow()
        if proxy is None:
            proxy = np.zeros(len(e), bool)
        li = len(self.launches) - 1
        block = (launch.blockIdx.x, launch.blockIdx.y, launch.blockIdx.z)
        if self.keep_events:
            self._events.append((li, block, e[~repeat]))
        n_arrays = len(self._arrays)
        once = e[~repeat]
        self._traffic += np.bincount(once[:, AID] * 3 + once[:, KIND], minlength=n_arrays * 3).reshape(n_arrays, 3)
        self._mark_seen(once[:, AID], once[:, ELEM], once[:, KIND])
        # Local arrays only count as traffic: they are private (no races) and not laid out by lane here.
        keep = self._space[e[:, AID]] != 2
        e, phased, no_lanes, proxy = e[keep], phased[keep], no_lanes[keep], proxy[keep]
        if not len(e):
            return
        self._hazards(li, block, e, self._space[e[:, AID]], proxy)
        # The tensor cores' reads of wgmma's tiles count as traffic and in the race check (above), but they are not
        # lanes' accesses: no bank conflicts or divergence to show.
        if no_lanes.any():
            e, phased = e[~no_lanes], phased[~no_lanes]
            if not len(e):
                return
        aid, kind = e[:, AID], e[:, KIND]
        space = self._space[aid]
        isz = self._isz[aid]
        warp = e[:, TID] >> 5
        # one id per warp access: (aid, pc, occurrence, warp)
        _, gid = np.unique(_mix(aid, e[:, PC], kind, e[:, OCC], warp), return_inverse=True)
        gid = gid.ravel()
        ngroups = int(gid.max()) + 1
        first = np.full(ngroups, len(e), np.int64)
        np.minimum.at(first, gid, np.arange(len(e)))
        g_aid, g_pc, g_kind, g_space = aid[first], e[first, PC], kind[first], space[first]
        g_warp = warp[first]

        lanes = _count_distinct(gid, e[:, TID] & 31, ngroups)  # distinct lanes per warp access
        # coalescing: global
        sel = space == 0
        if sel.any():
            sectors, need = _group_sectors(gid[sel], e[sel, ELEM], isz[sel], ngroups)
            for g in np.flatnonzero(sectors):
                c = self._coal[(int(g_aid[g]), int(g_pc[g]), int(g_kind[g]))]
                c[0] += 1
                c[1] += int(sectors[g])
                c[2] += int(need[g])
                c[3] += int(lanes[g])

        # bank conflicts: shared. An ldmatrix is served in phases of 8 lanes (8 rows of 16 bytes, one 128-byte
        # wavefront if they fall in distinct banks): each phase is a request of its own here.
        sel = space == 1
        if sel.any():
            bgid, bn = gid, ngroups
            if phased[sel].any():
                phase = np.where(phased, (e[:, TID] & 31) >> 3, 0)
                _, bgid = np.unique(_mix(gid, phase), return_inverse=True)
                bgid = bgid.ravel()
                bn = int(bgid.max()) + 1
            degree = _group_conflict_degree(bgid[sel], e[sel, ELEM], isz[sel], bn)
            bfirst = np.full(bn, len(e), np.int64)
            np.minimum.at(bfirst, bgid, np.arange(len(e)))
            for gg in np.flatnonzero(degree):
                r = bfirst[gg]
                c = self._banks[(int(aid[r]), int(e[r, PC]), int(kind[r]))]
                c[0] += 1
                c[1] += int(degree[gg])
                c[2] = max(c[2], int(degree[gg]))

        # divergence: distinct lanes per warp access (``lanes``, above)
        for g in range(ngroups):
            d = self._div[(li, int(g_pc[g]), int(g_warp[g]))]
            d[0] += 1
            d[1] += int(lanes[g])
            d[2] = min(d[2], int(lanes[g]))
        for w in range(launch.nwarps):
            self._warp_lanes[(li, w)] = bin(launch._exist[w]).count("1")

    def _hazards(self, li, block, e, space, proxy):
        sel = space != 2
        if not sel.any():
            return
        rows = np.flatnonzero(sel)
        sub = e[rows]
        # uninitialised shared reads: a read earlier (in execution order) than the element's first write
        sh = self._space[sub[:, AID]] == 1
        if sh.any():
            srows = rows[sh]
            s = e[srows]
            _, cell = np.unique(_mix(s[:, AID], s[:, ELEM]), return_inverse=True)
            cell = cell.ravel()
            first_write = np.full(int(cell.max()) + 1, len(e) + 1, np.int64)
            w = s[:, KIND] != READ
            np.minimum.at(first_write, cell[w], srows[w])
            # an atomic reads its element before it writes it: the first store being an atomic is a read too
            first = first_write[cell]
            bad = ((s[:, KIND] == READ) & (srows < first)) | ((s[:, KIND] == ATOMIC) & (srows == first))
            for row in s[bad]:
                key = (int(row[AID]), int(row[PC]))
                u = self._uninit.get(key)
                if u is None:
                    self._uninit[key] = u = [0, int(row[ELEM]), block, int(row[TID])]
                u[0] += 1
        # races: cells (array, element, barrier interval) that some thread writes and another thread touches
        cell = _mix(sub[:, AID], sub[:, ELEM], sub[:, BAR])
        order = np.argsort(cell, kind="stable")
        cell_s = cell[order]
        starts = np.flatnonzero(np.r_[True, cell_s[1:] != cell_s[:-1]])
        ends = np.r_[starts[1:], len(cell_s)]
        tids = sub[order, TID]
        writes = sub[order, KIND] != READ
        # only cells with a write (or an atomic) and two threads can race
        has_write = np.add.reduceat(writes.astype(np.int64), starts) > 0
        tmin = np.minimum.reduceat(tids, starts)
        tmax = np.maximum.reduceat(tids, starts)
        for s0, s1 in zip(starts[has_write & (tmin != tmax)].tolist(), ends[has_write & (tmin != tmax)].tolist()):
            self._race_cell(li, block, e, rows[order[s0:s1]], proxy)

    def _race_cell(self, li, block, e, rows, proxy):
        # Pairs are put in *program* order (each access's index in its own thread), not in the order the
        # simulator happened to run them: "write, then another thread reads" (read-after-write) means a barrier
        # is missing between the write's line and the read's; "read, then another thread's later write"
        # (write-after-read) means one is missing before the code loops back to the write. Per (thread, line,
        # kind) the first and the last access stand for the others.
        reps = {}
        for r in rows.tolist():
            row = e[r]
            key = (int(row[TID]), int(row[PC]), int(row[KIND]))
            item = (int(row[ORDER]), r, key[0], key[1], key[2], int(row[WSYNC]))
            lo_hi = reps.get(key)
            if lo_hi is None:
                reps[key] = [item, item]
            else:
                lo_hi[0] = min(lo_hi[0], item)
                lo_hi[1] = max(lo_hi[1], item)
        items = sorted({x for pair in reps.values() for x in pair})
        seen = set()
        for i, (o1, r1, t1, pc1, k1, w1) in enumerate(items):
            for o2, r2, t2, pc2, k2, w2 in items[i + 1:]:
                if t1 == t2 or (k1 == READ and k2 == READ) or (k1 == ATOMIC and k2 == ATOMIC):
                    continue  # two reads, or two atomics (the hardware orders those), do not race
                if t1 >> 5 == t2 >> 5 and w1 != w2:  # ordered by cuda.syncwarp()
                    continue
                if proxy[r1] and proxy[r2]:  # a copy engine's write and a tensor core's read: ordered by mbarriers
                    continue
                key = (int(e[r1, AID]), pc1, k1, pc2, k2)
                if key in seen:
                    continue
                seen.add(key)
                race = self._races.get(key)
                if race is None:
                    self._races[key] = race = [0, int(e[r1, ELEM]), block, (t1, t2), int(e[r1, BAR]), li]
                race[0] += 1

    # -- analyses --------------------------------------------------------------------------------------------
    def _where(self, pc):
        filename, lineno = self._pcs[pc]
        return location(filename, lineno), source_line(filename, lineno)

    def _thread_xyz(self, li, tid):
        bx, by, _ = self.launches[li].block
        return (tid % bx, (tid // bx) % by, tid // (bx * by))

    def traffic(self, space: str | None = "global") -> list:
        """Loads, stores and bytes per array and launch (``space=None``: every space)."""
        self._grow()
        if self._local_counts:
            for k, n in self._local_counts.items():
                self._traffic[k // 3, k % 3] += n
            self._local_counts.clear()
            for k, elems in self._local_seen.items():
                n = len(elems)
                self._mark_seen(np.full(n, k // 3, np.int64), np.fromiter(elems, np.int64, n),
                                np.full(n, k % 3, np.int64))
            self._local_seen.clear()
        out = []
        for aid, info in enumerate(self._arrays):
            sp = _SPACE_NAMES[info.space]
            if space is not None and sp != space:
                continue
            loads, stores, atomics = (int(x) for x in self._traffic[aid])
            loads, stores = loads + atomics, stores + atomics  # an atomic reads and writes its element
            out.append(
                ArrayTraffic(
                    launch=info.launch, kernel=info.kernel, array=info.name, space=sp, shape=info.shape,
                    itemsize=info.itemsize, elements=info.size, loads=loads, stores=stores, atomics=atomics,
                    bytes_loaded=loads * info.itemsize, bytes_stored=stores * info.itemsize,
                    loads_per_element=reuse(loads, info.size),
                    elements_loaded=self._count_seen(aid, True), elements_stored=self._count_seen(aid, False),
                )
            )
        return out

    def _count_seen(self, aid, loaded) -> int:
        seen = self._seen.get((aid, loaded))
        return int(np.count_nonzero(seen)) if seen is not None else 0

    def global_bytes(self) -> int:
        """Bytes moved to and from global memory by every traced launch (loads + stores, atomics in both)."""
        return sum(t.bytes_loaded + t.bytes_stored for t in self.traffic())

    def barriers(self) -> list:
        """[Barriers], one per launch: barriers and ``cuda.syncwarp()`` executed, shared arrays allocated
        (zero counts for a launch that ended in an error)."""
        shared = defaultdict(list)
        for aid, info in enumerate(self._arrays):
            if info.space == _SPACES[_arrays.SHARED]:
                shared[info.launch].append(aid)
        self._grow()
        out = []
        for li in range(len(self.launches)):
            counts = self._sync.get(li, (0, 0, 0, 0))  # a launch that raised has no counts
            names = [self._arrays[aid].name for aid in shared[li]]
            accesses = int(self._traffic[shared[li]].sum())  # raw rows: loads, stores, atomics (each once)
            out.append(Barriers(li, self.launches[li].kernel, *counts, shared_arrays=names,
                                shared_accesses=accesses))
        return out

    def collectives(self) -> list:
        """[{kind: count}], one per launch: the warp-collective instructions of `gpukernels._mma` executed
        (``mma_f16``, ``ldmatrix_x4``, ...), one per warp and call -- a kernel that multiplies on tensor cores
        issues one ``mma_f16`` per 16 x 8 x 16 product (empty for a launch that ended in an error)."""
        return [dict(self._collectives.get(li, {})) for li in range(len(self.launches))]

    def async_events(self) -> list:
        """[AsyncEvent] of every traced launch, in order: each ``cp.async`` and warp's ``wgmma`` issued, each commit,
        each landing (the data moved) and each wait that covered it, with its thread, commit group, barrier
        interval, line and step in its block (`gpukernels.sim._async.AsyncEvent`). Empty for launches without
        asynchronous instructions. `gpukernels.classroom.timeline` draws them per stage."""
        return list(self._async)

    def ring(self, launch: int = 0, block=(0, 0, 0)) -> list:
        """Each use of each stage of a TMA ring in ``block`` of ``launch``: its mbarriers' waits, arrivals and
        phases, its copies and wgmmas (`gpukernels._ringlog.StageUse`); [] without TMA copies."""
        from ._ringlog import stage_uses

        return stage_uses(self._async, launch, block)

    def coalescing(self) -> Coalescing:
        lines: dict = {}
        kern: dict = defaultdict(lambda: [0, 0])
        for (aid, pc, kind), (req, sectors, need, lanes) in self._coal.items():
            info = self._arrays[aid]
            loc, src = self._where(pc)
            key = (info.kernel, loc, info.name, kind)
            cur = lines.setdefault(key, [0, 0, 0, src, 0])
            cur[0] += req
            cur[1] += sectors
            cur[2] += need
            cur[4] += lanes
            kern[info.kernel][0] += sectors
            kern[info.kernel][1] += need
        out = [
            LineCoalescing(kernel=k, location=loc, source=src, array=name, kind=_KIND[kind], requests=req,
                           sectors=sec, min_sectors=need, efficiency=coalescing_efficiency(need, sec), lanes=lanes)
            for (k, loc, name, kind), (req, sec, need, src, lanes) in lines.items()
        ]
        out.sort(key=lambda x: (x.kernel, _line_no(x.location)))
        return Coalescing(out, {k: coalescing_efficiency(n, s) for k, (s, n) in kern.items()})

    def bank_conflicts(self) -> list:
        lines: dict = {}
        for (aid, pc, kind), (req, waves, mx) in self._banks.items():
            info = self._arrays[aid]
            loc, src = self._where(pc)
            cur = lines.setdefault((info.kernel, loc, info.name, kind), [0, 0, 0, src])
            cur[0] += req
            cur[1] += waves
            cur[2] = max(cur[2], mx)
        out = [
            BankConflicts(kernel=k, location=loc, source=src, array=name, kind=_KIND[kind], requests=req,
                          wavefronts=w, max_degree=mx, mean_degree=w / req if req else 0.0)  # ratio of sums
            for (k, loc, name, kind), (req, w, mx, src) in lines.items()
        ]
        out.sort(key=lambda x: (x.kernel, _line_no(x.location)))
        return out

    def hazards(self) -> Hazards:
        races = []
        for (aid, pc1, k1, pc2, k2), (count, elem, block, (t1, t2), interval, li) in self._races.items():
            info = self._arrays[aid]
            loc1, loc2 = self._where(pc1)[0], self._where(pc2)[0]
            # an atomic is a read and a write; against a read it is the write
            hazard = {(WRITE, READ): "read-after-write", (READ, WRITE): "write-after-read",
                      (ATOMIC, READ): "read-after-write", (READ, ATOMIC): "write-after-read"}.get(
                (k1, k2), "write-after-write"
            )
            races.append(
                Race(
                    kernel=info.kernel, array=info.name, space=_SPACE_NAMES[info.space], hazard=hazard,
                    first_location=loc1, first_kind=_KIND[k1], second_location=loc2, second_kind=_KIND[k2],
                    elements=count, example_element=_unravel(elem, info.shape), example_block=block,
                    example_threads=(self._thread_xyz(li, t1), self._thread_xyz(li, t2)),
                    example_interval=interval,
                    hint=f"a cuda.syncthreads() is missing after {loc1} ({_KIND[k1]} of {info.name}) and "
                    f"before {loc2} ({_KIND[k2]}): thread {self._thread_xyz(li, t2)} may run before or after "
                    f"thread {self._thread_xyz(li, t1)}'s access",
                )
            )
        races.sort(key=lambda r: (r.kernel, _line_no(r.first_location), _line_no(r.second_location)))
        uninit = []
        for (aid, pc), (count, elem, block, tid) in self._uninit.items():
            info = self._arrays[aid]
            uninit.append(
                UninitializedRead(kernel=info.kernel, array=info.name, location=self._where(pc)[0], reads=count,
                                  example_element=_unravel(elem, info.shape), example_block=block,
                                  example_thread=self._thread_xyz(info.launch, tid))
            )
        return Hazards(races, uninit)

    def divergence(self, only_divergent: bool = False) -> list:
        out = []
        for (li, pc, warp), (execs, lanes, mn) in self._div.items():
            loc, src = self._where(pc)
            full = self._warp_lanes.get((li, warp), 32)
            d = Divergence(kernel=self.launches[li].kernel, location=loc, source=src, warp=warp, lanes_in_warp=full,
                           executions=execs, mean_active=lanes / execs, min_active=mn)
            if not only_divergent or d.min_active < full:
                out.append(d)
        out.sort(key=lambda x: (x.kernel, _line_no(x.location), x.warp))
        return out

    def _need_events(self):
        if not self.keep_events:
            raise RuntimeError("the full event log is kept only with gpukernels.trace(events=True)")

    def arrays(self) -> list:
        """[ArrayInfo] of every array the traced launches touched or allocated, in the order first seen."""
        return [ArrayInfo(i, a.launch, a.kernel, a.name, _SPACE_NAMES[a.space], tuple(a.shape), a.itemsize, a.size)
                for i, a in enumerate(self._arrays)]

    def lines(self) -> list:
        """[(filename, lineno)]: the source lines that made accesses (``accesses()["line"]`` indexes them)."""
        return list(self._pcs)

    def accesses(self) -> np.ndarray:
        """Every access of every traced launch as a record array of ACCESS_DTYPE, in execution order within
        each block (only with ``trace(events=True)``). See ACCESS_DTYPE for the columns."""
        self._need_events()
        out = np.zeros(sum(len(e) for _, _, e in self._events), ACCESS_DTYPE)
        at = 0
        for li, block, e in self._events:
            rec = out[at: at + len(e)]
            at += len(e)
            rec["launch"] = li
            rec["block"] = block
            for name, col in (("thread", TID), ("array", AID), ("element", ELEM), ("kind", KIND),
                              ("interval", BAR), ("line", PC), ("occurrence", OCC), ("order", ORDER)):
                rec[name] = e[:, col]
        return out

    def events(self) -> np.ndarray:
        """Every access as a record array (only with ``trace(events=True)``)."""
        self._need_events()
        dtype = [("launch", "i4"), ("kernel", "U64"), ("block", "i4", 3), ("thread", "i4", 3), ("warp", "i4"),
                 ("lane", "i4"), ("array", "U64"), ("space", "U8"), ("element", "i8"), ("kind", "U6"),
                 ("interval", "i4"), ("location", "U256"), ("order", "i8")]
        parts = []
        for li, block, e in self._events:
            rec = np.zeros(len(e), dtype)
            bx, by, _ = self.launches[li].block
            tid = e[:, TID]
            rec["launch"] = li
            rec["kernel"] = self.launches[li].kernel
            rec["block"] = block
            rec["thread"] = np.stack([tid % bx, (tid // bx) % by, tid // (bx * by)], 1)
            rec["warp"], rec["lane"] = tid >> 5, tid & 31
            rec["array"] = [self._arrays[a].name for a in e[:, AID]]
            rec["space"] = [_SPACE_NAMES[self._arrays[a].space] for a in e[:, AID]]
            rec["element"] = e[:, ELEM]
            rec["kind"] = [_KIND[k] for k in e[:, KIND]]
            rec["interval"] = e[:, BAR]
            rec["location"] = [self._where(p)[0] for p in e[:, PC]]
            rec["order"] = e[:, ORDER]
            parts.append(rec)
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def summary(self) -> "Summary":
        return Summary(
            launches=[asdict(x) for x in self.launches],
            traffic=self.traffic(),
            coalescing=self.coalescing(),
            bank_conflicts=self.bank_conflicts(),
            hazards=self.hazards(),
            divergence=self.divergence(only_divergent=True),
            global_bytes=self.global_bytes(),
            seconds=self.seconds,
            barriers=self.barriers(),
        )


_KIND = {READ: "read", WRITE: "write", ATOMIC: "atomic"}


def _line_no(loc: str) -> int:
    try:
        return int(loc.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


def _unravel(elem: int, shape: tuple) -> tuple:
    if not shape:
        return ()
    return tuple(int(i) for i in np.unravel_index(int(elem), shape))


def _count_distinct(group: np.ndarray, value: np.ndarray, ngroups: int) -> np.ndarray:
    """Number of distinct ``value`` per ``group`` id."""
    value = value - value.min()
    span = int(value.max()) + 1
    pairs = np.unique(group * span + value)
    return np.bincount(pairs // span, minlength=ngroups)


def _mix(*cols: np.ndarray) -> np.ndarray:
    """One int64 key per row from non-negative integer columns (mixed radix), preserving lexicographic order."""
    key = np.zeros(len(cols[0]), np.int64)
    total = 1
    for c in cols:
        span = int(c.max()) + 1 if len(c) else 1
        total *= span
        if total >= 1 << 62:
            raise OverflowError("trace keys too large")
        key = key * span + c
    return key


def _rank_within(key: np.ndarray, new: np.ndarray | None = None) -> np.ndarray:
    """For each row, how many earlier rows have the same key. With ``new`` (bool per row), only rows marked new
    count, and an unmarked row gets the rank of the last new row of its key before it (a vector's elements)."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    starts = np.r_[True, k[1:] != k[:-1]]
    idx = np.arange(len(k))
    first = np.maximum.accumulate(np.where(starts, idx, 0))
    out = np.empty(len(k), np.int64)
    if new is None:
        out[order] = idx - first
    else:
        upto = np.cumsum(new[order].astype(np.int64))  # new rows up to and including this one, in key order
        out[order] = np.maximum(upto - (upto[first] - new[order][first]) - 1, 0)
    return out




_IS_INTRINSIC: dict = {}  # filename -> _is_intrinsic: asked once per access inside a vector instruction


def _is_intrinsic(filename: str) -> bool:
    """Code of gpukernels._intrinsics and gpukernels._mma: each call is one instruction on the GPU (a 16-byte load
    or store, a cp.async, an ldmatrix, a wgmma's reads of its tiles)."""
    known = _IS_INTRINSIC.get(filename)
    if known is None:
        known = _IS_INTRINSIC[filename] = filename in _INTRINSICS or os.path.abspath(filename) in _INTRINSICS
    return known


# -------------------------------------------------------------------------------------------------------------
# Presentation
# -------------------------------------------------------------------------------------------------------------


@dataclass
class Summary:
    """All analyses of a trace. ``print(summary)`` or display it in a notebook for tables; ``to_dict()``."""

    launches: list
    traffic: list
    coalescing: Coalescing
    bank_conflicts: list
    hazards: Hazards
    divergence: list
    global_bytes: int
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    barriers: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), default=_jsonable, **kw)

    def tables(self) -> dict:
        """The analyses as tables (``gpukernels._tables.Table``: plain data, drawn as rich tables by
        ``print(summary)`` and as Markdown in a notebook), by name: traffic, coalescing, bank_conflicts, hazards,
        barriers, divergence -- the last three only when there is something to show."""
        out = {}
        rows = [[str(x.launch), x.kernel, x.array, str(x.shape), f"{x.loads:,}", f"{x.stores:,}",
                 f"{x.bytes_loaded + x.bytes_stored:,}", f"{x.loads_per_element:.3g}"] for x in self.traffic]
        out["traffic"] = Table("Global memory traffic", ["launch", "kernel", "array", "shape", "loads", "stores", "bytes",
                                                         "loads/element"], rows,
                               f"total global bytes: {self.global_bytes:,}",
                               right=("loads", "stores", "bytes", "loads/element"))
        rows = [[x.kernel, x.location, x.array, x.kind, f"{x.requests:,}", f"{x.sectors:,}", f"{x.min_sectors:,}",
                 f"{x.efficiency:.3f}"] for x in self.coalescing.lines]
        out["coalescing"] = Table("Coalescing (global, 32-byte sectors per warp access)",
                                  ["kernel", "line", "array", "kind", "requests", "sectors", "minimum", "efficiency"],
                                  rows, "per kernel: " + ", ".join(f"{k} {v:.3f}"
                                                                   for k, v in self.coalescing.per_kernel.items()))
        if self.bank_conflicts:
            rows = [[x.kernel, x.location, x.array, x.kind, f"{x.requests:,}", str(x.max_degree), f"{x.mean_degree:.2f}"]
                    for x in self.bank_conflicts]
            out["bank_conflicts"] = Table("Shared-memory bank conflicts", ["kernel", "line", "array", "kind", "requests",
                                                                           "max degree", "mean degree"], rows)
        rows = [[r.kernel, f"race ({r.hazard})", r.array,
                 f"{r.first_location} {r.first_kind} -> {r.second_location} {r.second_kind}", f"{r.elements:,}",
                 f"{r.array}{list(r.example_element)} block {r.example_block} threads "
                 f"{r.example_threads[0]} / {r.example_threads[1]}"] for r in self.hazards.races]
        rows += [[u.kernel, "uninitialised read", u.array, u.location, f"{u.reads:,}",
                  f"{u.array}{list(u.example_element)} block {u.example_block} thread {u.example_thread}"]
                 for u in self.hazards.uninitialized]
        caption = "a race means a cuda.syncthreads() is missing between the two lines" if rows else ""
        out["hazards"] = Table("Hazards", ["kernel", "what", "array", "lines", "elements", "example"],
                               rows or [["-", "none found", "", "", "", ""]], caption)
        if any(b.syncthreads or b.syncwarp or b.shared_arrays for b in self.barriers):
            rows = [[str(b.launch), b.kernel, f"{b.syncthreads:,}", f"{b.syncwarp:,}", ", ".join(b.shared_arrays) or "-",
                     f"{b.shared_accesses:,}"] for b in self.barriers]
            out["barriers"] = Table("Synchronisation and shared memory", ["launch", "kernel", "syncthreads", "syncwarp",
                                                                         "shared arrays", "shared accesses"], rows)
        if self.divergence:
            rows = [[d.kernel, d.location, str(d.warp), f"{d.executions:,}", f"{d.mean_active:.1f}", str(d.min_active),
                     str(d.lanes_in_warp)] for d in self.divergence[:30]]
            out["divergence"] = Table("Divergence (warps with inactive lanes)", ["kernel", "line", "warp", "executions",
                                                                                "mean active", "min active", "lanes"],
                                      rows)
        return out

    def __rich__(self):
        from rich.console import Group

        return Group(*(t.__rich__() for t in self.tables().values()))

    def _repr_markdown_(self) -> str:
        """In a notebook, a Summary shows its tables."""
        return "\n\n".join(t.markdown() for t in self.tables().values())

    def __str__(self) -> str:
        from rich.console import Console

        console = Console(width=140, record=True, file=_Null())
        console.print(self)
        return console.export_text()


class _Null:
    def write(self, *_):
        pass

    def flush(self):
        pass


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x).__name__)


# -------------------------------------------------------------------------------------------------------------
# Entry points
# -------------------------------------------------------------------------------------------------------------


@contextmanager
def trace(events: bool = False, local: bool = True, count_local: bool = True):
    """Trace every simulated kernel launch in the ``with`` block: ``with gpukernels.trace() as t: ...``.
    ``events``: keep the full event log; ``local=False``: without local arrays' accesses (they are still counted);
    ``count_local=False``: local arrays are not observed at all -- no counts, no events -- for analyses that need
    only global and shared memory (races: a local array is private to its thread). A kernel that keeps its
    accumulators in local arrays then runs about twice as fast under the tracer."""
    import time

    from . import _device

    if not _device.is_simulator():
        raise RuntimeError("gpukernels.trace() records accesses on the simulator; run with GPUKERNELS_DEVICE=sim")
    if _state.TRACER is not None:
        raise RuntimeError("a gpukernels.trace() is already active")
    t = Trace(events=events, local=local, count_local=count_local)
    _state.TRACER = t
    start = time.perf_counter()
    try:
        yield t
    finally:
        _state.TRACER = None
        t.seconds = time.perf_counter() - start


def trace_main(argv=None) -> int:
    """gpukernels trace LESSON [--version STEP] [--size ...] [--json FILE [--events]]: run one step of a lesson
    (by name or number) on the simulator under the tracer, print the tables, optionally write them as JSON."""
    import os

    import gpukernels
    from rich.console import Console

    from . import _device
    from ._modes import run_in_mode
    from ._simtime import check_size, watch
    from .cli import ArgumentParser, UsageError, fail, nonnegative_int, output_file, parse_size, step_name

    argv = sys.argv[1:] if argv is None else list(argv)
    prog = "gpukernels trace"
    parser = ArgumentParser(prog=prog, description=trace_main.__doc__)
    parser.add_argument("lesson", choices=sorted(gpukernels.LESSONS))
    parser.add_argument("--version", metavar="STEP", help="a step by name or number, as gpukernels source takes it "
                        "(tiled or 3; default: the last, optimized)")
    parser.add_argument("--size", help="input shape: 64,64,32 or 64x64x32, or 64 for a square (a cube for matmul); "
                                       "default: the lesson's SHAPES['trace']")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="the inputs' random seed (default 0)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--events", action="store_true", help="with --json: write every access into it too")
    args = parser.parse_args(argv)
    lesson = gpukernels.LESSONS[args.lesson]
    names = list(lesson.VERSIONS)
    try:  # a name or a number, as source and diff take a step
        version = step_name(args.lesson, args.version) if args.version is not None else names[-1]
    except UsageError as err:
        return fail(prog, str(err))
    if args.events and not args.json:  # the events go into the JSON file only: alone it did nothing, silently
        return fail(prog, "--events writes every access into the --json FILE; give --json FILE with it")
    try:
        shape = parse_size(args.size, args.lesson) if args.size is not None else lesson.SHAPES["trace"]
    except UsageError as err:
        return fail(prog, str(err))
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        return fail(prog, f"cannot write --json {args.json!r}: its folder does not exist")
    if args.json:
        output_file(args.json, "--json")
    check_size(args.lesson, shape, given=args.size)  # before any array is made: memory, and a size the simulator cannot finish
    if not _device.is_simulator():
        # numba.cuda is the real GPU in this process; the tracer needs the simulator, so trace in a child
        return run_in_mode("sim", module="gpukernels", args=["trace", *argv], capture=False).returncode
    from rich.progress import Progress

    from ._launch import LaunchError
    from .check import version_inputs

    # the inputs this version takes (attention's tensor-core steps: float16 copies)
    inputs = version_inputs(args.lesson, version, lesson.make_inputs(shape, args.seed))
    size = "x".join(map(str, shape))
    try:  # the version's own argument check first: a shape it does not take is refused with its reason, one line
        lesson.VERSIONS[version].check(*inputs)
    except LaunchError as err:
        return fail(prog, f"--size {args.size or size}: {err}")
    with Progress(transient=True) as progress, watch(progress, f"{args.lesson}.{version} {size}",
                                                     size=args.size or size):
        with trace(events=args.events) as t:
            lesson.VERSIONS[version](*inputs)
    summary = t.summary()
    summary.extra = {"lesson": args.lesson, "version": version, "shape": list(shape)}
    console = Console()
    console.print(f"[bold]{args.lesson}.{version}[/bold] shape {tuple(shape)}: {len(t.launches)} launch(es), "
                  f"traced in {t.seconds:.2f} s")
    from ._terminal import fit

    for table in summary.tables().values():  # each to the terminal's width: names and numbers whole, one line a row
        console.print(fit(table, console.width, prose=["line", "lines", "kernel", "example", "shared arrays"],
                          more="--json FILE keeps them whole", keep_end=["line", "lines"]))
    if args.json:
        data = summary.to_dict()
        if args.events:
            ev = t.events()
            data["events"] = {name: ev[name].tolist() for name in ev.dtype.names}
        try:
            with open(args.json, "w") as f:
                json.dump(data, f, default=_jsonable, indent=1)
        except OSError as err:
            return fail(prog, f"cannot write --json {args.json!r}: {err.strerror or err}")
        console.print(f"wrote {args.json}")
    return 0
