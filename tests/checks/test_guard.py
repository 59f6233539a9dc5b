"""Issue 19: a hunk that applies is not yet right. The ambiguity guard (old text found in
more than one place), the placement check (the hunk lands in another definition than on
the base release), hunk contracts (what the hunk's code calls changed upstream), and
``--strict``, on constructed trees."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from bakery.bake.merge import Fallback
from bakery.bake.plan import plan
from bakery.bake.strict import needs_review, strict_problems
from bakery.cli.app import app
from bakery.model import records
from bakery.model.report import DiffResult
from bakery.model.results import Moved
from bakery.patch.engine import Outcome, apply_file
from bakery.sources.pristine import Pristine
from tests.support.gnupatch import assert_same_as_gnu, fpatch, needs_patch


def _udiff(path: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    )


def _tree(root: Path, files: dict[str, str]) -> Pristine:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return Pristine(root.resolve(), root.name, str(root), None)


def _series(tmp: Path, diffs: dict[str, str], base: str = "1.0.0") -> Path:
    folder = tmp / "series"
    (folder / "diffs").mkdir(parents=True)
    (folder / "series.toml").write_text(f'base = "{base}"\nroot = ""\nstrip = 1\n')
    for name, text in diffs.items():
        (folder / "diffs" / name).write_text(text)
    return folder


def _plan(tmp: Path, base_files: dict[str, str], diff: str, target_files: dict[str, str]) -> Any:
    from bakery.patch.series import load_series

    folder = _series(tmp, {"01-change.diff": diff})
    base = _tree(tmp / "1.0.0", base_files)
    target = _tree(tmp / "2.0.0", target_files)
    series = load_series(str(folder))
    fallback = Fallback(series, target, base, merge=True)
    return plan(series, target, fallback=fallback).report


# --- ambiguity --------------------------------------------------------------------------------

BODY = "    total = 0\n    for x in items:\n        total += x\n    return total\n"


@needs_patch
def test_three_identical_bodies_change_of_the_third_is_ambiguous(tmp_path: Path) -> None:
    old = "header\n" + "".join(f"# f{i}\n{BODY}" + "\n" * 4 for i in (1, 2, 3)) + "end\n"
    lines = old.splitlines(keepends=True)
    # the third body's "total += x" line, changed; 3 lines of context are all body lines
    third = [i for i, t in enumerate(lines) if t == "        total += x\n"][2]
    new_lines = list(lines)
    new_lines[third] = "        total += 2 * x\n"
    diff = "".join(difflib.unified_diff(lines, new_lines, "a/m.py", "b/m.py", n=2))
    fp = fpatch(diff)
    res = apply_file(fp, old.encode())
    h = res.hunks[0]
    assert h.status is Outcome.AMBIGUOUS and res.ok
    first_two = [i + 1 - 2 for i, t in enumerate(lines) if t == "        total += x\n"][:2]
    assert h.also_matches == first_two  # the other two bodies, named by line
    assert h.line == third + 1 - 2  # GNU patch's place: the stated one
    assert res.content is not None and res.content.decode().splitlines()[third] == (
        "        total += 2 * x"
    )
    assert_same_as_gnu(tmp_path, old.encode(), diff.encode(), res)
    assert records.plain(h)["also_matches"] == first_two
    # --strict refuses it, and it is never a plain pass
    diffs = [
        DiffResult.from_json(
            {"name": "d", "files": [{"path": "m.py", "hunks": [records.plain(h)]}]}
        )
    ]
    assert strict_problems(diffs) == [f"d: m.py: hunk 1 (line {h.line}): ambiguous"]
    assert needs_review(diffs)


def test_unique_hunk_is_not_ambiguous() -> None:
    old = "".join(f"line {i}\n" for i in range(50))
    new = old.replace("line 20\n", "line twenty\n")
    fp = fpatch(_udiff("m.py", old, new))
    res = apply_file(fp, old.encode())
    assert [h.status for h in res.hunks] == [Outcome.APPLIED]
    assert res.hunks[0].also_matches == []


# --- placement ----------------------------------------------------------------------------------


def _fn(name: str, y: str, head: str) -> str:
    return (
        f"def {name}():\n    {head} = 0\n    m = 1\n    n = 1\n    x = 1\n"
        f"    y = {y}\n    z = 3\n    w = 4\n    v = 5\n    return x\n\n\n"
    )


def test_hunk_landing_in_another_function_is_moved_def(tmp_path: Path) -> None:
    # On the base release, b's body is the only one with "y = 2"; the series changes it.
    # Upstream then rewrote b and made a's body look like b's old one: the hunk applies
    # (at an offset), but in a.
    base = "import os\n\n\n" + _fn("a", "22", "p") + _fn("b", "2", "r")
    ours = base.replace("    y = 2\n", "    y = 20\n")
    target = "import os\n\n\n" + _fn("a", "2", "p") + _fn("b", "7", "r")
    report = _plan(
        tmp_path, {"vllm/m.py": base}, _udiff("vllm/m.py", base, ours), {"vllm/m.py": target}
    )
    h = report.diffs[0].files[0].hunks[0]
    assert h.status is Outcome.OFFSET
    assert h.moved_def == Moved("b", "a")
    assert records.plain(h)["moved_def"] == {"base": "b", "target": "a"}
    warnings = report.diffs[0].warnings
    assert any(
        w.startswith("moved-def: vllm/m.py: hunk 1 changes b on 1.0.0 but lands in a")
        for w in warnings
    )
    problems = strict_problems(report.diffs)
    assert problems and "moved-def (b -> a)" in problems[0]


def test_hunk_in_its_own_function_is_not_moved(tmp_path: Path) -> None:
    base = "import os\n\n\n" + _fn("a", "22", "p") + _fn("b", "2", "r")
    ours = base.replace("    y = 2\n", "    y = 20\n")
    target = "import sys\nimport os\n\n\n" + _fn("a", "22", "p") + _fn("b", "2", "r")
    report = _plan(
        tmp_path, {"vllm/m.py": base}, _udiff("vllm/m.py", base, ours), {"vllm/m.py": target}
    )
    h = report.diffs[0].files[0].hunks[0]
    assert h.status is Outcome.OFFSET and h.moved_def is None
    assert not [w for w in report.diffs[0].warnings if w.startswith("moved-def")]


# --- contracts ----------------------------------------------------------------------------------

KERNEL = """import triton
import triton.language as tl


@triton.jit
def _block_scores_kernel(x, out, n, BLOCK: tl.constexpr, PIN: tl.constexpr = True):
    pass
"""

USER = """from vllm.kernels import _block_scores_kernel


def run(x, out, n):
    grid = (n,)
    _block_scores_kernel[grid](x, out, n, BLOCK=128)
    return out
"""


def test_clean_hunk_whose_kernel_signature_changed_upstream(tmp_path: Path) -> None:
    # The series passes PIN= by keyword; upstream renamed it PIN_NEWEST in another file.
    # The hunk applies cleanly (its file did not change), and the contract says why it
    # will break anyway.
    ours = USER.replace("BLOCK=128)", "BLOCK=128, PIN=False)")
    diff = _udiff("vllm/user.py", USER, ours)
    base = {"vllm/kernels.py": KERNEL, "vllm/user.py": USER, "vllm/__init__.py": ""}
    target = {**base, "vllm/kernels.py": KERNEL.replace("PIN: tl", "PIN_NEWEST: tl")}
    report = _plan(tmp_path, base, diff, target)
    h = report.diffs[0].files[0].hunks[0]
    assert h.status is Outcome.APPLIED and report.ok
    assert "_block_scores_kernel[grid](..., BLOCK=, PIN=)" in h.uses
    warnings = [w for w in report.diffs[0].warnings if w.startswith("contract:")]
    assert len(warnings) == 1
    w = warnings[0]
    assert "upstream changed `_block_scores_kernel` (1.0.0 -> 2.0.0)" in w
    assert "PIN: constexpr=..." in w and "PIN_NEWEST: constexpr=..." in w
    assert "passes PIN= by keyword, which is no longer a parameter" in w
    assert w.endswith("(hunk 1 uses _block_scores_kernel[grid](..., BLOCK=, PIN=))")


def test_contract_names_a_function_that_is_gone_and_a_reordered_one(tmp_path: Path) -> None:
    lib = (
        "def helper(a, b):\n    return a + b\n\n\ndef scale(a, factor=2):\n    return a * factor\n"
    )
    user = "from vllm.lib import helper, scale\n\n\ndef go():\n    return 0\n"
    ours = user.replace("return 0", "return helper(1, 2) + scale(3)")
    base = {"vllm/lib.py": lib, "vllm/user.py": user}
    target = {
        "vllm/lib.py": "def helper(b, a):\n    return a + b\n",
        "vllm/user.py": user,
    }
    report = _plan(tmp_path, base, _udiff("vllm/user.py", user, ours), target)
    text = "\n".join(report.diffs[0].warnings)
    assert "`scale` (function) is gone upstream (1.0.0 -> 2.0.0)" in text
    assert "upstream changed `helper` (1.0.0 -> 2.0.0): function(a, b) -> function(b, a)" in text
    assert "its positional arguments now fill other parameters (a -> b, b -> a)" in text


def test_unchanged_names_and_foreign_names_give_no_contract_warning(tmp_path: Path) -> None:
    user = "import torch\n\n\ndef go(x):\n    return x\n"
    ours = user.replace("return x", "return torch.relu(x) + len(x)")
    base = {"vllm/user.py": user, "vllm/lib.py": "def f():\n    pass\n"}
    target = {**base, "vllm/lib.py": "def f(a):\n    pass\n"}
    report = _plan(tmp_path, base, _udiff("vllm/user.py", user, ours), target)
    assert report.ok and report.diffs[0].warnings == []
    assert report.diffs[0].files[0].hunks[0].uses == []


# --- --strict on the command line -------------------------------------------------------------


def test_strict_fails_an_offset_hunk_and_reports_ambiguity_in_json(tmp_path: Path) -> None:
    old = "".join(f"line {i}\n" for i in range(40))
    folder = tmp_path / "s"
    (folder / "diffs").mkdir(parents=True)
    (folder / "diffs" / "01-x.diff").write_text(
        _udiff("m.txt", old, old.replace("line 20\n", "line twenty\n"))
    )
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "m.txt").write_text("new\n" + old)  # one line more: an offset
    runner = CliRunner()
    ok = runner.invoke(app, ["check", str(folder), "--vllm", str(tree)])
    assert ok.exit_code == 0, ok.output
    strict = runner.invoke(app, ["check", str(folder), "--vllm", str(tree), "--strict"])
    assert strict.exit_code == 1
    assert "strict:" in strict.output and "offset" in strict.output
    # the same block twice: ambiguous, in the JSON report with the other line
    block = "".join(old.splitlines(keepends=True)[15:26])
    (tree / "m.txt").write_text(old + block)
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["check", str(folder), "--vllm", str(tree), "--json", str(out)])
    assert res.exit_code == 0 and "ambiguous" in res.output
    hunk = json.loads(out.read_text())["diffs"][0]["files"][0]["hunks"][0]
    assert hunk["status"] == "ambiguous" and hunk["also_matches"] == [43]  # "line 17" of the copy


def test_a_merged_hunk_is_never_a_plain_pass_in_the_matrix_summary() -> None:
    from bakery.reports.matrix import Row, to_markdown

    def row(version: str, status: str) -> Row:
        hunk = {"index": 1, "status": status, "line": 1, "offset": 0, "fuzz": 0}
        diff: dict[str, object] = {"name": "01.diff", "files": [{"path": "m.py", "hunks": [hunk]}]}
        return Row(version, "baked", diffs=[DiffResult.from_json(diff)])

    md = to_markdown("s", [row("1.0", "applied"), row("1.1", "merged"), row("1.2", "ambiguous")])
    lines = {ln.split(" | ")[0].strip("| "): ln for ln in md.splitlines() if ln.startswith("| 1.")}
    assert "✅ baked" in lines["1.0"]
    assert "⚠️ baked" in lines["1.1"] and "✅" not in lines["1.1"]
    assert "⚠️ baked" in lines["1.2"] and "1 ambiguous" in lines["1.2"]


def test_a_port_whose_call_fits_the_new_signature_resolves_the_contract(tmp_path: Path) -> None:
    from bakery.patch.series import load_series

    ours = USER.replace("BLOCK=128)", "BLOCK=128, PIN=False)")
    base = {"vllm/kernels.py": KERNEL, "vllm/user.py": USER, "vllm/__init__.py": ""}
    renamed = KERNEL.replace("PIN: tl", "PIN_NEWEST: tl")
    target = {**base, "vllm/kernels.py": renamed}
    folder = _series(tmp_path, {"01-change.diff": _udiff("vllm/user.py", USER, ours)})
    port = tmp_path / "port"
    port.mkdir()
    fixed = USER.replace("BLOCK=128)", "BLOCK=128, PIN_NEWEST=False)")
    broken = USER.replace("BLOCK=128)", "BLOCK=128, PIN=False)")
    b, t = _tree(tmp_path / "1.0.0", base), _tree(tmp_path / "2.0.0", target)
    for text, verdict in ((fixed, "resolved by the port"), (broken, "does not fit it either")):
        (port / "01-change.diff").write_text(_udiff("vllm/user.py", USER, text))
        series = load_series(str(folder)).with_port(port)
        report = plan(series, t, fallback=Fallback(series, t, b, merge=True)).report
        (w,) = [w for w in report.diffs[0].warnings if w.startswith("contract:")]
        assert "upstream changed `_block_scores_kernel` (1.0.0 -> 2.0.0)" in w and verdict in w


def test_enclosing_definitions_are_qualified() -> None:
    from bakery.checks.pyindex import index

    src = b"X = 1\n\n\nclass A:\n    def m(self):\n        return 1\n\n\ndef f():\n    pass\n"
    idx = index(src)
    assert [idx.enclosing(n) for n in (1, 4, 6, 10)] == ["<module>", "A", "A.m", "f"]
    assert idx.names["A"].show() == "class" and idx.names["f"].show() == "function()"
