"""`bakery verify` and interrupts through the command line, on a tiny baked tree (fast: the
series' own tests are two lines of pytest, not the dcp2 kernels).

verify exits 0 when the series' tests pass on the tree, 1 when one fails or none ran, 2 when
it cannot run (no tests/ folder, no tree); it says when the tree was edited since the bake.
An interrupted bake exits 130 and leaves nothing behind, through the real entry point.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.trees import Tiny, write_files

Cli = Callable[..., Result]

KERNEL = "vllm/model_executor/k.py"
#: The tiny series' test: the bake's result is in the tree (f2 returns 2 + 1).
TREE_TEST = """
import runpy


def test_the_series_is_baked_in(baked_tree):
    assert runpy.run_path(str(baked_tree / "vllm/model_executor/k.py"))["f2"]() == 3
"""


@pytest.fixture
def baked(cli: Cli, tiny: Tiny, tmp_path: Path) -> Path:
    write_files(tiny.series / "tests", {"test_tree.py": TREE_TEST})
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out")
    assert r.exit_code == 0, r.output
    return tmp_path / "out"


def _one_error_line(r: Result) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.output
    return lines[0]


def test_verify_exit_codes(cli: Cli, tiny: Tiny, baked: Path) -> None:
    r = cli("verify", "demo", "--interpret")  # the tree baked last
    assert r.exit_code == 0, r.output
    assert "verified: 1 passed" in r.stderr and "edited since" not in r.stderr
    r = cli("verify", "demo", "--tree", baked, "--interpret", "--", "-k", "no_such_test")
    assert r.exit_code == 1, r.output
    assert "not verified: no tests ran" in r.stderr
    k = baked / KERNEL
    k.write_text(k.read_text().replace("return 2 + 1", "return 2 + 2"))
    r = cli("verify", "demo", "--tree", baked, "--interpret")
    assert r.exit_code == 1, r.output
    # a test that ran and failed is a failure, not a verify that could not run
    assert "tests failed: 1 failed" in r.stderr and "not verified" not in r.stderr


def test_verify_names_files_edited_since_the_bake(cli: Cli, baked: Path) -> None:
    k = baked / KERNEL
    k.write_text(k.read_text() + "\n# a fix, tried before refresh\n")
    r = cli("verify", "demo", "--tree", baked, "--interpret")
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    note = lines.index(
        "the tree was edited since it was baked; these files differ from the bake's manifest:"
    )
    assert lines[note + 1].strip() == KERNEL
    assert "verified: 1 passed" in r.stderr


@pytest.mark.parametrize("case", ["no tests folder", "no such tree", "no bake yet", "no tree"])
def test_verify_that_cannot_run_exits_2(cli: Cli, tiny: Tiny, tmp_path: Path, case: str) -> None:
    if case == "no tests folder":
        assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 0
        r, words = cli("verify", "demo", "--interpret"), "has no tests/ folder"
    elif case == "no such tree":
        write_files(tiny.series / "tests", {"test_tree.py": TREE_TEST})
        r, words = cli("verify", "demo", "--tree", "nowhere", "--interpret"), "no such folder"
    elif case == "no bake yet":
        write_files(tiny.series / "tests", {"test_tree.py": TREE_TEST})
        r, words = cli("verify", "demo", "--interpret"), "no baked tree for demo"
    else:  # a folder that is not a vLLM tree
        write_files(tiny.series / "tests", {"test_tree.py": TREE_TEST})
        (tmp_path / "empty").mkdir()
        r, words = cli("verify", "demo", "--tree", "empty", "--interpret"), "not a vLLM tree"
    assert r.exit_code == 2, r.output
    assert words in _one_error_line(r)


# --- interrupted: 130 through the real entry point (no real signal from outside) --------------


@pytest.fixture
def main_argv(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., int]]:
    """Run ``bakery.cli.start.main()`` (the console script) with argv; its exit code."""
    from bakery.cli.start import main

    saved = signal.getsignal(signal.SIGTERM)

    def run(*args: str | Path) -> int:
        monkeypatch.setattr(sys, "argv", ["bakery", *map(str, args)])
        with pytest.raises(SystemExit) as info:
            main()
        code = info.value.code
        return code if isinstance(code, int) else 1

    yield run
    signal.signal(signal.SIGTERM, saved)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_bake_exits_130_and_leaves_nothing(
    tiny: Tiny,
    tmp_path: Path,
    main_argv: Callable[..., int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    """Interrupted once the baked tree is written into its staging folder, before it
    takes --out's place: Ctrl-C (KeyboardInterrupt), or SIGTERM sent to bakery itself."""
    import os

    from bakery.bake import tree

    write_tree = tree.write_tree

    def interrupted(*args: object, **kwargs: object) -> None:
        write_tree(*args, **kwargs)  # type: ignore[arg-type]
        if how == "SIGINT":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)  # main() turns it into KeyboardInterrupt

    monkeypatch.setattr(tree, "write_tree", interrupted)
    out = tmp_path / "out"
    assert main_argv("apply", "demo", "--vllm", tiny.src, "--out", out) == 130
    assert "Traceback" not in capsys.readouterr().err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if ".bakery-" in p.name] == []
    monkeypatch.setattr(tree, "write_tree", write_tree)
    assert main_argv("apply", "demo", "--vllm", tiny.src, "--out", out) == 0
    assert (out / ".bakery" / "manifest.json").is_file()
