"""Admission: what of a submission may run, decided from its source before any of it runs.

A kernel file needs very little at module level: imports of ``numba`` / ``numba.cuda`` / ``math`` / ``numpy``,
a few constants (``TILE = 16``, ``PADDED = TILE + 1``), and ``@cuda.jit`` functions. So the grader parses the
file (``ast``) and admits only that; anything else at module level -- a call, another import, a loop, file or
process access, ``__import__``, ``getattr``, dunder attributes -- is refused with the line and the rule, and the
exercise scores 0 without a line of the submission having run. An ``if __name__ == "__main__":`` block (a
student's own test code) is dropped, never run.

Inside kernels the real compiler is the judge (the ``compiles`` gate runs before the simulator does), with
one exception it cannot catch: a value that differs between the simulator and the GPU. Numba folds module
attributes such as ``numba.config.ENABLE_CUDASIM`` into constants, so ``if numba.config.ENABLE_CUDASIM:`` compiles
(the branch is pruned) and the simulator takes it. Kernels may therefore name only their own variables, the
module's admitted constants and functions, a few pure builtins, ``math``, ``numpy``, numba's types and
``cuda``'s device-side API: nothing whose value depends on the mode.

The grader runs the *admitted tree* (``Admitted.code()``), not the file: what it checked is what runs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

ALLOWED_IMPORTS = ("numba", "numba.cuda", "math", "numpy", "__future__")

# Besides those, names a kernel file may import from gpukernels itself: the tensor-core instructions Numba lacks
# (inline PTX on a GPU, warp collectives in the simulator) and cp.async with its groups (exercise 12), pure device
# functions; nothing else of the package.
ALLOWED_FROM = {"gpukernels._mma": frozenset({"mma_f16", "pack_half2"}),
                "gpukernels._intrinsics": frozenset({"copy_async", "async_commit", "async_wait"})}

# numba's scalar types and the few helpers a kernel file uses at module level or in kernels.
NUMBA_NAMES = frozenset("""
    cuda types void boolean b1 bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 intp uintp i1 i2 i4 i8
    u1 u2 u4 u8 float16 float32 float64 f2 f4 f8 complex64 complex128 c8 c16 literal_unroll
""".split())

NUMPY_DTYPES = frozenset("""
    float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 intp uintp bool_ complex64
    complex128 inf nan pi e newaxis
""".split())

# cuda's device-side API (numba-cuda's stubs and intrinsics): what a kernel may call or read on ``cuda``.
CUDA_DEVICE_API = frozenset("""
    grid gridsize threadIdx blockIdx blockDim gridDim laneid warpsize shared local const syncthreads
    syncthreads_count syncthreads_and syncthreads_or syncwarp atomic shfl_sync shfl_up_sync shfl_down_sync
    shfl_xor_sync all_sync any_sync eq_sync ballot_sync match_any_sync match_all_sync activemask lanemask_lt
    threadfence threadfence_block threadfence_system fma cbrt brev clz ffs popc selp nanosleep fp16 cg
    libdevice float16 jit
""".split())

# Pure builtins that Numba compiles in kernels; nothing that reaches objects, modules or files.
KERNEL_BUILTINS = frozenset("""
    range len min max abs int float bool complex round print divmod pow zip enumerate slice tuple
    True False None ArithmeticError AssertionError Exception IndexError RuntimeError ValueError
    ZeroDivisionError OverflowError
""".split())

JIT_KEYWORDS = frozenset("device fastmath inline forceinline lineinfo debug opt max_registers".split())

MAX_CONSTANT_ITEMS = 256  # a tuple of tile sizes is fine; a table of precomputed answers is not

RULE = ("a kernel file may hold only imports of numba, numba.cuda, math and numpy (and of the tensor-core "
        "instructions mma_f16 and pack_half2 from gpukernels._mma, and cp.async's copy_async, async_commit and "
        "async_wait from gpukernels._intrinsics), constants (literals or "
        "arithmetic on earlier constants, e.g. TILE = 16), @cuda.jit functions, docstrings and comments "
        "(see exercises/README.md, 'What a kernel file may contain')")


class AdmissionError(ValueError):
    """A submission refused before it ran: ``line`` and the ``reason`` (already a full sentence)."""

    def __init__(self, filename: str, line: int, reason: str):
        self.filename, self.line, self.reason = filename, line, reason
        super().__init__(f"line {line}: {reason}")


@dataclass
class Admitted:
    """A submission that passed admission: its tree (with any ``__main__`` block removed) and what it defines."""

    filename: str
    source: str
    tree: ast.Module
    kernels: dict = field(default_factory=dict)  # name -> line, @cuda.jit functions (device ones included)
    device_functions: set = field(default_factory=set)
    constants: dict = field(default_factory=dict)  # name -> line
    ignored: list = field(default_factory=list)  # lines of dropped __main__ blocks

    def code(self):
        return compile(self.tree, self.filename, "exec", dont_inherit=True)


def admit(source: str, filename: str = "kernel.py") -> Admitted:
    """Parse ``source`` and return what may run, or raise :class:`AdmissionError` (``SyntaxError`` for a file
    that does not parse)."""
    tree = ast.parse(source, filename=filename)
    checker = _Module(filename)
    checker._all_functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    checker._all_constants = {name for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                              for name in _target_names(t) if name}
    body = []
    for node in tree.body:
        if checker.statement(node):
            body.append(node)
    tree.body = body
    ast.fix_missing_locations(tree)
    return Admitted(filename, source, tree, checker.functions, checker.device, checker.constants, checker.ignored)


def refusal_message(err: AdmissionError, basename: str) -> str:
    return (f"not allowed in {basename}, line {err.line}: {err.reason}. Nothing of the file was run; "
            f"{RULE}.")


# ----------------------------------------------------------------------------------------------------------
# Module level
# ----------------------------------------------------------------------------------------------------------


class _Module:
    def __init__(self, filename: str):
        self.filename = filename
        self.modules: dict[str, str] = {}  # local name -> module ("numba", "numba.cuda", "math", "numpy")
        self.numba_names: set[str] = set()  # names imported from numba (types, cuda, literal_unroll)
        self.numpy_names: set[str] = set()
        self.intrinsics: set[str] = set()  # from ALLOWED_FROM: callable in kernels, not in module constants
        self.constants: dict[str, int] = {}
        self.functions: dict[str, int] = {}
        self.device: set[str] = set()
        self.ignored: list[int] = []
        self.first = True

    def refuse(self, node, reason: str):
        raise AdmissionError(self.filename, getattr(node, "lineno", 0), reason)

    def defined(self) -> set:
        return (set(self.modules) | self.numba_names | self.numpy_names | self.intrinsics | set(self.constants)
                | set(self.functions))

    def statement(self, node) -> bool:
        """Check one module-level statement; False when it is dropped (a ``__main__`` block)."""
        first, self.first = self.first, False
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return True  # a docstring (or a bare string used as a comment)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    self.refuse(node, f"`import {alias.name}`: only numba, numba.cuda, math and numpy may be "
                                      "imported")
                local = alias.asname or alias.name.split(".")[0]
                self._name(node, local)
                self.modules[local] = alias.name if alias.asname else alias.name.split(".")[0]
            return True
        if isinstance(node, ast.ImportFrom):
            return self._import_from(node)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            self._constant(node)
            return True
        if isinstance(node, ast.FunctionDef):
            self._function(node)
            return True
        if isinstance(node, ast.If) and _is_main_guard(node.test):
            self.ignored.append(node.lineno)
            return False
        what = {ast.ClassDef: "a class", ast.For: "a loop", ast.While: "a loop", ast.If: "an `if`",
                ast.Try: "a try block", ast.With: "a `with` block", ast.AsyncFunctionDef: "an async function",
                ast.Expr: "an expression statement (a call?)", ast.AugAssign: "an augmented assignment",
                ast.Delete: "`del`", ast.Global: "`global`", ast.Assert: "an assert", ast.Raise: "a raise"}
        kind = next((text for cls, text in what.items() if isinstance(node, cls)), type(node).__name__)
        self.refuse(node, f"{kind} at module level")

    def _name(self, node, name: str) -> None:
        if name.startswith("__") or name in KERNEL_BUILTINS - {"True", "False", "None"}:
            self.refuse(node, f"the name {name!r} may not be (re)defined")

    def _import_from(self, node: ast.ImportFrom) -> bool:
        mod = node.module or ""
        if not node.level and mod in ALLOWED_FROM:
            for alias in node.names:
                if alias.name not in ALLOWED_FROM[mod]:
                    self.refuse(node, f"`from {mod} import {alias.name}`: only "
                                      f"{', '.join(sorted(ALLOWED_FROM[mod]))} may be imported from {mod}")
                self._name(node, alias.asname or alias.name)
                self.intrinsics.add(alias.asname or alias.name)
            return True
        if node.level or mod not in ALLOWED_IMPORTS:
            self.refuse(node, f"`from {'.' * node.level}{mod} import ...`: only numba, numba.cuda, math and "
                              "numpy may be imported")
        for alias in node.names:
            if alias.name == "*":
                self.refuse(node, f"`from {mod} import *`: name what you import")
            local = alias.asname or alias.name
            self._name(node, local)
            if mod == "__future__":
                continue
            if mod == "math":
                if alias.name.startswith("_"):
                    self.refuse(node, f"`{alias.name}` is private to math")
                self.numba_names.add(local)  # pure functions and constants, the same in every mode
            elif mod == "numpy":
                if alias.name not in NUMPY_DTYPES:
                    self.refuse(node, f"`from numpy import {alias.name}`: only dtypes (float32, int32, ...) and "
                                      "constants (inf, nan, pi) may be imported from numpy")
                self.numpy_names.add(local)
            elif mod == "numba.cuda":
                if alias.name not in CUDA_DEVICE_API:
                    self.refuse(node, f"`from numba.cuda import {alias.name}`: not part of the device-side API")
                self.numba_names.add(local)
                if alias.name == "jit":
                    self.modules.setdefault("@jit", local)
            else:  # numba
                if alias.name not in NUMBA_NAMES:
                    self.refuse(node, f"`from numba import {alias.name}`: only cuda and numba's types "
                                      "(float32, int32, ...) may be imported from numba")
                if alias.name == "cuda":
                    self.modules[local] = "numba.cuda"
                else:
                    self.numba_names.add(local)
        return True

    # -- constants ---------------------------------------------------------------------------------------------
    def _constant(self, node) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is None:
            self.refuse(node, "an annotation without a value")
        for target in targets:
            for name in _target_names(target):
                if name is None:
                    self.refuse(node, "only plain names may be assigned at module level (`TILE = 16`)")
                self._name(node, name)
                if name in self.modules or name in self.functions:
                    self.refuse(node, f"{name!r} is already an imported module or a function")
        self._constant_expr(node.value, node)
        if _count_items(node.value) > MAX_CONSTANT_ITEMS:
            self.refuse(node, f"a constant of more than {MAX_CONSTANT_ITEMS} values: module constants are "
                              "sizes and flags, not data (the kernel reads its inputs from its arguments)")
        for target in targets:
            for name in _target_names(target):
                self.constants[name] = node.lineno

    def _constant_expr(self, expr, stmt) -> None:
        """Literals, earlier constants, arithmetic, tuples, dtype references and pure math on them."""
        if isinstance(expr, ast.Constant):
            if not isinstance(expr.value, (int, float, complex, str, bool, type(None))):
                self.refuse(stmt, f"a constant of type {type(expr.value).__name__}")
            return
        if isinstance(expr, ast.Name):
            if expr.id not in self.constants and expr.id not in self.numba_names | self.numpy_names:
                self.refuse(stmt, f"{expr.id!r} is not an earlier constant or an imported type")
            return
        if isinstance(expr, ast.Tuple):
            for elt in expr.elts:
                self._constant_expr(elt, stmt)
            return
        if isinstance(expr, ast.BinOp):
            self._constant_expr(expr.left, stmt)
            self._constant_expr(expr.right, stmt)
            return
        if isinstance(expr, ast.UnaryOp):
            self._constant_expr(expr.operand, stmt)
            return
        if isinstance(expr, ast.Subscript) and not isinstance(expr.slice, ast.Slice):
            self._constant_expr(expr.value, stmt)
            self._constant_expr(expr.slice, stmt)
            return
        if isinstance(expr, ast.Attribute):
            self._module_attribute(expr, stmt, in_kernel=False)
            return
        if isinstance(expr, ast.Call) and not expr.keywords and self._is_type_or_math(expr.func):
            for arg in expr.args:
                self._constant_expr(arg, stmt)
            return
        kind = "a call" if isinstance(expr, ast.Call) else type(expr).__name__
        self.refuse(stmt, f"a module constant must be literals or arithmetic on earlier constants; this one has "
                          f"{kind}")

    def _is_type_or_math(self, func) -> bool:
        """``float32(...)``, ``np.float32(...)``, ``math.sqrt(...)``: pure conversions and math on constants."""
        if isinstance(func, ast.Name):
            return func.id in self.numba_names | self.numpy_names
        chain = _chain(func)
        if chain is None or len(chain) != 2:
            return False
        root = self.modules.get(chain[0])
        return (root == "math" and not chain[1].startswith("_")) or (root == "numpy" and chain[1] in NUMPY_DTYPES) \
            or (root == "numba" and chain[1] in NUMBA_NAMES)

    def _module_attribute(self, expr, stmt, in_kernel: bool) -> None:
        """``np.float32``, ``math.pi``, ``cuda.threadIdx.x``, ``numba.float32``: checked against each module's
        allowed names. An attribute of anything else (an array's ``.shape``) is checked by the kernel walker."""
        chain = _chain(expr)
        if chain is None:
            self.refuse(stmt, "an attribute of a computed value at module level")
        root = self.modules.get(chain[0])
        if root is None:
            if chain[0] in self.constants or chain[0] in self.numba_names | self.numpy_names:
                if any(part.startswith("_") for part in chain[1:]):
                    self.refuse(stmt, f"`{'.'.join(chain)}`: private and dunder attributes are not allowed")
                return
            self.refuse(stmt, f"{chain[0]!r} is not an imported module or an earlier constant")
        _check_module_chain(self, stmt, root, chain, in_kernel)

    # -- functions ---------------------------------------------------------------------------------------------
    def _function(self, node: ast.FunctionDef) -> None:
        self._name(node, node.name)
        if node.name in self.constants or node.name in self.modules:
            self.refuse(node, f"{node.name!r} is already a constant or an imported module")
        if len(node.decorator_list) != 1:
            self.refuse(node, f"`def {node.name}` must have exactly one decorator, @cuda.jit (plain Python "
                              "functions do not run on a GPU: make it @cuda.jit(device=True))")
        device = self._jit_decorator(node.decorator_list[0], node)
        self.functions[node.name] = node.lineno
        if device:
            self.device.add(node.name)
        _Kernel(self, node).check()

    def _jit_decorator(self, dec, fn) -> bool:
        """True for ``@cuda.jit(device=True)``; refuses anything but ``cuda.jit`` forms."""
        call = dec if isinstance(dec, ast.Call) else None
        target = call.func if call else dec
        chain = _chain(target)
        is_jit = chain is not None and (
            (len(chain) == 2 and self.modules.get(chain[0]) == "numba.cuda" and chain[1] == "jit")
            or (len(chain) == 3 and self.modules.get(chain[0]) == "numba" and chain[1:] == ["cuda", "jit"])
            or (len(chain) == 1 and self.modules.get("@jit") == chain[0]))
        if not is_jit:
            self.refuse(dec, f"`def {fn.name}` is decorated with something other than @cuda.jit")
        device = False
        if call:
            for arg in call.args:  # a signature: "void(float32[:])" or void(float32[:], ...)
                self._signature(arg, dec)
            for kw in call.keywords:
                if kw.arg not in JIT_KEYWORDS:
                    self.refuse(dec, f"@cuda.jit({kw.arg}=...) is not allowed in a graded kernel (allowed: "
                                     f"{', '.join(sorted(JIT_KEYWORDS))})")
                if not isinstance(kw.value, ast.Constant):
                    self.refuse(dec, f"@cuda.jit({kw.arg}=...) takes a literal value")
                if kw.arg == "device":
                    device = bool(kw.value.value)
        return device

    def _signature(self, expr, stmt) -> None:
        """A jit signature: a string, or numba types called, subscripted (``float32[:, ::1]``) and in tuples."""
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id not in self.numba_names | set(self.modules):
                self.refuse(stmt, f"{node.id!r} in a jit signature is not a numba type")
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                self.refuse(stmt, f"`.{node.attr}`: private and dunder attributes are not allowed")
            if not isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Slice, ast.Tuple,
                                     ast.Constant, ast.Load, ast.keyword)):
                self.refuse(stmt, "a jit signature may only name numba types")


def _check_module_chain(mod: _Module, stmt, root: str, chain: list, in_kernel: bool) -> None:
    dotted = ".".join(chain)
    if any(part.startswith("_") for part in chain[1:]):
        mod.refuse(stmt, f"`{dotted}`: private and dunder attributes are not allowed")
    rest = chain[1:]
    if root == "numba" and rest[:1] == ["cuda"]:
        root, rest = "numba.cuda", rest[1:]
    if not rest:
        return  # the module itself, passed on (e.g. ``cuda`` as a value): nothing to read from it
    if root == "math":
        return
    if root == "numpy":
        if not in_kernel and rest[0] not in NUMPY_DTYPES:
            mod.refuse(stmt, f"`{dotted}`: at module level only numpy's dtypes and constants may be used")
        if rest[0] in ("lib", "ctypeslib", "testing", "f2py", "distutils", "core", "config", "show_config"):
            mod.refuse(stmt, f"`{dotted}` is not something a kernel computes with")
        return
    if root == "numba.cuda":
        if rest[0] not in CUDA_DEVICE_API:
            mod.refuse(stmt, f"`{dotted}` is not part of cuda's device-side API: a kernel may use cuda.grid, "
                             "cuda.threadIdx, cuda.shared.array, cuda.syncthreads, cuda.atomic, shuffles, ... "
                             "(and nothing that tells the simulator from a GPU)")
        return
    if root == "numba":
        if rest[0] not in NUMBA_NAMES:
            mod.refuse(stmt, f"`{dotted}`: only numba's types may be used (numba.config and the like would let "
                             "a kernel behave differently in the simulator and on a GPU)")
        return
    mod.refuse(stmt, f"`{dotted}` is not allowed")  # pragma: no cover - roots are the allowed modules


# ----------------------------------------------------------------------------------------------------------
# Inside a @cuda.jit function
# ----------------------------------------------------------------------------------------------------------

_REFUSED_IN_KERNEL = {ast.Import: "an import", ast.ImportFrom: "an import", ast.ClassDef: "a class",
                      ast.Global: "`global`", ast.Nonlocal: "`nonlocal`", ast.With: "a `with` block",
                      ast.AsyncFunctionDef: "an async function", ast.Await: "`await`", ast.Lambda: "a lambda",
                      ast.Yield: "`yield`", ast.YieldFrom: "`yield`", ast.NamedExpr: "`:=`",
                      ast.Starred: "`*` unpacking", ast.DictComp: "a dict", ast.Dict: "a dict", ast.Set: "a set",
                      ast.SetComp: "a set", ast.GeneratorExp: "a generator", ast.JoinedStr: "an f-string"}


class _Kernel:
    def __init__(self, mod: _Module, fn: ast.FunctionDef, outer: frozenset = frozenset()):
        self.mod, self.fn = mod, fn
        self.local = set(outer) | _bound_names(fn)

    def check(self) -> None:
        for default in self.fn.args.defaults + self.fn.args.kw_defaults:
            if default is not None:
                self.mod._constant_expr(default, default)
        for stmt in self.fn.body:
            self._walk(stmt)

    def _walk(self, node) -> None:
        for cls, what in _REFUSED_IN_KERNEL.items():
            if isinstance(node, cls):
                self.mod.refuse(node, f"{what} inside `{self.fn.name}`")
        if isinstance(node, ast.FunctionDef):  # an inner function: Numba inlines simple closures
            if node.decorator_list:
                self.mod.refuse(node, f"a decorated function inside `{self.fn.name}`")
            _Kernel(self.mod, node, frozenset(self.local)).check()
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self._name(node)
            return
        if isinstance(node, ast.Attribute):
            self._attribute(node)
            return
        for child in ast.iter_child_nodes(node):
            self._walk(child)

    def _name(self, node: ast.Name) -> None:
        name = node.id
        if name in self.local or name in KERNEL_BUILTINS:
            return
        if name in self.mod.defined() or name in _later_functions(self.mod, name):
            return
        self.mod.refuse(node, f"`{name}` inside `{self.fn.name}` is neither a variable of the kernel, a module "
                              "constant, an @cuda.jit function nor an allowed builtin")

    def _attribute(self, node: ast.Attribute) -> None:
        chain = _chain(node)
        if node.attr.startswith("_"):
            self.mod.refuse(node, f"`.{node.attr}`: private and dunder attributes are not allowed")
        if chain is not None and chain[0] not in self.local and chain[0] in self.mod.modules:
            _check_module_chain(self.mod, node, self.mod.modules[chain[0]], chain, in_kernel=True)
            return
        if chain is not None and any(p.startswith("_") for p in chain[1:]):
            self.mod.refuse(node, "private and dunder attributes are not allowed")
        self._walk(node.value)  # an array's .shape, .T, .size: the compiler decides


def _later_functions(mod: _Module, name: str) -> set:
    """Kernels may call device functions defined further down the file: accept names the module defines as
    jit functions anywhere (checked when that definition is reached)."""
    later = getattr(mod, "_all_functions", set()) | getattr(mod, "_all_constants", set())
    return {name} if name in later else set()


# ----------------------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------------------


def _is_main_guard(test) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def _chain(expr) -> list | None:
    """``a.b.c`` -> ["a", "b", "c"]; None when the root is not a plain name."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return parts[::-1]


def _target_names(target):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple):
        for elt in target.elts:
            yield from _target_names(elt)
    else:
        yield None


def _count_items(expr) -> int:
    return sum(1 for node in ast.walk(expr) if isinstance(node, ast.Constant))


def _bound_names(fn: ast.FunctionDef) -> set:
    """Parameters and every name the function assigns (its locals), not descending into inner functions'
    own bodies beyond their names."""
    args = fn.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    if args.vararg:
        names.add(args.vararg.arg)
    if args.kwarg:
        names.add(args.kwarg.arg)
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef) and node is not fn:
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


__all__ = ["admit", "Admitted", "AdmissionError", "refusal_message", "RULE"]
