"""The pick series' texts, shared by the tests that build it: two files of a tiny vLLM
(``vllm/a.py``, ``vllm/k.py``), diff 02 giving ``pick`` a keyword-only ``rev``, and the
next release changing the same line (``key``), so that only a port (a syntax merge)
keeps both; its tests, and ``diff -u`` text with ``a/``/``b/`` labels."""

from __future__ import annotations

import difflib

A, K = "vllm/a.py", "vllm/k.py"
A_BASE = "A = 1\n"
TAIL = "\n\n# --\n# helpers\n# --\n\n\ndef size(xs):\n    return len(xs)\n"
K_BASE = "def pick(xs, k):\n    ys = sorted(xs)\n    return ys[:k]\n" + TAIL
# diff 02 of the series: a keyword-only `rev`
K_OURS = (
    "def pick(xs, k, *, rev=False):\n    ys = sorted(xs, reverse=rev)\n    return ys[:k]\n" + TAIL
)
# the next release changes the same line (`key`): only a syntax merge keeps both
K_THEIRS = "def pick(xs, k, key=None):\n    ys = sorted(xs, key=key)\n    return ys[:k]\n" + TAIL
TESTS = """\
from bakery.testing import load_tree_module

k = load_tree_module("vllm.k")
a = load_tree_module("vllm.a")


def test_rev():
    assert k.pick([3, 1, 2], 2, rev=True) == [3, 2]


def test_a():
    assert a.A == 2
"""


def udiff(path: str, before: str, after: str) -> str:
    """``diff -u`` of one file, labelled ``a/PATH`` and ``b/PATH``."""
    lines = difflib.unified_diff(
        before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}", n=3
    )
    return "".join(lines)
