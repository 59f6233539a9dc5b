"""What a Python file defines, read once with the ``ast`` module: its definitions with their
line ranges (for the placement check), its module-level names with their signatures, and
its imports (for hunk contracts).

``ast`` and not libcst: only names, line ranges and signatures are needed, never an edit
of the source, and ``ast`` is in the standard library and about ten times faster to parse.
A file that does not parse (not Python 3 syntax, a conflict) gives an empty index: the
checks built on it then say nothing rather than guess.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

MODULE = "<module>"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # positional | keyword (keyword-only) | *args | **kwargs
    default: bool
    constexpr: bool  # annotated tl.constexpr: a Triton compile-time argument

    def show(self) -> str:
        text = {"*args": f"*{self.name}", "**kwargs": f"**{self.name}"}.get(self.kind, self.name)
        if self.constexpr:
            text += ": constexpr"
        return text + ("=..." if self.default else "")


@dataclass(frozen=True)
class Signature:
    """A module-level name's shape: a function's (or a class's ``__init__``) parameters; for
    any other name, its kind alone."""

    kind: str  # function | kernel | class | value
    params: tuple[Param, ...] | None = None

    def show(self) -> str:
        if self.params is None:
            return self.kind
        return f"{self.kind}({', '.join(p.show() for p in self.params)})"


@dataclass
class PyIndex:
    #: Qualified name (Class.method) -> (first line, last line), decorators included.
    defs: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Module-level name -> its signature.
    names: dict[str, Signature] = field(default_factory=dict)
    #: Class name -> attribute (method or class variable) -> signature.
    members: dict[str, dict[str, Signature]] = field(default_factory=dict)
    #: Local name -> (module, name in it or None for the module itself), from imports.
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    tree: ast.Module | None = None

    def enclosing(self, line: int) -> str:
        """The innermost definition that holds the line, or ``<module>``."""
        best, size = MODULE, None
        for name, (a, b) in self.defs.items():
            if a <= line <= b and (size is None or b - a < size):
                best, size = name, b - a
        return best


def _is_constexpr(ann: ast.expr | None) -> bool:
    return ann is not None and (
        (isinstance(ann, ast.Attribute) and ann.attr == "constexpr")
        or (isinstance(ann, ast.Name) and ann.id == "constexpr")
    )


def _params(args: ast.arguments, drop_self: bool = False) -> tuple[Param, ...]:
    pos = [*args.posonlyargs, *args.args]
    if drop_self and pos:
        pos = pos[1:]
    first_default = len(pos) - len(args.defaults)
    out = [
        Param(a.arg, "positional", i >= first_default, _is_constexpr(a.annotation))
        for i, a in enumerate(pos)
    ]
    if args.vararg:
        out.append(Param(args.vararg.arg, "*args", False, False))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(Param(a.arg, "keyword", d is not None, _is_constexpr(a.annotation)))
    if args.kwarg:
        out.append(Param(args.kwarg.arg, "**kwargs", False, False))
    return tuple(out)


def _is_jit(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("jit", "autotune", "heuristics"):
            return True
    return False


def _signature(node: ast.stmt) -> Signature | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return Signature("kernel" if _is_jit(node) else "function", _params(node.args))
    if isinstance(node, ast.ClassDef):
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == "__init__":
                return Signature("class", _params(item.args, drop_self=True))
        return Signature("class")
    return None


def _assigned(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


#: The nodes that define a name a hunk can sit inside.
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def definitions(tree: ast.AST) -> dict[str, Definition]:
    """Every definition in ``tree`` by dotted name (``Class.method``), those inside
    ``if``/``try`` blocks included: the one finder of enclosing definitions (the guard's
    spans and merge's drift warnings both use it)."""
    out: dict[str, Definition] = {}
    _walk_defs(tree, "", out)
    return out


def span(node: Definition) -> tuple[int, int]:
    """The lines of a definition, its decorators included."""
    start = min([node.lineno, *[d.lineno for d in node.decorator_list]])
    return start, node.end_lineno or node.lineno


def _walk_defs(node: ast.AST, prefix: str, out: dict[str, Definition]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            out[name] = child
            _walk_defs(child, name + ".", out)
        elif not isinstance(child, (ast.expr, ast.Lambda)):
            _walk_defs(child, prefix, out)  # defs inside if/try blocks


def _members(node: ast.ClassDef) -> dict[str, Signature]:
    out: dict[str, Signature] = {}
    for item in node.body:
        sig = _signature(item)
        if sig is not None:
            out[item.name] = sig  # type: ignore[attr-defined]
        for name in _assigned(item):
            out[name] = Signature("value")
    return out


def _import(node: ast.Import | ast.ImportFrom, package: str, out: PyIndex) -> None:
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                out.imports[a.asname] = (a.name, None)
        return
    module = node.module or ""
    if node.level:  # relative: from the file's package
        parts = package.split(".")
        base = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
        module = ".".join([*base, module] if module else base)
    for a in node.names:
        out.imports[a.asname or a.name] = (module, a.name)


def _top(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, including those under a top-level if/try (optional imports,
    TYPE_CHECKING blocks, fallbacks)."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += _top(node.body) + _top(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top(node.body) + _top(node.orelse) + _top(node.finalbody)
            for handler in node.handlers:
                out += _top(handler.body)
    return out


def index(source: bytes, package: str = "") -> PyIndex:
    """The index of one file; ``package`` (dotted) resolves relative imports."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return PyIndex()
    out = PyIndex(tree=tree)
    out.defs = {name: span(node) for name, node in definitions(tree).items()}
    for node in _top(tree.body):
        sig = _signature(node)
        if sig is not None:
            out.names[node.name] = sig  # type: ignore[attr-defined]
            if isinstance(node, ast.ClassDef):
                out.members[node.name] = _members(node)
        for name in _assigned(node):
            out.names.setdefault(name, Signature("value"))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _import(node, package, out)
    return out
