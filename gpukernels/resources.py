"""Registers, shared memory, spills and occupancy of every version -- from the compiler, so no GPU is needed.

What you will learn
-------------------
A kernel's speed is capped by how many of its warps an SM can keep *resident* at once (its occupancy): while
one warp waits ~500 cycles for DRAM, the scheduler runs others. How many fit is decided by four budgets per SM,
and the smallest one wins:

* **threads** -- at most 2048 threads (64 warps) per SM on sm_80/sm_90, 1536 on sm_86/sm_89;
* **blocks** -- at most 32 resident blocks per SM (16 on sm_86, 24 on sm_89);
* **registers** -- 65536 per SM, split over 4 sub-partitions and handed out per warp in units of 256
  (a 148-register thread costs ceil(148 * 32 / 256) * 256 = 4864 registers per warp);
* **shared memory** -- 228 KB per SM on sm_90, allocated per block in 128-byte units plus 1 KB that the
  driver reserves for every block.

(sm_90 adds a fifth, rarely binding: named barriers.) ``occupancy`` applies exactly the rules of CUDA's own
calculator (``cuda_occupancy.h``); ``report`` compiles every version's kernels with the launch configuration
its launcher really uses (``Version.launches``) and says which budget binds.

How the compile works without a GPU
-----------------------------------
``numba.cuda.compile_ptx`` lowers the kernel to PTX (NVVM ships in ``numba-cuda[cu13]``); nvJitLink assembles
the PTX for the chosen architecture with ``-verbose``, and its log is ptxas's resource line, e.g.
``used 32 registers, used 1 barriers, 0 stack, 3072 bytes smem, 744 bytes cmem[0], 0 bytes lmem``.
Neither needs a GPU or a driver.

In simulator mode (``GPUKERNELS_DEVICE=sim``, or no GPU) ``numba.cuda`` *is* the simulator: its kernels are
Python functions and its ``compile_ptx`` is ``None``. Numba picks simulator or compiler once, at the first
``import numba.cuda``, so the compile then runs in a **child process** (``_WORKER`` below) that imports the real
``numba.cuda`` *before* ``gpukernels`` and rebuilds the same launches from the same shapes (``gpukernels.sim``'s
install only patches the simulator's kernel class, which the compiler never touches). On a GPU machine the
compile runs in this process. Results are cached on disk (``cache_dir()``), keyed by the kernel's source,
signature, closure constants, architecture and package versions, so only the first run pays ~1 s per kernel.

Run ``gpukernels resources [LESSON ...] [--arch sm_90] [--json FILE]``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._modes import COMPILE_PREAMBLE, ROOT, run_in_mode

__all__ = [
    "Arch", "ARCHS", "Occupancy", "occupancy", "occupancy_sweep", "KernelResources", "parse_log",
    "ResourceRow", "report", "resources_main", "cache_dir", "launches_for", "plans_for", "ToolchainMissing",
    "require_toolchain",
]

# ----------------------------------------------------------------------------------------------------------
# Architecture limits (CUDA C++ Programming Guide, "Compute capabilities" table, and cuda_occupancy.h)
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arch:
    """Per-SM limits of one architecture, plus an example GPU's spec-sheet peaks (for the roofline)."""

    name: str  # "sm_90"
    gpu: str  # an example GPU of this architecture, whose SM count and peaks are given below
    cc: tuple[int, int]
    sms: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes, the largest shared-memory carveout
    smem_per_block: int = 48 * 1024  # without the opt-in attribute (numba kernels don't opt in)
    smem_per_block_optin: int = 48 * 1024
    smem_reserved_per_block: int = 1024  # the driver's per-block reservation (sm_80 and later)
    smem_alloc_unit: int = 128
    smem_carveouts_kb: tuple[int, ...] = ()  # the carveout sizes the driver can choose from
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    reg_alloc_unit: int = 256  # registers are allocated per warp, in units of this many
    max_regs_per_thread: int = 255
    sub_partitions: int = 4  # registers are split over 4 schedulers; a warp lives in one
    max_threads_per_block: int = 1024
    warp_size: int = 32
    barrier_factor: int = 2  # named barriers available per SM = factor * max_blocks_per_sm (sm_90 limit)
    peak_fp32_tflops: float = 0.0  # spec sheet, FMA = 2 FLOPs, boost clock
    peak_bw_gbs: float = 0.0  # spec sheet DRAM bandwidth
    peak_fp16_tensor_tflops: float = 0.0  # spec sheet, dense FP16 on the tensor cores with FP32 accumulation

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def ridge(self) -> float:
        """FLOP per byte at which the roofline's two ceilings meet."""
        return self.peak_fp32_tflops * 1e12 / (self.peak_bw_gbs * 1e9)


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("sm_80", "A100 SXM 80GB", (8, 0), sms=108, max_threads_per_sm=2048, max_blocks_per_sm=32,
             smem_per_sm=164 * 1024, smem_per_block_optin=163 * 1024,
             smem_carveouts_kb=(0, 8, 16, 32, 64, 100, 132, 164), peak_fp32_tflops=19.5, peak_bw_gbs=2039,
             peak_fp16_tensor_tflops=312),
        Arch("sm_86", "RTX 3090", (8, 6), sms=82, max_threads_per_sm=1536, max_blocks_per_sm=16,
             smem_per_sm=100 * 1024, smem_per_block_optin=99 * 1024, smem_carveouts_kb=(0, 8, 16, 32, 64, 100),
             barrier_factor=1, peak_fp32_tflops=35.6, peak_bw_gbs=936, peak_fp16_tensor_tflops=71),
        Arch("sm_89", "L40S", (8, 9), sms=142, max_threads_per_sm=1536, max_blocks_per_sm=24,
             smem_per_sm=100 * 1024, smem_per_block_optin=99 * 1024, smem_carveouts_kb=(0, 8, 16, 32, 64, 100),
             barrier_factor=1, peak_fp32_tflops=91.6, peak_bw_gbs=864, peak_fp16_tensor_tflops=362),
        Arch("sm_90", "H200 SXM", (9, 0), sms=132, max_threads_per_sm=2048, max_blocks_per_sm=32,
             smem_per_sm=228 * 1024, smem_per_block_optin=227 * 1024,
             smem_carveouts_kb=(0, 8, 16, 32, 64, 100, 132, 164, 196, 228), peak_fp32_tflops=66.9,
             peak_bw_gbs=4800, peak_fp16_tensor_tflops=989),
    )
}
DEFAULT_ARCH = "sm_90"


def get_arch(arch: str | Arch) -> Arch:
    if isinstance(arch, Arch):
        return arch
    key = arch.lower().strip()
    key = key if key.startswith("sm_") else "sm_" + key.removeprefix("sm").replace(".", "")  # "90", "sm90", "9.0"
    if key not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    return ARCHS[key]


# ----------------------------------------------------------------------------------------------------------
# Occupancy: the rules of cuda_occupancy.h (cudaOccMaxActiveBlocksPerMultiprocessor), default carveout
# ----------------------------------------------------------------------------------------------------------

LIMITS = ("threads", "blocks", "registers", "shared memory", "barriers")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of one kernel fit on one SM, and which budget stops the next one."""

    arch: str
    threads_per_block: int
    registers: int
    shared_bytes: int  # static + dynamic, as the kernel asks for
    barriers: int
    limits: dict[str, int]  # blocks per SM allowed by each budget alone
    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    regs_per_warp: int  # allocated (rounded to the allocation unit)
    smem_per_block: int  # allocated (reservation + rounding)
    binding: tuple[str, ...]  # the budget(s) that give blocks_per_sm

    @property
    def warps_per_block(self) -> int:
        return -(-self.threads_per_block // 32)

    @property
    def occupancy(self) -> float:
        """Resident warps / the SM's maximum: 1.0 means every warp slot is filled."""
        return self.warps_per_sm / self.max_warps_per_sm

    def explain(self) -> str:
        """One sentence: what binds and by how much."""
        if self.blocks_per_sm == 0:
            return f"does not fit on an SM: {', '.join(self.binding)} exceeded"
        parts = [f"{name} allow {n}" for name, n in self.limits.items() if n < 10**6]
        return (f"{self.blocks_per_sm} blocks x {self.warps_per_block} warps = {self.warps_per_sm}/"
                f"{self.max_warps_per_sm} warps ({self.occupancy:.0%}); limited by {' and '.join(self.binding)} "
                f"({'; '.join(parts)})")


def occupancy(arch: str | Arch, threads_per_block: int, registers: int, shared_bytes: int = 0,
              barriers: int = 0, optin: bool = False) -> Occupancy:
    """Blocks and warps of a kernel resident per SM, as CUDA's occupancy calculator computes them.

    ``registers`` per thread and ``shared_bytes`` per block (static + dynamic, as the driver counts them) come
    from the compiler (see ``report``); ``barriers`` is the number of named barriers, which limits blocks only
    on sm_90. The shared-memory carveout is the driver's default (the largest); a block may use 48 KB unless
    the kernel opted in to more (``optin``: Numba's launch never does; `gpukernels._launch.Launch` does for a
    launch that asks for more than 48 KB of dynamic shared memory). Checked against the driver's
    cuOccupancyMaxActiveBlocksPerMultiprocessor on an H200 for every lesson kernel, block sizes 32..1024 and
    dynamic shared memory 0..45000 bytes: 1792 configurations, no difference (and registers, static shared
    memory and local memory parsed from the log equal CU_FUNC_ATTRIBUTE_* for all 14 kernels).
    """
    a = get_arch(arch)
    big = 10**9
    warps = -(-threads_per_block // a.warp_size)
    limits: dict[str, int] = {}

    # Threads: whole warps are allocated, and a block may not exceed 1024 threads.
    limits["threads"] = 0 if threads_per_block > a.max_threads_per_block else a.max_warps_per_sm // max(warps, 1)
    limits["blocks"] = a.max_blocks_per_sm

    # Registers: per warp, rounded up to 256; each of the 4 sub-partitions holds regs_per_sm / 4 and a warp
    # lives in one of them, so the count of warps per sub-partition is rounded down first.
    regs_per_warp = _round_up(registers * a.warp_size, a.reg_alloc_unit)
    if registers > a.max_regs_per_thread or regs_per_warp * _round_up(warps, a.sub_partitions) > a.regs_per_block:
        limits["registers"] = 0
    elif regs_per_warp == 0:
        limits["registers"] = big
    else:
        warps_per_sub = (a.regs_per_sm // a.sub_partitions) // regs_per_warp
        limits["registers"] = (warps_per_sub * a.sub_partitions) // max(warps, 1)

    # Shared memory: the driver reserves 1 KB per block and allocates in 128-byte units.
    smem_alloc = _round_up(shared_bytes + a.smem_reserved_per_block, a.smem_alloc_unit)
    if smem_alloc > (a.smem_per_block_optin if optin else a.smem_per_block) + a.smem_reserved_per_block:
        limits["shared memory"] = 0
    else:
        limits["shared memory"] = a.smem_per_sm // smem_alloc if smem_alloc else big

    limit = min(limits.values())
    # sm_90 only: named barriers (16 per block in hardware) are shared by the resident blocks.
    if a.cc[0] >= 9 and barriers > 0:
        limits["barriers"] = (a.barrier_factor * a.max_blocks_per_sm) // barriers
        limit = min(limit, limits["barriers"])
    binding = tuple(name for name, n in limits.items() if n == limit)
    return Occupancy(arch=a.name, threads_per_block=threads_per_block, registers=registers,
                     shared_bytes=shared_bytes, barriers=barriers, limits=limits, blocks_per_sm=limit,
                     warps_per_sm=limit * warps, max_warps_per_sm=a.max_warps_per_sm, regs_per_warp=regs_per_warp,
                     smem_per_block=smem_alloc, binding=binding)


def occupancy_sweep(arch: str | Arch, registers: int, shared_bytes: int = 0, barriers: int = 0,
                    block_sizes=tuple(range(32, 1025, 32))) -> list[Occupancy]:
    """Occupancy of the same per-thread registers and per-block shared memory at other block sizes."""
    return [occupancy(arch, t, registers, shared_bytes, barriers) for t in block_sizes]


# ----------------------------------------------------------------------------------------------------------
# Parsing the assembler's log
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelResources:
    """What the assembler reports for one kernel on one architecture."""

    registers: int
    shared_bytes: int  # static shared memory per block, as the driver counts it (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
    local_bytes: int  # local memory per thread (spills, and local arrays that don't fit in registers)
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    barriers: int  # named barriers ptxas allocated (bar.sync 0 = __syncthreads counts 1)
    const_bytes: int = 0  # cmem[0]: kernel parameters and the like
    log_shared_bytes: int = 0  # the assembler's own smem figure (on sm_90 it includes the 1 KB reservation)


_NUM = r"(\d+)"

#: Bytes of the driver's per-block reservation that the assembler's smem figure already includes. On sm_90
#: the kernel's shared window starts with the 1 KB the driver reserves, so nvJitLink reports 3072 bytes for two
#: 16 x 16 float32 tiles while the driver (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) reports 2048 and adds the
#: 1 KB itself when it computes occupancy -- checked on an H200 for every lesson kernel. sm_8x logs don't
#: include it.
LOG_INCLUDES_RESERVED = {"sm_90": 1024}


def parse_log(text: str, arch: str = DEFAULT_ARCH) -> KernelResources:
    """Parse nvJitLink's ``-verbose`` info log for one kernel compiled for ``arch``.

    It holds two summaries: ptxas's ("ptxas info : Used 32 registers, used 1 barriers" and a line with
    stack frame and spill counts) and the linker's ("info : used 32 registers, used 1 barriers, 0 stack,
    3072 bytes smem, 744 bytes cmem[0], 0 bytes lmem"). The barrier count is ptxas's: the linker's line reports
    5 barriers for kernels that contain no barrier instruction at all, and the driver's occupancy agrees with
    ptxas. The shared-memory figure is converted to the driver's count (see ``LOG_INCLUDES_RESERVED``).
    """
    def grab(pattern: str, default: int) -> int:
        m = re.search(pattern, text)
        return default if m is None else int(m.group(1))

    ptxas_regs = re.search(r"ptxas info\s*:\s*Used (\d+) registers(?:, used (\d+) barriers)?", text)
    link = re.search(r"used (\d+) registers, used (\d+) barriers, (\d+) stack, (\d+) bytes smem, (\d+) bytes "
                     r"cmem\[0\], (\d+) bytes lmem", text)
    if ptxas_regs is None and link is None:
        raise ValueError(f"no resource line in the assembler log:\n{text}")
    registers = int(ptxas_regs.group(1)) if ptxas_regs else int(link.group(1))
    if ptxas_regs and ptxas_regs.group(2) is not None:
        barriers = int(ptxas_regs.group(2))
    elif ptxas_regs:
        barriers = 0  # ptxas omits the barrier count when there is none
    else:
        barriers = int(link.group(2))
    smem = int(link.group(4)) if link else grab(_NUM + r" bytes smem", 0)
    lmem = int(link.group(6)) if link else grab(_NUM + r" bytes lmem", 0)
    cmem = int(link.group(5)) if link else grab(_NUM + r" bytes cmem\[0\]", 0)
    reserved = LOG_INCLUDES_RESERVED.get(get_arch(arch).name, 0) if link else 0
    return KernelResources(
        registers=registers,
        shared_bytes=max(0, smem - reserved) if smem else 0,
        local_bytes=lmem,
        stack_bytes=grab(_NUM + r" bytes stack frame", 0),
        spill_stores=grab(_NUM + r" bytes spill stores", 0),
        spill_loads=grab(_NUM + r" bytes spill loads", 0),
        barriers=barriers,
        const_bytes=cmem,
        log_shared_bytes=smem,
    )


# ----------------------------------------------------------------------------------------------------------
# Launch configurations: the launcher's own plan, for a lesson's shape
# ----------------------------------------------------------------------------------------------------------


def _lesson(name: str):
    import gpukernels

    if name not in gpukernels.LESSONS:
        raise ValueError(f"unknown lesson {name!r}; known: {', '.join(gpukernels.LESSONS)}")
    return gpukernels.LESSONS[name]


def lesson_shape(lesson: str, shape_key: str = "demo_gpu") -> tuple:
    """The lesson's shape for ``shape_key`` (the first one where the key holds a list)."""
    shapes = _lesson(lesson).SHAPES[shape_key]
    return tuple(shapes[0] if isinstance(shapes, list) else shapes)


def launches_for(lesson: str, version: str, shape: tuple):
    """The `Launch` list that ``lesson.VERSIONS[version]`` makes for inputs of ``shape``, as it takes them (attention's
    tensor-core steps: float16; `gpukernels.check.version_inputs`). Nothing runs."""
    return _lesson(lesson).VERSIONS[version].launches(*plan_inputs(lesson, version, shape))


def plan_inputs(lesson: str, version: str, shape: tuple) -> list:
    """Inputs of ``shape`` for planning ``lesson.VERSIONS[version]``'s launches, which depend only on the inputs'
    shapes and dtypes: zeros (calloc'd, never written) of the lesson's ``input_shapes``, in the dtypes the version
    takes (attention's float16 copies), learnt on one element per array. Random inputs at attention's GPU shape took
    5 s, and a float16 copy of 800 MB of zeros seconds more, for each planning process. A lesson without
    ``input_shapes`` gets ``make_inputs``."""
    import numpy as np

    from .check import version_inputs

    mod = _lesson(lesson)
    specs = getattr(mod, "input_shapes", None)
    if specs is None:
        return list(version_inputs(lesson, version, mod.make_inputs(tuple(shape), 0)))
    full = [(tuple(s), np.dtype(d)) for s, d in specs(tuple(shape))]
    probe = version_inputs(lesson, version, [np.zeros((1,) * len(s), d) for s, d in full])
    if [x.shape for x in probe] != [(1,) * len(s) for s, _ in full]:  # not a copy element for element
        return list(version_inputs(lesson, version, [np.zeros(s, d) for s, d in full]))
    return [np.zeros(s, x.dtype) for (s, _), x in zip(full, probe)]


def kernel_name(kernel: Any) -> str:
    return getattr(kernel, "py_func", kernel).__name__


def _signature(launch) -> tuple:
    sig = getattr(launch, "sig", None)
    if sig is not None:
        return sig
    import numba

    return tuple(numba.typeof(a) for a in launch.args)


@dataclass(frozen=True)
class LaunchPlan:
    """What the report needs of a `Launch`, without its (large) arguments."""

    kernel: Any
    grid: tuple
    block: tuple
    shared_bytes: int
    sig: tuple

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


_PLANS: dict = {}


def plans_for(lesson: str, shape: tuple) -> dict[str, list[LaunchPlan]]:
    """Every version's launches for inputs of ``shape`` (`plan_inputs`: zeros, never random values), memoised per
    process. Each version is planned on the inputs it takes (`gpukernels.check.version_inputs`); a version that does
    not take ``shape`` (`supports`) has no launches."""
    from .check import supports

    key = (lesson, tuple(shape))
    if key not in _PLANS:
        mod = _lesson(lesson)
        _PLANS[key] = {name: [LaunchPlan(l.kernel, tuple(l.grid), tuple(l.block), l.shared_bytes, _signature(l))
                              for l in v.launches(*plan_inputs(lesson, name, shape))]
                       if supports(lesson, name, shape) else [] for name, v in mod.VERSIONS.items()}
    return _PLANS[key]


def _closure_constants(func) -> list:
    """Closure values that shape the code (factory arguments such as threads, elems, R, S)."""
    out = []
    for cell in func.__closure__ or ():
        v = cell.cell_contents
        if isinstance(v, (int, float, bool, str, tuple)):
            out.append(repr(v))
        else:
            inner = getattr(v, "py_func", None)
            if inner is not None:
                out.append(inner.__qualname__)
                out.extend(_closure_constants(inner))
    return out


def _versions() -> dict[str, str | None]:
    from ._device import package_versions

    return package_versions()


def _jit_options(kernel) -> dict:
    """The decorator options that change the compiled code (``launch_bounds`` caps the registers)."""
    opts = getattr(kernel, "targetoptions", None) or {}
    return {k: opts[k] for k in ("launch_bounds", "fastmath") if opts.get(k)}


def cache_key(launch, arch: str) -> str:
    func = launch.kernel.py_func
    try:
        source = Path(inspect.getsourcefile(func)).read_text()
    except (TypeError, OSError):
        source = func.__code__.co_code.hex()
    h = hashlib.sha256()
    for part in (source, func.__module__, func.__qualname__, repr(_signature(launch)),
                 repr(_closure_constants(func)), repr(sorted(_jit_options(launch.kernel).items())), arch,
                 repr(sorted(_versions().items())), "v3"):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def cache_dir() -> Path:
    """Where compile results are kept: $GPUKERNELS_CACHE, else $XDG_CACHE_HOME/gpukernels, else ~/.cache."""
    root = os.environ.get("GPUKERNELS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gpukernels")
    return Path(root) / "resources"


def _cache_get(key: str) -> dict | None:
    path = cache_dir() / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cache_put(key: str, value: dict) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(value))
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass  # a read-only home only costs recompiles


# ----------------------------------------------------------------------------------------------------------
# Compiling (needs the real numba.cuda: in this process on a GPU machine, else in a child process)
# ----------------------------------------------------------------------------------------------------------


class ToolchainMissing(RuntimeError):
    """numba-cuda's compiler is not on this machine (a Mac, or an install without the cu12/cu13 extra). The
    message is one line: what is missing and what to do."""


def require_toolchain(what: str = "gpukernels resources") -> None:
    """Raise ToolchainMissing, naming ``what`` needs the compiler, unless numba-cuda can compile here."""
    from ._device import TOOLCHAIN_FIX, cuda_toolchain_missing

    missing = cuda_toolchain_missing()
    if missing:
        raise ToolchainMissing(f"{what} needs the CUDA compiler, which is not available on this machine: {missing}; "
                               f"{TOOLCHAIN_FIX}")


def _real_numba_cuda() -> bool:
    from numba import cuda

    return getattr(cuda, "compile_ptx", None) is not None  # None in the simulator


def _assemble(ptx: str, arch: str) -> str:
    """nvJitLink ``-verbose``: assemble PTX for ``arch`` and return the info log."""
    from cuda.bindings import nvjitlink

    options = [f"-arch={arch}", "-verbose"]
    handle = nvjitlink.create(len(options), options)  # the count must equal len(options) or it crashes
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, ptx.encode(), len(ptx), "kernel.ptx")
        try:
            nvjitlink.complete(handle)
        except Exception as err:
            size = nvjitlink.get_error_log_size(handle)
            buf = bytearray(size)
            if size:
                nvjitlink.get_error_log(handle, buf)
            raise RuntimeError(f"nvJitLink failed for {arch}: {buf.decode(errors='replace')}") from err
        size = nvjitlink.get_info_log_size(handle)
        buf = bytearray(size)
        if size:
            nvjitlink.get_info_log(handle, buf)
        return buf.decode(errors="replace").replace("\0", "")
    finally:
        nvjitlink.destroy(handle)


def link_lto(kernel, sig, arch: str = "sm_90a", fastmath: bool = False) -> str:
    """nvJitLink ``-verbose -lto``'s report on ``kernel`` compiled for ``sig``: how a GPU builds it (numba-cuda's
    default, lto=True: NVVM's LTO-IR linked as one whole program). PTX assembled alone (`_assemble`) is compiled for
    separate linking, where ptxas ignores ``setmaxnreg`` (C7504), so the warp-specialized kernels are checked this
    way. A link that fails raises RuntimeError with nvJitLink's error log."""
    from cuda.bindings import nvjitlink
    from numba import cuda

    cc = (int(arch[3]), int(arch[4])) + (("a",) if arch.endswith("a") else ())
    ltoir, _ = cuda.compile(kernel.py_func, sig, cc=cc, output="ltoir", abi="numba", device=False,
                            launch_bounds=kernel.targetoptions.get("launch_bounds"), fastmath=fastmath)
    options = [f"-arch={arch}", "-verbose", "-lto"]
    handle = nvjitlink.create(len(options), options)  # the count must equal len(options) or it crashes
    try:
        nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, ltoir, len(ltoir), "kernel.ltoir")
        try:
            nvjitlink.complete(handle)
        except Exception as err:
            buf = bytearray(nvjitlink.get_error_log_size(handle))
            if buf:
                nvjitlink.get_error_log(handle, buf)
            raise RuntimeError(f"nvJitLink -lto failed for {arch}: {buf.decode(errors='replace')}") from err
        buf = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, buf)
        return buf.decode(errors="replace").replace("\0", "")
    finally:
        nvjitlink.destroy(handle)


def compile_launch(launch, arch: str = DEFAULT_ARCH) -> dict:
    """Compile one launch's kernel for ``arch``; needs the real numba.cuda. Returns {log, ptx_lines}."""
    from numba import cuda

    a = get_arch(arch)
    target = getattr(launch.kernel, "target", None)  # "sm_90a": Hopper's architecture-specific instructions (wgmma)
    if target and target != a.name + "a":
        raise ArchUnsupported(f"{kernel_name(launch.kernel)} uses {target} instructions; it cannot run on {a.name}")
    cc, name = (a.cc + ("a",), a.name + "a") if target else (a.cc, a.name)
    ptx, _ = cuda.compile_ptx(launch.kernel.py_func, _signature(launch), cc=cc, **_jit_options(launch.kernel))
    return {"log": _assemble(ptx, name), "ptx_lines": ptx.count("\n")}


class ArchUnsupported(ValueError):
    """A kernel built from instructions the architecture does not have."""


def _compile_requests(requests: list[dict]) -> list[dict]:
    """Compile each request {lesson, version, shape, index, arch} in this process (real numba.cuda)."""
    out = []
    for req in requests:
        launch = launches_for(req["lesson"], req["version"], tuple(req["shape"]))[req["index"]]
        out.append(compile_launch(launch, req["arch"]))
    return out


# A child process with the real compiler (numba.cuda imported before gpukernels selects the simulator):
# gpukernels._modes runs it; the name stays for code that prepends it itself.
REAL_CUDA_PREAMBLE = COMPILE_PREAMBLE

_WORKER = r"""
from gpukernels.resources import _compile_requests
json.dump(_compile_requests(json.load(sys.stdin)), sys.stdout)
"""


def run_with_real_cuda(code: str, *args: str, stdin: str = "") -> str:
    """Run ``code`` (after the compile preamble) in a child Python whose numba.cuda is the real compiler, with
    this checkout's gpukernels importable; return its stdout. No GPU is needed to compile, but numba-cuda's
    toolchain is (ToolchainMissing otherwise)."""
    require_toolchain("compiling for a GPU")
    proc = run_in_mode("compile", code, args=args, stdin=stdin, cwd=str(ROOT))
    if proc.returncode != 0:
        raise RuntimeError(f"the compile process failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def _compile_in_child(requests: list[dict]) -> list[dict]:
    return json.loads(run_with_real_cuda(_WORKER, stdin=json.dumps(requests)))


#: Compile in at most this many child processes at once (GPUKERNELS_COMPILE_JOBS; default: the CPUs, up to 8).
#: A compile runs on one core: 1-18 s a kernel (the heaviest, async_copy's, on this toolkit's 2-core CI machine),
#: about two minutes for every matmul kernel one after another (it was 13.5 minutes while the lessons' device
#: functions were inlined by Numba rather than by NVVM: the ``forceinline`` note in gpukernels/_modes.py).
MAX_COMPILE_JOBS = 8


def compile_jobs(n: int) -> int:
    """Child processes for ``n`` uncached compiles: one per CPU this process may use, at most MAX_COMPILE_JOBS."""
    env = os.environ.get("GPUKERNELS_COMPILE_JOBS", "").strip()
    if env.isdigit() and int(env) > 0:
        jobs = int(env)
    else:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        jobs = min(cpus, MAX_COMPILE_JOBS)
    return max(1, min(jobs, n))


def compile_requests(requests: list[dict]) -> list[dict]:
    """Compile in this process when numba.cuda is the real target and there is one core to use, else in child
    processes, several at once (`compile_jobs`), each given every jobs-th request. Raises ToolchainMissing where
    numba-cuda's compiler is not installed (cached results need no compiler)."""
    if not requests:
        return []
    require_toolchain()
    jobs = compile_jobs(len(requests))
    if jobs == 1:
        return _compile_requests(requests) if _real_numba_cuda() else _compile_in_child(requests)
    from concurrent.futures import ThreadPoolExecutor

    chunks = [requests[i::jobs] for i in range(jobs)]  # interleaved: the slow unrolled steps are spread out
    with ThreadPoolExecutor(jobs) as pool:  # threads that each wait on one child process
        results = list(pool.map(_compile_in_child, chunks))
    out = [None] * len(requests)
    for i, chunk_results in enumerate(results):
        out[i::jobs] = chunk_results
    return out


# ----------------------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------------------


@dataclass
class ResourceRow:
    """One kernel launch of one version: its configuration, its resources and its occupancy."""

    lesson: str
    version: str
    kernel: str
    index: int  # position in the version's launch list
    grid: tuple
    block: tuple
    dynamic_shared: int
    arch: str
    shape: tuple
    resources: KernelResources
    occupancy: Occupancy
    log: str = field(default="", repr=False)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def waves(self) -> float:
        """Grid blocks / (resident blocks per SM x SMs): below 1, part of the GPU idles."""
        per_wave = self.occupancy.blocks_per_sm * get_arch(self.arch).sms
        return self.blocks / per_wave if per_wave else math.inf

    def to_dict(self) -> dict:
        occ = self.occupancy
        return {
            "lesson": self.lesson, "version": self.version, "kernel": self.kernel, "index": self.index,
            "arch": self.arch, "shape": list(self.shape), "grid": list(self.grid), "block": list(self.block),
            "threads_per_block": self.threads_per_block, "dynamic_shared_bytes": self.dynamic_shared,
            **asdict(self.resources),
            "blocks_per_sm": occ.blocks_per_sm, "warps_per_sm": occ.warps_per_sm,
            "max_warps_per_sm": occ.max_warps_per_sm, "occupancy": round(occ.occupancy, 4),
            "limits": occ.limits, "limited_by": list(occ.binding), "waves": round(self.waves, 3),
        }


def report(lessons=None, arch: str = DEFAULT_ARCH, shape_key: str = "demo_gpu",
           versions: dict[str, list[str]] | None = None, use_cache: bool = True,
           what: str = "gpukernels resources") -> list[ResourceRow]:
    """Compile every version of ``lessons`` (default: all) for ``arch``; one row per kernel launch.

    The launch configuration is the one the launcher makes for the lesson's ``SHAPES[shape_key]``.
    ``versions`` optionally restricts a lesson to some versions, e.g. ``{"matmul": ["tiled"]}``. Raises
    ToolchainMissing, naming ``what`` needs the compiler, when something must be compiled and cannot be.
    """
    import gpukernels

    a = get_arch(arch)
    lessons = list(gpukernels.LESSONS) if lessons is None else list(lessons)
    pending: list[tuple[dict, Any, str]] = []
    rows: list[tuple[dict, Any, str]] = []
    for lesson in lessons:
        mod = _lesson(lesson)
        shape = lesson_shape(lesson, shape_key)
        plans = plans_for(lesson, shape)
        names = (versions or {}).get(lesson) or list(mod.VERSIONS)
        for vname in names:
            for i, launch in enumerate(plans[vname]):
                target = getattr(launch.kernel, "target", None)
                if target and target != a.name + "a":  # e.g. wgmma (sm_90a) in a report for sm_80: no such kernel
                    continue
                req = {"lesson": lesson, "version": vname, "shape": list(shape), "index": i, "arch": a.name}
                key = cache_key(launch, a.name)
                rows.append((req, launch, key))
                if not (use_cache and _cache_get(key)):
                    pending.append((req, launch, key))
    # Compile each distinct kernel once (a version's launches may repeat a kernel).
    unique = {}
    for req, _, key in pending:
        unique.setdefault(key, req)
    if unique:
        require_toolchain(what)
    compiled = compile_requests(list(unique.values())) if unique else []
    for key, result in zip(unique, compiled):
        _cache_put(key, result)
        unique[key] = result
    out = []
    for req, launch, key in rows:
        result = unique.get(key) if isinstance(unique.get(key), dict) and "log" in unique[key] else None
        result = result or _cache_get(key)
        res = parse_log(result["log"], a.name)
        smem = res.shared_bytes + launch.shared_bytes
        # past 48 KB of dynamic shared memory a launch opts in (gpukernels._launch.opt_in_shared does)
        occ = occupancy(a, launch.threads_per_block, res.registers, smem, res.barriers,
                        optin=launch.shared_bytes > 48 * 1024)
        out.append(ResourceRow(lesson=req["lesson"], version=req["version"], kernel=kernel_name(launch.kernel),
                               index=req["index"], grid=tuple(launch.grid), block=tuple(launch.block),
                               dynamic_shared=launch.shared_bytes, arch=a.name, shape=tuple(req["shape"]),
                               resources=res, occupancy=occ, log=result["log"]))
    return out


def _pct(x: float) -> str:
    v = 100 * x
    return f"{v:.0f}%" if abs(v - round(v)) < 0.05 else f"{v:.1f}%"


def _fmt_bytes(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB"


def table(rows: list[ResourceRow]):
    """The rows as a table (``gpukernels._tables.Table``): printed by ``gpukernels resources``, shown by the
    notebooks' ``resource_table``."""
    from ._tables import Table

    a = get_arch(rows[0].arch)
    body = []
    for r in rows:
        res, occ = r.resources, r.occupancy
        # Local memory per thread: the linker's lmem, or the stack frame ptxas reports -- which is where spilled
        # registers go: a kernel that spills 8 bytes has an 8-byte frame and "0 bytes lmem" in the linker's line.
        local = max(res.local_bytes, res.stack_bytes)
        lmem = _fmt_bytes(local) + (f" ({_fmt_bytes(res.spill_stores)} spilled)" if res.spill_stores else "")
        body.append([r.lesson, r.version, r.kernel, "x".join(map(str, r.block)), str(res.registers),
                     _fmt_bytes(res.shared_bytes + r.dynamic_shared), lmem, str(res.barriers),
                     str(occ.blocks_per_sm), f"{occ.warps_per_sm}/{occ.max_warps_per_sm}", _pct(occ.occupancy),
                     ", ".join(occ.binding)])
    return Table(f"Resources and occupancy on {a.name} ({a.gpu}: {a.max_warps_per_sm} warps, {a.regs_per_sm} "
                 f"registers, {a.smem_per_sm // 1024} KB shared memory per SM)",
                 ["lesson", "version", "kernel", "block", "regs", "smem", "lmem", "bar.", "blocks/SM", "warps/SM",
                  "occupancy", "limited by"], body,
                 "regs: registers per thread; smem: static + dynamic shared memory per block; lmem: local memory "
                 "per thread (its stack frame: registers spilled there, local arrays); bar.: named barriers.",
                 right=("block", "regs", "smem", "lmem", "bar.", "blocks/SM", "warps/SM", "occupancy"))


def print_table(rows: list[ResourceRow], console=None) -> None:
    from rich.console import Console

    from ._terminal import fit

    console = console or Console()  # the terminal's width (COLUMNS; 80 when piped): the table is drawn to fit it
    if not rows:
        return
    console.print(fit(table(rows), console.width, prose=["kernel", "limited by"], drop_constant=["lesson"],
                      more="a wider terminal (COLUMNS=200) shows them whole, or --json FILE"))
    console.print(f"Shapes: {', '.join(sorted({f'{r.lesson} {r.shape}' for r in rows}))}. Compiled with "
                  f"numba.cuda.compile_ptx + nvJitLink; no GPU was used.")


def resources_main(argv: list[str]) -> int:
    import gpukernels

    from .cli import ArgumentParser, output_file

    parser = ArgumentParser(prog="gpukernels resources",
                            description="registers, shared memory, spills and occupancy of every version, compiled "
                                        "for an architecture (no GPU needed)")
    parser.add_argument("lessons", nargs="*", metavar="LESSON", help=f"any of {', '.join(gpukernels.LESSONS)} "
                                                                      "(default: all)")
    parser.add_argument("--arch", default=DEFAULT_ARCH, help=f"one of {', '.join(ARCHS)} (default {DEFAULT_ARCH})")
    parser.add_argument("--shape", default="demo_gpu", dest="shape_key",
                        help="which SHAPES entry sets the launch configuration (default demo_gpu)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON ('-' for stdout)")
    parser.add_argument("--no-cache", action="store_true", help="recompile even if a cached result exists")
    args = parser.parse_args(argv)
    args.lessons = list(dict.fromkeys(args.lessons))  # a lesson named twice is reported once (it printed every row twice)
    for name in args.lessons:
        if name not in gpukernels.LESSONS:
            parser.error(f"unknown lesson {name!r}; choose from {', '.join(gpukernels.LESSONS)}")
    try:
        arch = get_arch(args.arch)
    except ValueError as err:
        parser.error(f"--arch: {err}")
    # a SHAPES entry that names one shape or a list of them, in every lesson asked for (not a suite's dict)
    keys = [k for k in next(iter(gpukernels.LESSONS.values())).SHAPES
            if all(isinstance(_lesson(name).SHAPES.get(k), (tuple, list))
                   for name in (args.lessons or gpukernels.LESSONS))]
    if args.shape_key not in keys:
        parser.error(f"--shape {args.shape_key!r}: expected a SHAPES entry holding a shape or a list of shapes; "
                     f"choose from {', '.join(keys)}")
    if args.json and args.json != "-":  # before the compiles: a typo must not cost them, nor create folders
        output_file(args.json, "--json")
    try:
        rows = report(args.lessons or None, arch.name, args.shape_key, use_cache=not args.no_cache)
    except ToolchainMissing as err:
        print(err, file=sys.stderr)  # one line: it names the command, what is missing and what to do
        return 1
    data = {"arch": asdict(arch), "rows": [r.to_dict() for r in rows]}
    if args.json == "-":
        print(json.dumps(data, indent=2))
        return 0
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0
