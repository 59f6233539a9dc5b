"""Hunk contracts: the module-level names a hunk's new code relies on, and how.

A hunk can apply cleanly and still be wrong because something it *uses* changed upstream:
a function it calls lost a parameter it passes by keyword, a Triton kernel's constexpr
argument was renamed, a class attribute went away. No conflict shows it; the test run may.

For each hunk, the names its added lines use are recorded on the series' base release with
the series applied (its "contract"): calls with the keywords and the number of positional
arguments they pass, kernel launches (``kernel[grid](...)``), and ``X.attr`` references,
where the name is defined in the same module or imported from vLLM (``vllm.*``). On another
release, each such name is looked up again (with the series applied there) and every one
that disappeared or whose signature changed is reported, with what that does to the call.
For a port, made on its own release, only what no longer binds is reported.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bakery.checks.pyindex import PyIndex, Signature, index

#: A file's content in one world (a release with the series applied), by tree path.
Reader = Callable[[str], bytes | None]


@dataclass(frozen=True)
class Use:
    """One use of a name by a hunk's new code."""

    name: str  # "f", "Class.attr", "module.f"
    call: bool = False
    launch: bool = False  # kernel[grid](...)
    keywords: tuple[str, ...] = ()
    positional: int | None = 0  # None: *args or **kwargs make the count unknown
    #: the positional arguments written out (not ``*x``), known even where ``positional``
    #: is not; never shown
    explicit: int = 0

    def show(self) -> str:
        if not self.call:
            return self.name
        pos = ["*"] if self.positional is None else ["..."] if self.positional else []
        args = [*pos, *(f"{k}=" for k in self.keywords)]
        return f"{self.name}{'[grid]' if self.launch else ''}({', '.join(args)})"


class _Gone:
    """A name that resolves into vLLM, but is not there."""


GONE = _Gone()


class World:
    """One release's files with the series applied, indexed on demand."""

    def __init__(self, read: Reader) -> None:
        self._read = read
        self._index: dict[str, PyIndex | None] = {}

    def index(self, rel: str) -> PyIndex | None:
        if rel not in self._index:
            data = self._read(rel)
            pkg = rel[: -len(".py")].replace("/", ".")
            pkg = pkg[: -len(".__init__")] if pkg.endswith(".__init__") else pkg.rpartition(".")[0]
            self._index[rel] = None if data is None else index(data, pkg)
        return self._index[rel]

    def module(self, dotted: str) -> str | None:
        """The file of a vLLM module, or None."""
        base = dotted.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if self.index(rel) is not None:
                return rel
        return None

    def lookup(self, rel: str, name: str) -> Signature | _Gone | None:
        """The signature of ``name`` (dotted once at most) as seen from the file ``rel``:
        None where the name is not vLLM's (a builtin, torch, a local variable)."""
        where = self.locate(rel, name)
        if where is None or where is GONE:
            return where
        assert isinstance(where, tuple)
        file, local = where
        idx = self.index(file)
        assert idx is not None
        head, _, attr = local.partition(".")
        if not attr:
            return idx.names[head]
        return idx.members[head].get(attr, GONE)

    def locate(self, rel: str, name: str, depth: int = 0) -> tuple[str, str] | _Gone | None:
        """Where ``name``, as seen from ``rel``, is defined: (file, name in it)."""
        idx = self.index(rel)
        if idx is None or depth > 3:
            return None
        head, _, attr = name.partition(".")
        if head in idx.imports:
            module, member = idx.imports[head]
            if module != "vllm" and not module.startswith("vllm."):
                return None
            if member is None or self.module(f"{module}.{member}") is not None:
                sub = module if member is None else f"{module}.{member}"
                where = self.module(sub)
                if not attr:
                    return None if where else GONE  # a module itself: only its names count
                return GONE if where is None else self.locate(where, attr, depth + 1)
            where = self.module(module)
            if where is None:
                return GONE
            return self.locate(where, f"{member}.{attr}" if attr else member, depth + 1)
        if head not in idx.names:
            return None
        if attr and head not in idx.members:
            return None  # an attribute of a value: its type is not known statically
        if attr and attr not in idx.members[head]:
            return GONE
        return rel, name


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _near(tree: ast.AST, lo: int, hi: int) -> Iterator[ast.AST]:
    """The nodes whose lines meet lo..hi: only the subtrees around a hunk are walked, not
    the whole module once per hunk."""
    stack = [tree]
    while stack:
        for child in ast.iter_child_nodes(stack.pop()):
            start = getattr(child, "lineno", None)
            if start is not None:
                end = getattr(child, "end_lineno", None) or start
                if end < lo or start > hi:
                    continue
                yield child
            stack.append(child)


def uses(idx: PyIndex, lines: set[int]) -> list[Use]:
    """What the code on ``lines`` (1-based) of an indexed file uses: every call that spans
    one of them, and every name or ``X.attr`` on one of them."""
    if idx.tree is None or not lines:
        return []
    found: dict[Use, None] = {}
    callees: set[int] = set()
    near = list(_near(idx.tree, min(lines), max(lines)))
    for node in near:
        use = _call_use(node, lines, callees) if isinstance(node, ast.Call) else None
        if use is not None:
            found[use] = None
    for node in near:
        if id(node) in callees or getattr(node, "lineno", None) not in lines:
            continue
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            name = _dotted(node)
            if name is not None:
                found[Use(name)] = None
    return list(found)


def _call_use(node: ast.Call, lines: set[int], callees: set[int]) -> Use | None:
    """A call that spans one of the lines, as a Use (its callee noted in ``callees``)."""
    end = node.end_lineno or node.lineno
    if not any(node.lineno <= ln <= end for ln in lines):
        return None
    func, launch = node.func, False
    if isinstance(func, ast.Subscript):
        func, launch = func.value, True
    name = _dotted(func)
    if name is None:
        return None
    callees.add(id(func))
    starred = any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    )
    keywords = tuple(sorted(k.arg for k in node.keywords if k.arg))
    explicit = sum(1 for a in node.args if not isinstance(a, ast.Starred))
    return Use(name, True, launch, keywords, None if starred else len(node.args), explicit)


def _positional(sig: Signature) -> list[str]:
    return [p.name for p in sig.params or () if p.kind == "positional"]


#: Keywords a Triton launch (``kernel[grid](...)``) takes besides the kernel's parameters:
#: the launch options of ``triton.runtime.jit.JITFunction.run``, never a contract break.
LAUNCH_OPTIONS = frozenset(
    {
        "num_warps",
        "num_stages",
        "num_ctas",
        "maxnreg",
        "enable_fp_fusion",
        "launch_cooperative_grid",
        "debug",
        "grid",
        "warmup",
        "stream",
        "device",
    }
)


def binding(use: Use, sig: Signature) -> list[str]:
    """What about the call no longer fits the signature."""
    if not use.call or sig.params is None:
        return []
    names = {p.name for p in sig.params if p.kind in ("positional", "keyword")}
    kinds = {p.kind for p in sig.params}
    out = [
        f"passes {k}= by keyword, which is no longer a parameter"
        for k in use.keywords
        if k not in names and "**kwargs" not in kinds and not (use.launch and k in LAUNCH_OPTIONS)
    ]
    pos = _positional(sig)
    if use.positional is not None:
        if use.positional > len(pos) and "*args" not in kinds:
            out.append(f"passes {use.positional} positional arguments; it takes {len(pos)}")
        given = set(pos[: use.positional]) | set(use.keywords)
        missing = [
            p.name
            for p in sig.params
            if p.kind in ("positional", "keyword") and not p.default and p.name not in given
        ]
        if missing:
            out.append(f"does not pass {', '.join(missing)}, now required")
    return out


def change(use: Use, old: Signature, new: Signature) -> list[str]:
    """How a signature change between the record and now touches the use."""
    out = binding(use, new)
    if use.call and use.positional:
        was, now = _positional(old)[: use.positional], _positional(new)[: use.positional]
        moved = [f"{a} -> {b}" for a, b in zip(was, now, strict=False) if a != b]
        if moved:
            out.append(f"its positional arguments now fill other parameters ({', '.join(moved)})")
    return out


def breaks(
    use: Use, before: Signature | _Gone | None, after: Signature | _Gone | None
) -> str | None:
    """Why a use that fit ``before`` (the series on its base release) does not fit ``after``
    (the merged tree on the release), or None: the name is gone, or the call passes a
    keyword, or a number of arguments, the new signature does not take (issue 45: such a
    merge is a conflict, not a bake). A use that did not bind before says nothing (the
    static view may miss what binds it at run time)."""
    if not isinstance(before, Signature):
        return None
    if after is GONE:
        return f"`{use.name}` is gone on the release"
    if not isinstance(after, Signature):
        return None
    known = _counted(use, before)
    if binding(known, before):
        return None
    problems = change(known, before, after)
    return f"{use.show()} {'; '.join(problems)}" if problems else None


def _counted(use: Use, sig: Signature) -> Use:
    """A call whose ``*args`` hide how many positional arguments it passes, counted where
    the signature it was written for tells: the positional parameters before the first one
    it passes by keyword (``k(a, *s, b, PIN=...)`` against ``k(a, x, y, b, PIN=...)``: 4).
    Otherwise (no keyword to count up to, or fewer than it writes out) as it is."""
    if use.positional is not None or not use.call or sig.params is None:
        return use
    pos = _positional(sig)
    n = next((i for i, name in enumerate(pos) if name in use.keywords), None)
    if n is None or n < use.explicit:
        return use
    return dataclasses.replace(use, positional=n)
