"""Show the code a step of a lesson consists of, and what changed from one step to the next.

    from gpukernels.source import source, diff
    source("matmul", "tiled")          # or source("matmul", 3): the registry's name or number
    diff("matmul", "tiled", "regblock_1d")

    gpukernels source matmul 8         # the same on the command line
    gpukernels diff matmul 8 9

Everything is read from the package itself (``inspect.getsource`` of the step's module, cut to the statements the
step uses), never from a copy, so what a notebook shows is the code that ran. A step's source is its launcher (the
registry's plan function) and every top-level statement of its module that the launcher or its kernels reach:
constants, the kernels, device functions and helpers, with the comments right above them. What a step imports from
an earlier step belongs to that step and is not repeated.

Steps built by a kernel factory (matmul 10-18: ``deep_k_kernel = make_interior_kernel(128, 128, bk=16)``) differ in
one call's arguments, and a text diff of two such calls hides which argument changed under renamed variables. So a
`Diff` also lists the factory arguments each new kernel changes against the closest kernel of the earlier step
(``bk: 8 -> 16``), and shows the factory's own source once: in the diff of the step that first uses it.

Both objects render highlighted in Jupyter (``_repr_html_``, pygments) and in a terminal (rich), and ``str()`` is
plain text.
"""

from __future__ import annotations

import ast
import difflib
import html
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cli import UsageError

__all__ = ["Source", "Diff", "FactoryCall", "StepError", "source", "diff", "resolve"]

ROOT = Path(__file__).resolve().parent.parent  # paths are shown relative to the repository (gpukernels/...)
# Below this share of common lines a unified diff is mostly deletions and additions (e.g. cbr's split_c is a new
# launcher over implicit_gemm's kernel): the diff then also shows the newer step's code whole.
RELATED = 0.3


class StepError(UsageError):
    """A lesson or step that does not exist; the message names the argument, what was expected and what was given
    (the CLI prints it as one line, exit status 2)."""


# ----------------------------------------------------------------------------------------------------------
# Finding a step
# ----------------------------------------------------------------------------------------------------------


def resolve(lesson: Any, step: Any, arg: str = "step"):
    """(lesson module, Version, number) for a lesson name and a step given by name or 1-based number."""
    import gpukernels

    mod = gpukernels.LESSONS.get(lesson) if isinstance(lesson, str) else None
    if mod is None:
        raise StepError(f"LESSON: expected one of {', '.join(gpukernels.LESSONS)}; got {lesson!r}")
    names = list(mod.VERSIONS)
    text = str(step).strip()
    if text.isdigit():
        number = int(text)
        if 1 <= number <= len(names):
            return mod, mod.VERSIONS[names[number - 1]], number
    elif text in mod.VERSIONS:
        return mod, mod.VERSIONS[text], names.index(text) + 1
    raise StepError(f"{arg}: {expected_step(lesson)}; got {step!r}")


def expected_step(lesson: str) -> str:
    """What names a step of ``lesson``, for messages: "expected a matmul step, 1-21 or one of naive, ...". One wording
    for every command that takes a step (source, diff, and --version of trace and demo)."""
    import gpukernels

    names = list(gpukernels.LESSONS[lesson].VERSIONS)
    article = "an" if lesson[0] in "aeiou" else "a"
    return f"expected {article} {lesson} step, 1-{len(names)} or one of {', '.join(names)}"


# ----------------------------------------------------------------------------------------------------------
# Reading a module: top-level statements, what they bind and what they use
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactoryCall:
    """A top-level ``kernel = factory(...)`` of a step's module: the factory's arguments, defaults filled in."""

    kernel: str  # the variable the kernel is bound to
    factory: str
    path: str  # where the factory is defined, and its first line
    line: int
    args: dict  # parameter -> value (a Python value when literal, else the source text of the argument)
    given: tuple  # the parameters the call states

    def changes(self, other: "FactoryCall") -> dict:
        """Parameter -> (this call's value, ``other``'s value), for the parameters that differ."""
        return {k: (self.args.get(k), other.args.get(k)) for k in self.args if self.args.get(k) != other.args.get(k)}


def _bound(stmt) -> list[str]:
    """Top-level names a statement binds (functions, classes, assignments; imports are not the step's code)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    out = []
    for t in targets:
        for node in ast.walk(t):
            if isinstance(node, ast.Name):
                out.append(node.id)
    return out


def _attached_to(stmt) -> str | None:
    """``optimized.choose = choose`` belongs to ``optimized``: the base name of an attribute assignment."""
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Attribute) for t in stmt.targets):
        base = stmt.targets[0]
        while isinstance(base, ast.Attribute):
            base = base.value
        return base.id if isinstance(base, ast.Name) else None
    return None


def _used(stmt) -> set[str]:
    """Names a statement reads. A launcher's decorator (``@version(lesson, check, ...)``) is registry plumbing,
    shared by every step, so it is not followed; its kernels are the Version's own and are added by identity."""
    nodes = [stmt]
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        nodes = list(stmt.body) + list(stmt.args.defaults) + [d for d in stmt.args.kw_defaults if d is not None]
    elif isinstance(stmt, ast.ClassDef):
        nodes = list(stmt.body)
    nodes += [d for d in getattr(stmt, "decorator_list", []) if not _is_version_decorator(d)]
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_version_decorator(node) -> bool:
    call = node.func if isinstance(node, ast.Call) else node
    return isinstance(call, ast.Name) and call.id == "version"


def _span(stmt, lines: list[str]) -> tuple[int, int]:
    """1-based first and last line of a statement, with its decorators and the comment lines right above it."""
    first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    while first > 1 and lines[first - 2].lstrip().startswith("#"):
        first -= 1
    return first, stmt.end_lineno


def _is_kernel(obj) -> bool:
    return hasattr(obj, "py_func")  # numba.cuda's dispatcher, and the simulator's FakeCUDAKernel


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return path


def _factory_call(stmt, module, text: str) -> FactoryCall | None:
    """A ``name = f(...)`` whose value is a kernel and ``f`` a plain function of the package: a kernel factory."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)):
        return None
    name, call = stmt.targets[0].id, stmt.value
    func = module.__dict__.get(call.func.id) if isinstance(call.func, ast.Name) else None
    if not (inspect.isfunction(func) and (func.__module__ or "").startswith("gpukernels")
            and _is_kernel(module.__dict__.get(name))):
        return None

    def value(node):
        try:
            return ast.literal_eval(node)
        except ValueError:
            return ast.get_source_segment(text, node)

    sig = inspect.signature(func)
    try:
        bound = sig.bind(*[value(a) for a in call.args], **{k.arg: value(k.value) for k in call.keywords if k.arg})
    except TypeError:
        return None
    given = tuple(bound.arguments)
    bound.apply_defaults()
    _, line = inspect.getsourcelines(func)
    return FactoryCall(name, func.__name__, _rel(inspect.getsourcefile(func)), line, dict(bound.arguments), given)


# ----------------------------------------------------------------------------------------------------------
# Source and Diff
# ----------------------------------------------------------------------------------------------------------


def _highlight(text: str, lexer: str) -> str:
    """HTML with inline colours (pygments' noclasses), so that it renders the same in Jupyter, in a notebook
    exported to HTML and on the course site, with no stylesheet."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    return highlight(text, get_lexer_by_name(lexer), HtmlFormatter(noclasses=True, style="friendly", nobackground=True,
                                                                   cssstyles="padding: 0.5em; margin: 0"))


def _inline(text: str) -> str:
    """A line of prose (a step's idea) as HTML: escaped, with its `code` spans as <code>, not literal backticks."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _fold(summary: str, code: str) -> str:
    """``code`` highlighted, folded under a one-line ``summary`` (HTML) that says how long it is."""
    n = len(code.splitlines())
    return (f"<details style='margin: 0.2em 0'><summary style='cursor: pointer'>{summary} ({n} lines)</summary>"
            f"{_highlight(code, 'python')}</details>")


def _box(inner: str) -> str:
    return (f'<div class="gk-source" style="border: 1px solid #ddd; border-radius: 4px; padding: 0.4em 0.8em; '
            f'margin: 0.3em 0; overflow-x: auto; background: #fafafa">{inner}</div>')


@dataclass
class Source:
    """The code of one step: ``text`` (the statements, in file order), where it lives, and its factory calls."""

    lesson: str
    step: str
    number: int
    idea: str
    path: str
    lines: list  # (first, last) line of each statement shown
    text: str
    calls: list = field(default_factory=list)  # FactoryCall of each kernel the step builds with a factory
    factories: dict = field(default_factory=dict)  # factory name -> (path, first line, its source)

    @property
    def title(self) -> str:
        return f"{self.lesson} step {self.number}, {self.step}: {self.idea}"

    def where(self) -> str:
        return f"{self.path}, lines " + ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in self.lines)

    def calls_table(self) -> list[str]:
        """One line per factory-built kernel: the arguments it states (the rest are the factory's defaults)."""
        return [f"{c.kernel} = {c.factory}({', '.join(f'{k}={c.args[k]!r}' for k in c.given)})"
                f"  -- {c.factory} in {c.path}:{c.line}" for c in self.calls]

    def __str__(self) -> str:
        return f"# {self.title}\n# {self.where()}\n\n{self.text}\n"

    def __repr__(self) -> str:  # short: a notebook stores it beside the HTML (print() gives the code)
        return f"<source of {self.title} ({len(self.text.splitlines())} lines)>"

    def _repr_html_(self) -> str:
        head = (f"<p style='margin: 0.2em 0'><b>{html.escape(self.lesson)} step {self.number}, "
                f"<code>{html.escape(self.step)}</code></b>: {_inline(self.idea)}<br>"
                f"<small>{html.escape(self.where())}</small></p>")
        return _box(head + _highlight(self.text, "python"))

    def __rich__(self):
        from rich.console import Group
        from rich.syntax import Syntax
        from rich.text import Text

        return Group(Text(self.title, style="bold"), Text(self.where(), style="dim"),
                     Syntax(self.text, "python", theme="ansi_light", background_color="default"))


@dataclass
class Diff:
    """What changed from step ``a`` to step ``b``: a unified diff of their sources, the factory arguments each new
    kernel changes, and the source of a factory that ``b`` is the first to use."""

    a: Source
    b: Source
    text: str  # the unified diff ("" when the two sources are the same)
    ratio: float  # share of common lines (difflib), 1.0 for identical sources
    arg_changes: list  # (b's FactoryCall, the closest call of a or None, {param: (old, new)})
    new_factories: dict  # factory name -> (path, line, source): factories b uses and a does not

    @property
    def title(self) -> str:
        return f"{self.a.lesson}: step {self.a.number} {self.a.step} -> step {self.b.number} {self.b.step}"

    def __repr__(self) -> str:
        return f"<diff {self.title}: {len(self.text.splitlines())} lines>"

    def whole(self) -> bool:
        """Whether to show b's code whole as well: when the two share few lines, a diff is mostly - and + and the
        new code is easier read in one piece -- unless b is a factory call set against a's (the argument list says
        it all) or a few lines that the diff shows whole anyway."""
        return (self.ratio < RELATED and len(self.b.text.splitlines()) > 20
                and not any(base is not None for _, base, _ in self.arg_changes))

    def changes_lines(self) -> list[str]:
        out = []
        for call, base, changes in self.arg_changes:
            if base is None:
                args = ", ".join(f"{k}={call.args[k]!r}" for k in call.given)
                out.append(f"{call.kernel}: new, {call.factory}({args})")
            else:
                what = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (new, old) in changes.items())
                out.append(f"{call.kernel} (against {self.a.step}'s {base.kernel}): {what}")
        return out

    def __str__(self) -> str:
        out = [f"# {self.title}"]
        if self.arg_changes:
            out += ["# factory arguments:"] + [f"#   {line}" for line in self.changes_lines()]
        out.append(self.text or "# (the two steps' sources are the same)")
        for name, (path, line, src) in self.new_factories.items():
            out += [f"# new in {self.b.step}: the factory {name} ({path}:{line})", src]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        parts = [f"<p style='margin: 0.2em 0'><b>{html.escape(self.title)}</b><br><small>"
                 f"{_inline(self.a.idea)} &rarr; {_inline(self.b.idea)}</small></p>"]
        if self.arg_changes:
            items = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in self.changes_lines())
            parts.append(f"<p style='margin: 0.2em 0'>Factory arguments that change:</p><ul>{items}</ul>")
        if self.text:
            parts.append(_highlight(self.text, "diff"))
        else:
            parts.append("<p><i>The two steps' sources are the same.</i></p>")
        # Whole sources (the newer step's, a new factory's) are folded: the diff's hunks are the lesson, and a
        # page of twenty steps with every one of them open was most of 01_matmul's length.
        if self.whole():
            parts.append(_fold(f"The two steps share {self.ratio:.0%} of their lines: "
                               f"<code>{html.escape(self.b.step)}</code>'s code whole", self.b.text))
        for name, (path, line, src) in self.new_factories.items():
            parts.append(_fold(f"New in <code>{html.escape(self.b.step)}</code>: the factory "
                               f"<code>{html.escape(name)}</code> ({html.escape(path)}:{line}); later steps change "
                               "only its arguments", src))
        return _box("".join(parts))

    def __rich__(self):
        from rich.console import Group
        from rich.syntax import Syntax
        from rich.text import Text

        items = [Text(self.title, style="bold")]
        if self.arg_changes:
            items += [Text("factory arguments:")] + [Text(f"  {line}") for line in self.changes_lines()]
        items.append(Syntax(self.text, "diff", theme="ansi_light", background_color="default") if self.text
                     else Text("(the two steps' sources are the same)", style="italic"))
        for name, (path, line, src) in self.new_factories.items():
            items += [Text(f"new in {self.b.step}: the factory {name} ({path}:{line})", style="bold"),
                      Syntax(src, "python", theme="ansi_light", background_color="default")]
        return Group(*items)


@dataclass
class _Module:
    """One module's text, its top-level statements by the names they bind, and where its imported names come from."""

    module: Any
    text: str
    lines: list
    top: dict  # name -> [statements binding it or attached to it]
    imports: dict  # name -> (module name, name there), for ``from .x import y`` of package modules

    @classmethod
    def read(cls, module) -> "_Module":
        text = inspect.getsource(module)
        tree = ast.parse(text)
        top: dict[str, list] = {}
        imports = {}
        for stmt in tree.body:
            for name in _bound(stmt):
                top.setdefault(name, []).append(stmt)
            base = _attached_to(stmt)
            if base:
                top.setdefault(base, []).append(stmt)
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                pkg = module.__name__.rsplit(".", stmt.level)[0]
                src = f"{pkg}.{stmt.module}" if stmt.module else pkg
                for alias in stmt.names:
                    imports[alias.asname or alias.name] = (src, alias.name)
        return cls(module, text, text.splitlines(), top, imports)


def _closure(module, start: list[str], follow: tuple = ()) -> list[tuple]:
    """(module, statement) pairs: the statements binding ``start`` and everything they use, transitively, within
    ``module`` and, through its imports, within the modules named in ``follow``."""
    mods = {module.__name__: _Module.read(module)}
    chosen: dict = {}
    todo = [(module.__name__, n) for n in start]
    while todo:
        mod_name, name = todo.pop()
        m = mods[mod_name]
        if name not in m.top:
            src = m.imports.get(name)
            if src and src[0] in follow:
                if src[0] not in mods:
                    mods[src[0]] = _Module.read(sys.modules[src[0]])
                todo.append(src)
            continue
        for stmt in m.top[name]:
            if (mod_name, id(stmt)) not in chosen:
                chosen[(mod_name, id(stmt))] = (m, stmt)
                todo += [(mod_name, n) for n in _used(stmt)]
    order = {name: i for i, name in enumerate(list(follow) + [module.__name__])}
    return sorted(chosen.values(), key=lambda ms: (order[ms[0].module.__name__], ms[1].lineno))


def _start(version, module) -> list[str]:
    """The launcher and the Version's kernels that ``module`` defines."""
    return [version.plan.__name__] + [n for n, obj in vars(module).items()
                                      if _is_kernel(obj) and any(obj is k for k in version.kernels)]


def _calls_used(version, lesson_mod) -> list[FactoryCall]:
    """The factory calls behind every kernel a Version launches, wherever in the lesson they are defined (a step
    reuses earlier steps' kernels: thread_16x8 falls back to vector_loads' on smaller shapes)."""
    out = []
    modules = [m for name, m in sorted(sys.modules.items())
               if m is not None and (name == lesson_mod.__name__ or name.startswith(lesson_mod.__name__ + "."))]
    for kernel in version.kernels:
        for m in modules:
            name = next((n for n, obj in vars(m).items() if obj is kernel), None)
            if name is None:
                continue
            mod = _Module.read(m)
            call = next((c for c in (_factory_call(st, m, mod.text) for st in mod.top.get(name, [])) if c), None)
            if call:
                out.append(call)
                break
    return out


def source(lesson: str, step, arg: str = "step", follow: tuple = ()) -> Source:
    """The code of one step of a lesson (by registry name or 1-based number): its launcher, kernels, helpers and
    constants, as `inspect.getsource` reads them from the package. ``follow``: module names whose statements the
    step imports are shown too (`diff` follows the earlier step's module, so what both use is common context)."""
    _, version, number = resolve(lesson, step, arg)
    module = sys.modules[version.plan.__module__]
    stmts = _closure(module, _start(version, module), tuple(m for m in follow if m != module.__name__))
    spans = [_span(st, m.lines) for m, st in stmts]
    body = "\n\n\n".join("\n".join(m.lines[a - 1:b]) for (m, _), (a, b) in zip(stmts, spans))
    calls = [c for c in (_factory_call(st, m.module, m.text) for m, st in stmts if m.module is module) if c]
    factories = {}
    for c in calls:
        if c.factory not in factories:
            func = module.__dict__[c.factory]
            factories[c.factory] = (c.path, c.line, inspect.getsource(func))
    own = [sp for (m, _), sp in zip(stmts, spans) if m.module is module]
    return Source(lesson, version.name, number, version.idea, _rel(inspect.getsourcefile(module)), own, body,
                  calls, factories)


def diff(lesson: str, a, b, context: int = 3) -> Diff:
    """What changed from step ``a`` to step ``b`` of a lesson (names or numbers): see `Diff`."""
    lesson_mod, va, _ = resolve(lesson, a, "A")
    _, vb, _ = resolve(lesson, b, "B")
    sa = source(lesson, a, "A")
    # b's code with what it imports from a's module: shared constants and device functions are context, not change
    sb = source(lesson, b, "B", follow=(va.plan.__module__,))
    la, lb = sa.text.splitlines(), sb.text.splitlines()
    text = "\n".join(difflib.unified_diff(la, lb, f"{sa.path} ({sa.step})", f"{sb.path} ({sb.step})", n=context,
                                          lineterm=""))
    ratio = difflib.SequenceMatcher(None, la, lb, autojunk=False).ratio()
    used_a = _calls_used(va, lesson_mod)
    previous = {(c.factory, repr(sorted(c.args.items()))) for c in used_a}
    arg_changes = []
    for call in sb.calls:
        if (call.factory, repr(sorted(call.args.items()))) in previous:
            continue  # a kernel a already had (perhaps under another name): nothing changed
        same = [c for c in used_a if c.factory == call.factory]
        base = min(same, key=lambda c: len(call.changes(c)), default=None)
        arg_changes.append((call, base, call.changes(base) if base else {}))
    new_factories = {k: v for k, v in sb.factories.items() if k not in sa.factories}
    return Diff(sa, sb, text, ratio, arg_changes, new_factories)


# ----------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------


def _print(obj) -> None:
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        console.print(obj)
    else:  # piped or redirected: plain text, nothing for a pager or a file to trip over
        try:
            print(obj, flush=True)
        except BrokenPipeError:  # `gpukernels diff ... | head`: the reader has what it wanted
            sys.stdout = open(os.devnull, "w")


def _lessons() -> str:
    """The lessons, from the registry: "matmul, softmax, cbr, tensor_core or attention"."""
    import gpukernels

    names = list(gpukernels.LESSONS)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def source_main(argv: list[str]) -> int:
    from .cli import ArgumentParser

    parser = ArgumentParser(prog="gpukernels source", description="print the code of one step of a lesson")
    parser.add_argument("lesson", metavar="LESSON", help=_lessons())
    parser.add_argument("step", metavar="STEP", help="a step's name or number (gpukernels demo LESSON lists them)")
    args = parser.parse_args(argv)
    _print(source(args.lesson, args.step, "STEP"))
    return 0


def diff_main(argv: list[str]) -> int:
    from .cli import ArgumentParser, nonnegative_int

    parser = ArgumentParser(prog="gpukernels diff",
                            description="what changed from step A to step B of a lesson (unified diff, and "
                                        "the factory arguments of factory-built kernels)")
    parser.add_argument("lesson", metavar="LESSON", help=_lessons())
    parser.add_argument("a", metavar="A", help="the earlier step: a name or number")
    parser.add_argument("b", metavar="B", help="the later step: a name or number")
    parser.add_argument("-U", "--context", type=nonnegative_int, default=3,
                        help="lines of context, a whole number >= 0 (default %(default)s)")
    args = parser.parse_args(argv)
    _print(diff(args.lesson, args.a, args.b, args.context))
    return 0
