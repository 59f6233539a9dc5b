"""Three-way merge of Python files by syntax, for the conflicts a line merge cannot join.

``git merge-file`` sees lines. When the series and a release both change one signature,
one import, one argument list or one body at different statements, the lines touch and it
gives up, although the two changes are independent in the syntax tree. This merge runs
diff3 over syntax instead of lines: statements of a module or block, parameters, call
arguments, decorators, imported names and the elements of literals are items with a key
(a definition's name, a parameter's or keyword's name, otherwise the item's own code).
Items are matched by key between base, ours and theirs with difflib; each matched item is
merged the same way, recursively, and an item or a stretch between matches that both
sides changed differently is a conflict. Parsing and printing is libcst's (it keeps every
comment and every space of the code each side wrote), not hand-written.

The merge is conservative: where it cannot prove both changes independent it reports the
conflict and leaves the line merge's markers in place. A merge that succeeds must parse
and keep every line either side added (``_keeps_both``); otherwise it is refused.
Structured merges still make wrong merges that raise no conflict, which is why
``bakery port`` accepts one only after verify proves it.
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import libcst as cst

N = TypeVar("N", bound=cst.CSTNode)

_EMPTY = cst.Module(body=[])


class SyntaxConflict(Exception):
    """Both sides changed one item differently: where, as a dotted path."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


@dataclass
class SyntaxMerge:
    """A merged file and the places (dotted paths) where both sides' changes were joined."""

    content: bytes
    joined: list[str] = field(default_factory=list)


def _code(node: Any) -> str:
    return _EMPTY.code_for_node(node) if isinstance(node, cst.CSTNode) else ""


def _stmt_key(node: cst.CSTNode) -> tuple[str, ...]:
    if isinstance(node, cst.FunctionDef | cst.ClassDef):
        return (type(node).__name__, node.name.value)
    if isinstance(node, cst.If | cst.While):
        return (type(node).__name__, _code(node.test))
    if isinstance(node, cst.For):
        return ("For", _code(node.target), _code(node.iter))
    if isinstance(node, cst.With):
        return ("With", *(_code(i.item) for i in node.items))
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
        small = node.body[0]
        if isinstance(small, cst.ImportFrom) and small.module is not None:
            return ("from", "." * len(small.relative) + _code(small.module))
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return ("call", _code(small.value.func))
        if isinstance(small, cst.Assign | cst.AnnAssign) and isinstance(
            target := _single_target(small), cst.Name
        ):
            return ("assign", target.value)
    return ("code", _bare(node))


def _bare(node: cst.CSTNode) -> str:
    """A statement's code without the blank lines and comments above it."""
    if isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        return _code(node.with_changes(leading_lines=()))
    return _code(node)


def _single_target(node: cst.Assign | cst.AnnAssign) -> cst.BaseExpression | None:
    if isinstance(node, cst.AnnAssign):
        return node.target
    return node.targets[0].target if len(node.targets) == 1 else None


def _param_key(p: cst.CSTNode) -> tuple[str, ...]:
    return ("param", p.name.value) if isinstance(p, cst.Param) else ("code", _code(p))


def _arg_key(a: cst.Arg) -> tuple[str, ...]:
    if a.keyword is not None:
        return ("kw", a.keyword.value)
    return ("pos", a.star, _code(a.value))


def _element_key(e: cst.CSTNode) -> tuple[str, ...]:
    if isinstance(e, cst.DictElement):
        return ("key", _code(e.key))
    if isinstance(e, cst.ImportAlias):
        return ("alias", _code(e.name), _code(e.asname))
    return ("code", _code(e))


class _Merger:
    def __init__(self) -> None:
        self.joined: list[str] = []

    # -- sequences ------------------------------------------------------------------------

    def seq(
        self,
        b: Sequence[N],
        o: Sequence[N],
        t: Sequence[N],
        key: Callable[[Any], tuple[str, ...]],
        where: str,
        *,
        concat_ok: bool = False,
    ) -> list[N]:
        """Merge three sequences of items matched by key. A base item either side deleted
        goes (unless the other side changed it: a conflict); items both kept are merged
        by ``self.item``; new items go after the nearest item before them on their side
        that the base has. Where both sides add at one place, that is a conflict, except
        for named items (definitions, imports, assignments, with ``concat_ok``) whose
        names differ: the release's come first."""
        bk, ok, tk = [key(x) for x in b], [key(x) for x in o], [key(x) for x in t]
        if key is _stmt_key:
            _follow_renames(b, bk, o, ok)
            _follow_renames(b, bk, t, tk)
        b2o, b2t = _matches(bk, ok), _matches(bk, tk)
        kept: list[N | None] = []
        for i, item in enumerate(b):
            io, it = b2o.get(i), b2t.get(i)
            here = f"{where}/{_label(bk[i])}"
            if io is not None and it is not None:
                kept.append(self.item(item, o[io], t[it], here))
                continue
            for j, side in ((io, o), (it, t)):
                if j is not None and _code(side[j]) != _code(item):
                    raise SyntaxConflict(f"{here} (deleted on one side, changed on the other)")
            kept.append(None)
        added_o, added_t = _insertions(b2o, len(o)), _insertions(b2t, len(t))
        out: list[N] = []
        for anchor in range(-1, len(b)):
            if anchor >= 0 and (x := kept[anchor]) is not None:
                out.append(x)
            new_o = [o[j] for j in added_o.get(anchor, [])]
            new_t = [t[j] for j in added_t.get(anchor, [])]
            if new_o and new_t:
                out += self._both_added(new_o, new_t, key, where, concat_ok)
            else:
                out += new_t or new_o
        return out

    def _both_added(
        self,
        o: list[N],
        t: list[N],
        key: Callable[[Any], tuple[str, ...]],
        where: str,
        concat_ok: bool,
    ) -> list[N]:
        if [_code(x) for x in o] == [_code(x) for x in t]:
            return o
        ko, kt = [key(x) for x in o], [key(x) for x in t]
        named = all(k[0] in _NAMED for k in (*ko, *kt))
        if concat_ok and named and not set(ko) & set(kt):
            self.joined.append(where or "<module>")
            return [*t, *o]
        raise SyntaxConflict(f"{where}/[{_span(o, t, key)}] (both sides add here)")

    # -- items ----------------------------------------------------------------------------

    def item(self, b: N, o: N, t: N, where: str) -> N:
        cb, co, ct = _code(b), _code(o), _code(t)
        if co == cb:
            return t
        if ct == cb or co == ct:
            return o
        merged = self._structured(b, o, t, where)
        if merged is None:
            raise SyntaxConflict(where)
        self.joined.append(where)
        return cast(N, merged)

    def _structured(self, b: Any, o: Any, t: Any, where: str) -> Any:
        if type(b) is not type(o) or type(b) is not type(t):
            return None
        parts = _PARTS.get(type(b))
        if parts is None:
            return None
        changes: dict[str, Any] = {}
        for name, merge in parts.items():
            changes[name] = merge(self, getattr(b, name), getattr(o, name), getattr(t, name), where)
        shells = [x.with_changes(**{n: getattr(b, n) for n in parts}) for x in (b, o, t)]
        if type(b) in _SAME_SHELL and len({_code(x) for x in shells}) > 1:
            return None  # a call's function, an assignment's target: the parts belong to it
        shell = self.item_shell(shells[0], shells[1], shells[2], where)
        return shell.with_changes(**changes)

    def item_shell(self, b: Any, o: Any, t: Any, where: str) -> Any:
        """What is left of a node once its merged parts are set aside: one side's or both
        the same, else a conflict."""
        cb, co, ct = _code(b), _code(o), _code(t)
        if co == cb:
            return t
        if ct == cb or co == ct:
            return o
        raise SyntaxConflict(where)

    # -- parts of nodes -------------------------------------------------------------------

    def block(self, b: Any, o: Any, t: Any, where: str) -> Any:
        if not all(isinstance(x, cst.IndentedBlock) for x in (b, o, t)):
            return self.item(b, o, t, where)
        body = self.seq(b.body, o.body, t.body, _stmt_key, where, concat_ok=True)
        _refuse_unreachable(body, where)
        shells = [x.with_changes(body=b.body) for x in (b, o, t)]
        return self.item_shell(shells[0], shells[1], shells[2], where).with_changes(body=body)

    def params(self, b: Any, o: Any, t: Any, where: str) -> Any:
        lists = {}
        for name in ("posonly_params", "params", "kwonly_params"):
            lists_bot = getattr(b, name), getattr(o, name), getattr(t, name)
            got = self.seq(*lists_bot, _param_key, where, concat_ok=_keyword_only_adds(*lists_bot))
            lists[name] = _recomma(got, getattr(o, name) or getattr(t, name))
        scalars = {}
        for name in ("star_arg", "star_kwarg", "posonly_ind"):
            scalars[name] = self.item(getattr(b, name), getattr(o, name), getattr(t, name), where)
        return b.with_changes(**lists, **scalars)

    def args(self, b: Any, o: Any, t: Any, where: str) -> Any:
        merged = self.seq(b, o, t, _arg_key, where, concat_ok=True)
        return tuple(_recomma(merged, list(o) or list(t)))

    def elements(self, b: Any, o: Any, t: Any, where: str) -> Any:
        if isinstance(b, cst.ImportStar) or isinstance(o, cst.ImportStar):
            return self.item(b, o, t, where)
        merged = self.seq(b, o, t, _element_key, where, concat_ok=True)
        return tuple(_recomma(merged, list(o) or list(t)))

    def decorators(self, b: Any, o: Any, t: Any, where: str) -> Any:
        return tuple(self.seq(b, o, t, lambda d: ("decorator", _code(d)), where, concat_ok=True))

    def small(self, b: Any, o: Any, t: Any, where: str) -> Any:
        if len(b) != 1 or len(o) != 1 or len(t) != 1:
            return self.item_tuple(b, o, t, where)
        return (self.item(b[0], o[0], t[0], where),)

    def item_tuple(self, b: Any, o: Any, t: Any, where: str) -> Any:
        cb, co, ct = [_code(x) for x in b], [_code(x) for x in o], [_code(x) for x in t]
        if co == cb:
            return t
        if ct == cb or co == ct:
            return o
        raise SyntaxConflict(where)

    def expr(self, b: Any, o: Any, t: Any, where: str) -> Any:
        return self.item(b, o, t, where)

    def orelse(self, b: Any, o: Any, t: Any, where: str) -> Any:
        if b is None or o is None or t is None:
            return self.item_shell(b, o, t, where + "/else")
        return self.item(b, o, t, where + "/else")


def _refuse_unreachable(body: Sequence[cst.BaseStatement], where: str) -> None:
    """Code merged in after a return (or raise, break, continue) never runs: the change
    was meant for another place, so it is a conflict, not a merge."""
    for i, stmt in enumerate(body[:-1]):
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
            stmt.body[-1], cst.Return | cst.Raise | cst.Break | cst.Continue
        ):
            raise SyntaxConflict(f"{where}/[{_label(_stmt_key(body[i + 1]))}] (after a return)")


def _follow_renames(
    b: Sequence[Any], bk: list[tuple[str, ...]], s: Sequence[Any], sk: list[tuple[str, ...]]
) -> None:
    """A definition one side renamed (and maybe replaced with a wrapper of the old name)
    is matched by its body: the new name's definition takes the old key when its code is
    much closer to the base's than the same-named one's is."""
    defs = ("FunctionDef", "ClassDef")
    base_names = {k: i for i, k in enumerate(bk) if k[0] in defs}
    new = [j for j, k in enumerate(sk) if k[0] in defs and k not in base_names]
    if not new:
        return
    side_names = {k: j for j, k in enumerate(sk)}
    for k, i in base_names.items():
        old = _code(b[i])
        same = side_names.get(k)
        here = _similarity(old, _code(s[same])) if same is not None else 0.0
        scored = [
            (_similarity(old, _code(s[j])) + (1.0 if _keeps_params(b[i], s[j]) else 0.0), j)
            for j in new
            if sk[j][0] == k[0]
        ]
        if not scored:
            continue
        score, best = max(scored)
        # a rename keeps the old parameters (it may add some): a lower bar for the body
        if (score >= 1.3 or 0.6 <= score < 1.0) and score % 1.0 > here + 0.2:
            if same is not None:
                sk[same] = ("new", *k[1:])
            sk[best] = k
            new.remove(best)


def _keyword_only_adds(b: Sequence[Any], o: Sequence[Any], t: Sequence[Any]) -> bool:
    """Both sides may add parameters at one place when the series' new ones are Triton
    constexprs (passed by keyword) and every new one comes after the base's last one:
    the release's keep their positions, the series' follow them."""
    base = {_code(x.name) for x in b}
    new_o = [x for x in o if _code(x.name) not in base]
    tail = not base or all(_code(x.name) in base for x in o[: len(o) - len(new_o)])
    return tail and all(
        x.annotation is not None and "constexpr" in _code(x.annotation.annotation) for x in new_o
    )


def _keeps_params(old: cst.CSTNode, new: cst.CSTNode) -> bool:
    if not isinstance(old, cst.FunctionDef) or not isinstance(new, cst.FunctionDef):
        return False
    names = [
        {
            p.name.value
            for p in (*f.params.posonly_params, *f.params.params, *f.params.kwonly_params)
        }
        for f in (old, new)
    ]
    return names[0] <= names[1]


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False).ratio()


#: Keys of items that may be added side by side at one place (their order means nothing,
#: or the series' follow the release's): definitions, imports, assignments, keyword
#: arguments, dict keys, imported names, decorators, keyword-passed parameters.
_NAMED = (
    "FunctionDef",
    "ClassDef",
    "from",
    "assign",
    "new",
    "param",
    "kw",
    "key",
    "alias",
    "decorator",
)


def _insertions(pairs: dict[int, int], n: int) -> dict[int, list[int]]:
    """A side's items the base lacks, by the base index of the nearest matched item
    before them (-1: at the start)."""
    back = {j: i for i, j in pairs.items()}
    out: dict[int, list[int]] = {}
    anchor = -1
    for j in range(n):
        if j in back:
            anchor = back[j]
        else:
            out.setdefault(anchor, []).append(j)
    return out


def _span(o: Sequence[Any], t: Sequence[Any], key: Any) -> str:
    return " | ".join(",".join(_label(key(x)) for x in side) for side in (o, t))


def _label(key: tuple[str, ...]) -> str:
    kind, *rest = key
    if kind in ("FunctionDef", "ClassDef", "param", "kw", "assign", "from", "key", "new", "call"):
        return rest[0]
    return kind if kind != "code" else "stmt"


def _matches(a: list[tuple[str, ...]], b: list[tuple[str, ...]]) -> dict[int, int]:
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    pairs: dict[int, int] = {}
    for blk in sm.get_matching_blocks():
        for k in range(blk.size):
            pairs[blk.a + k] = blk.b + k
    return pairs


def _recomma(items: list[Any], model: Sequence[Any]) -> list[Any]:
    """Commas after a merge: an item that was last on its side and now has a successor
    takes the comma style of its neighbours (so a signature split over lines stays so)."""
    if not items:
        return items
    style = next(
        (x.comma for x in reversed(model[:-1] or model) if isinstance(x.comma, cst.Comma)), None
    )
    out = list(items)
    for i, x in enumerate(out[:-1]):
        if not isinstance(x.comma, cst.Comma) and style is not None:
            out[i] = x.with_changes(comma=style)
    return out


#: Expressions whose parts only mean something beside the rest of the node unchanged.
_SAME_SHELL = (cst.Call, cst.Assign, cst.AnnAssign, cst.Arg, cst.Param, cst.Expr, cst.Return)

_PARTS: dict[type, dict[str, Callable[..., Any]]] = {
    cst.FunctionDef: {
        "decorators": _Merger.decorators,
        "params": _Merger.params,
        "body": _Merger.block,
    },
    cst.ClassDef: {
        "decorators": _Merger.decorators,
        "bases": _Merger.args,
        "keywords": _Merger.args,
        "body": _Merger.block,
    },
    cst.If: {"body": _Merger.block, "orelse": _Merger.orelse},
    cst.Else: {"body": _Merger.block},
    cst.For: {"body": _Merger.block, "orelse": _Merger.orelse},
    cst.While: {"body": _Merger.block, "orelse": _Merger.orelse},
    cst.With: {"body": _Merger.block},
    cst.Try: {"body": _Merger.block},
    cst.SimpleStatementLine: {"body": _Merger.small},
    cst.Expr: {"value": _Merger.expr},
    cst.Return: {"value": _Merger.expr},
    cst.Assign: {"value": _Merger.expr},
    cst.AnnAssign: {"value": _Merger.expr},
    cst.Call: {"args": _Merger.args},
    cst.ImportFrom: {"names": _Merger.elements},
    cst.Import: {"names": _Merger.elements},
    cst.List: {"elements": _Merger.elements},
    cst.Tuple: {"elements": _Merger.elements},
    cst.Set: {"elements": _Merger.elements},
    cst.Dict: {"elements": _Merger.elements},
    cst.Arg: {"value": _Merger.expr},
    cst.Param: {"default": _Merger.expr},
}


def _tokens(code: str) -> Counter[str]:
    return Counter(
        t.string
        for t in tokenize.generate_tokens(io.StringIO(code).readline)
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    )


def _keeps_both(base: str, ours: str, theirs: str, merged: str) -> str | None:
    """A token that ours or theirs added and the merge lost, or None: every name, string,
    number and operator a side added must be in the result as often as that side has it
    more than the base (a check on the merge, not a proof: verify proves it)."""
    have, had = _tokens(merged), _tokens(base)
    for side in (ours, theirs):
        lost = (_tokens(side) - had) - have
        if lost:
            return ", ".join(sorted(lost))
    return None


def merge_python(base: bytes, ours: bytes, theirs: bytes) -> SyntaxMerge:
    """Merge three versions of a Python file by syntax. Raises SyntaxConflict where both
    sides changed one item differently (or the result would lose a change)."""
    try:
        trees = [cst.parse_module(x) for x in (base, ours, theirs)]
    except (cst.ParserSyntaxError, UnicodeDecodeError) as e:
        raise SyntaxConflict(f"<parse: {str(e).splitlines()[0]}>") from None
    b, o, t = trees
    m = _Merger()
    body = m.seq(b.body, o.body, t.body, _stmt_key, "", concat_ok=True)
    heads = [x.with_changes(body=[]) for x in (b, o, t)]
    header = m.item_shell(heads[0], heads[1], heads[2], "<module header>")
    merged = header.with_changes(body=body)
    code = merged.code
    try:
        ast.parse(code)
    except SyntaxError as e:
        raise SyntaxConflict(f"<result does not parse: {e.msg} at line {e.lineno}>") from None
    lost = _keeps_both(b.code, o.code, t.code, code)
    if lost is not None:
        raise SyntaxConflict(f"<would lose: {lost[:60]}>")
    return SyntaxMerge(merged.bytes, sorted(set(m.joined)))
