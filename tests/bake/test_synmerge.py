"""The syntax merge (bakery.bake.synmerge): each case is one a line merge cannot join
(checked with git merge-file), and the promise is that the result parses, keeps both
sides' changes, and is refused where both sides changed one thing differently."""

from __future__ import annotations

import ast
import textwrap

import pytest

from bakery.bake.merge import merge_file
from bakery.bake.synmerge import SyntaxConflict, merge_python


def _merge(base: str, ours: str, theirs: str) -> str:
    b, o, t = (textwrap.dedent(x).encode() for x in (base, ours, theirs))
    _, conflicts = merge_file(t, b, o)
    assert conflicts, "a line merge joins this case: it proves nothing about syntax"
    merged = merge_python(b, o, t).content.decode()
    ast.parse(merged)
    return merged


def test_signature_gets_both_parameters() -> None:
    # vLLM 0.34.0 added score_dtype where the series added its keyword-only DCP arguments.
    merged = _merge(
        """\
        def select(
            logits,
            out,
            row_repeat: int = 1,
        ) -> None:
            pass
        """,
        """\
        def select(
            logits,
            out,
            row_repeat: int = 1,
            *,
            dcp_group=None,
        ) -> None:
            pass
        """,
        """\
        def select(
            logits,
            out,
            row_repeat: int = 1,
            score_dtype=None,
        ) -> None:
            pass
        """,
    )
    fn = ast.parse(merged).body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert [a.arg for a in fn.args.args] == ["logits", "out", "row_repeat", "score_dtype"]
    assert [a.arg for a in fn.args.kwonlyargs] == ["dcp_group"]


def test_imported_names_from_both_sides() -> None:
    merged = _merge(
        "from m import a, b\n\nX = 1\n",
        "from m import a, b, c\n\nX = 1\n",
        "from m import a, b, d\n\nX = 1\n",
    )
    names = {a.name for a in ast.parse(merged).body[0].names}  # type: ignore[attr-defined]
    assert names == {"a", "b", "c", "d"}


def test_decorators_from_both_sides() -> None:
    merged = _merge(
        "@a\ndef f():\n    pass\n",
        "@a\n@ours\ndef f():\n    pass\n",
        "@a\n@theirs\ndef f():\n    pass\n",
    )
    fn = ast.parse(merged).body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert {ast.unparse(d) for d in fn.decorator_list} == {"a", "ours", "theirs"}


def test_literal_keys_from_both_sides() -> None:
    merged = _merge(
        "TABLE = {\n    'a': 1,\n}\n",
        "TABLE = {\n    'a': 1,\n    'b': 2,\n}\n",
        "TABLE = {\n    'a': 1,\n    'c': 3,\n}\n",
    )
    ns: dict[str, object] = {}
    exec(merged, ns)
    assert ns["TABLE"] == {"a": 1, "b": 2, "c": 3}


def test_call_arguments_from_both_sides() -> None:
    merged = _merge(
        "kernel[grid](\n    x,\n    BLOCK=4,\n)\n",
        "kernel[grid](\n    x,\n    BLOCK=4,\n    PIN_NEWEST=pin,\n)\n",
        "kernel[grid](\n    x,\n    BLOCK=4,\n    FULL_WIDTH=full,\n)\n",
    )
    call = ast.parse(merged).body[0].value  # type: ignore[attr-defined]
    assert [k.arg for k in call.keywords] == ["BLOCK", "FULL_WIDTH", "PIN_NEWEST"]


def test_statements_changed_at_different_places_of_one_body() -> None:
    merged = _merge(
        "def f(x):\n    a = x + 1\n    b = a * 2\n    return b\n",
        "def f(x):\n    a = x + 10\n    b = a * 2\n    return b\n",
        "def f(x):\n    a = x + 1\n    b = a * 3\n    return b\n",
    )
    ns: dict[str, object] = {}
    exec(merged, ns)
    assert ns["f"](0) == 30  # type: ignore[operator]


def test_change_lands_in_the_function_the_series_renamed() -> None:
    # The series moved f's body into _f_impl behind a wrapper named f; upstream changed
    # a line of f's body: the change belongs to _f_impl.
    merged = _merge(
        "def f(x, k):\n    y = sorted(x)\n    z = y[:k]\n    return z\n",
        "def f(*a):\n    return _f_impl(*a)\n\n\n"
        "def _f_impl(x, k, *, rev=False):\n    y = sorted(x, reverse=rev)\n    z = y[:k]\n"
        "    return z\n",
        "def f(x, k):\n    y = sorted(x)\n    z = y[: max(k, 0)]\n    return z\n",
    )
    ns: dict[str, object] = {}
    exec(merged, ns)
    assert "max(k, 0)" in merged.split("def _f_impl")[1]
    assert ns["f"]([3, 1, 2], -1) == []  # type: ignore[operator]


@pytest.mark.parametrize(
    ("base", "ours", "theirs", "where"),
    [
        pytest.param(
            "def f(x):\n    a = x + 1\n    return a\n",
            "def f(x):\n    a = x + 2\n    return a\n",
            "def f(x):\n    a = x + 3\n    return a\n",
            "/f/a",
            id="one-statement-changed-twice",
        ),
        pytest.param(
            "def f(x):\n    a = x + 1\n    return a\n\n\ndef g():\n    pass\n",
            "def g():\n    pass\n",
            "def f(x):\n    a = x + 5\n    return a\n\n\ndef g():\n    pass\n",
            "/f",
            id="deleted-on-one-side-changed-on-the-other",
        ),
        pytest.param(
            "def f(x):\n    a = x\n    return a\n",
            "def f(x):\n    a = x\n    trace(a)\n    return a\n",
            "def f(x):\n    a = x\n    if a:\n        log(a)\n    return a\n",
            "/f",
            id="two-different-inserts-at-one-place",
        ),
        pytest.param(
            "def f(x, y):\n    pass\n",
            "def f(x, y, z):\n    pass\n",
            "def f(x, y, w):\n    pass\n",
            "/f",
            id="positional-parameters-added-at-one-place",
        ),
    ],
)
def test_real_conflicts_are_refused(base: str, ours: str, theirs: str, where: str) -> None:
    with pytest.raises(SyntaxConflict) as e:
        merge_python(base.encode(), ours.encode(), theirs.encode())
    assert e.value.where.startswith(where)


def test_code_after_a_return_is_a_conflict() -> None:
    # A merge that would put the release's new branch after the series' early return
    # compiles and never runs: refused.
    base = "def f(x):\n    y = x\n    return y\n"
    ours = "def f(x):\n    return g(x)\n"
    theirs = "def f(x):\n    y = x\n    if y:\n        y += 1\n    return y\n"
    with pytest.raises(SyntaxConflict, match="after a return|changed"):
        merge_python(base.encode(), ours.encode(), theirs.encode())


def test_a_file_that_does_not_parse_is_a_conflict() -> None:
    with pytest.raises(SyntaxConflict, match="parse"):
        merge_python(b"x = 1\n", b"x = (\n", b"x = 2\n")


def test_one_side_unchanged_takes_the_other_byte_for_byte() -> None:
    base = "def f(x):\n    return x\n"
    theirs = "# a comment\ndef f(x):  # why\n    return x  # keep\n"
    assert merge_python(base.encode(), base.encode(), theirs.encode()).content == theirs.encode()
