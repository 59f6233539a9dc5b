"""``diff-ports`` is bounded (issue 46): pairing two hunks costs at most
``CHAR_CAP``-sized character work or ``LINE_CAP``-sized line work, and one run spends at
most ``WORK_CAP`` element comparisons on exact ratios; the pairs stay right on small cases.

Two 600-line hunks took more than a minute with difflib over characters and no autojunk.
The bound is asserted on the work done (the scorer's counters), never on wall time.
"""

from __future__ import annotations

import random

import pytest

from bakery.porting import review


def _diff(path: str, hunks: list[tuple[list[str], list[str]]]) -> bytes:
    """A unified diff of one file with these (old lines, new lines) hunks, far apart."""
    out = [f"--- a/{path}", f"+++ b/{path}"]
    start = 1
    for old, new in hunks:
        out.append(f"@@ -{start},{len(old)} +{start},{len(new)} @@")
        out += [f"-{x}" for x in old] + [f"+{x}" for x in new]
        start += len(old) + 1000
    return ("\n".join(out) + "\n").encode()


def _lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = [
        "def",
        "return",
        "self",
        "if",
        "else",
        "for",
        "in",
        "range",
        "len",
        "import",
        "from",
        "class",
        "None",
        "True",
    ]
    return [
        f"{' '.join(rng.choice(words) for _ in range(rng.randint(3, 9)))}  # {seed}-{i}"
        for i in range(n)
    ]


def _edit(lines: list[str], every: int) -> list[str]:
    return [x + " edited" if i % every == 0 else x for i, x in enumerate(lines)]


def _view(left: bytes, right: bytes, scorer: review.Scorer) -> tuple[list[str], review.PortView]:
    view = review.compare(
        {"01-a.diff": left}, {"01-a.diff": right}, review.PortView("1.0", "l", "r"), scorer
    )
    return [p.mark for f in view.files for p in f.pairs], view


def test_two_600_line_hunks_are_compared_by_lines_within_the_cap() -> None:
    old = _lines(600, 1)
    left = _diff("vllm/x.py", [(old, _lines(600, 2))])
    right = _diff("vllm/x.py", [(old, _edit(_lines(600, 2), 3))])  # a third of the + lines
    scorer = review.Scorer()
    marks, _ = _view(left, right, scorer)
    assert marks == ["!"]  # paired, as the changed hunk it is
    # by lines (1,200 each), not by characters (about 40,000 each)
    assert scorer.longest == 1200
    assert scorer.spent == 1200 * 1200 <= review.WORK_CAP


def test_a_run_never_spends_more_than_its_budget() -> None:
    """Many near-alike large hunks: the exact ratios stop at the budget, every hunk is
    still paired (by multisets of lines), and the work done never passes the budget."""
    hunks = [(_lines(300, s), _lines(300, s + 100)) for s in range(8)]
    edited = [(o, _edit(n, 4)) for o, n in hunks]
    budget = 3 * 600 * 600
    scorer = review.Scorer(left=budget)
    marks, _ = _view(_diff("vllm/x.py", hunks), _diff("vllm/x.py", edited), scorer)
    assert marks == ["!"] * 8
    assert 0 < scorer.spent <= budget
    assert scorer.left == budget - scorer.spent


@pytest.mark.parametrize("n", [2500, 20000])
def test_hunks_above_the_line_cap_cost_no_quadratic_work(n: int) -> None:
    old = _lines(n, 5)
    left = _diff("vllm/x.py", [(old, _lines(n, 6))])
    right = _diff("vllm/x.py", [(old, _edit(_lines(n, 6), 5))])
    scorer = review.Scorer()
    marks, _ = _view(left, right, scorer)
    assert marks == ["!"]
    assert scorer.spent == 0  # multisets of lines only: linear


def test_small_hunks_are_still_compared_by_characters() -> None:
    """A line edited on both sides still pairs (characters, not lines: by lines the two
    changes share nothing), and an unrelated change does not pair."""
    left = _diff("vllm/x.py", [(["def pick(xs, k):"], ["def pick(xs, k, key=None):"])])
    right = _diff(
        "vllm/x.py",
        [(["def pick(xs, k, *, rev=False):"], ["def pick(xs, k, key=None, *, rev=False):"])],
    )
    scorer = review.Scorer()
    marks, view = _view(left, right, scorer)
    assert marks == ["!"]
    assert 0 < scorer.longest <= review.CHAR_CAP
    pair = view.files[0].pairs[0]
    assert "+-def pick(xs, k, *, rev=False):" in pair.interdiff

    other = _diff("vllm/x.py", [(["import os"], ["import sys, json, re  # something else"])])
    marks, _ = _view(left, other, review.Scorer())
    assert marks == [">", "<"]


def test_equal_changes_pair_exactly_in_order_without_scoring() -> None:
    a, b = (["x = 1"], ["x = 2"]), (["y = 1"], ["y = 2"])
    scorer = review.Scorer()
    marks, view = _view(_diff("vllm/x.py", [a, b, a]), _diff("vllm/x.py", [b, a, a]), scorer)
    assert marks == ["=", "=", "="]
    assert [(p.left, p.right) for p in view.files[0].pairs] == [(2, 1), (1, 2), (3, 3)]
    assert scorer.spent == 0


def test_the_most_alike_of_several_is_chosen() -> None:
    base = _lines(20, 9)
    near, far = _edit(base, 10), _edit(base, 2)
    left = _diff("vllm/x.py", [(["a"], far), (["b"], near)])
    right = _diff("vllm/x.py", [(["c"], base)])
    marks, view = _view(left, right, review.Scorer())
    assert marks == ["<", "!"]
    assert view.files[0].pairs[1].left == 2  # the nearer of the two


def test_the_interdiff_of_large_hunks_is_trimmed_or_told_in_one_line() -> None:
    """Two 20,000-line hunks that differ in one line show that line (their shared ends
    are not compared); hunks that differ all through show one line, not a minute of
    difflib."""
    old, new = _lines(20000, 7), _lines(20000, 8)
    one = list(new)
    one[12345] = "the one line the port changed"
    _, view = _view(
        _diff("vllm/x.py", [(old, new)]), _diff("vllm/x.py", [(old, one)]), review.Scorer()
    )
    inter = view.files[0].pairs[0].interdiff
    assert inter[0] == "@@ -32345,3 +32345,3 @@"  # the hunk's own line numbers
    assert f"-+{new[12345]}" in inter and "++the one line the port changed" in inter
    assert len(inter) == 5

    _, view = _view(
        _diff("vllm/x.py", [(old, new)]),
        _diff("vllm/x.py", [(old, _edit(new, 2))]),
        review.Scorer(),
    )
    (line,) = view.files[0].pairs[0].interdiff
    assert "too long to compare here" in line
