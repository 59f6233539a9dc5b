"""Hostile and malformed diffs: the catalogue in tests/hostile/, and inputs too big to keep.

Every case bakes one diff against a base tree full of traps (symlinks to a file, to a folder,
out of the tree, dangling, loops; CRLF, non-UTF-8 and newline-less files) and checks the
contract: the exit code; for a refusal, one ``error:`` line on stderr that names the diff
file and line, and no traceback; nothing written outside ``--out``; the pristine tree and
everything beside it unchanged; and for a bake, the exact resulting tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from tests.support.repos import git

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HOSTILE = Path(__file__).resolve().parent / "hostile"
CASES: list[dict[str, Any]] = tomllib.loads((HOSTILE / "catalogue.toml").read_text())["case"]
BY_ID = {c["id"]: c for c in CASES}
X_LINES = "abcdefghij"
#: Where an escaping diff would write, were it not refused.
ESCAPES = [
    Path("/tmp/bakery-hostile-escape.py"),
    Path("/tmp/bakery-ed-ran"),
    Path("/tmp/escape.py"),
]
#: Symlinks of the base tree: name -> target (kept as links, never followed).
LINKS = {
    "link.py": "x.py",
    "dirlink": "sub",
    "outdir": "../../outside",
    "loop": "loop",
    "loopa": "loopb",
    "loopb": "loopa",
    "dangling.py": "nowhere.py",
}


# --- the base tree and the run --------------------------------------------------------------


def base_tree(root: Path) -> Path:
    """root/tree (a local --vllm tree) and root/outside (what links point to)."""
    outside = root / "outside"
    outside.mkdir()
    (outside / "target.py").write_bytes(b"outside\n")
    vllm = root / "tree" / "vllm"
    (vllm / "sub").mkdir(parents=True)
    files = {
        "__init__.py": b"",
        "x.py": "".join(f"{c}\n" for c in X_LINES).encode(),
        "sub/y.py": b"one\ntwo\nthree\n",
        "empty.py": b"",
        "latin.py": b"caf\xe9 = 1\n\xff\xfe\n",
        "crlf.py": b"r1\r\nr2\r\nr3\r\n",
        "noeol.py": b"n1\nn2",
    }
    for rel, data in files.items():
        (vllm / rel).write_bytes(data)
        (vllm / rel).chmod(0o644)
    for name, target in LINKS.items():
        os.symlink(target, vllm / name)
    os.symlink(outside / "target.py", vllm / "outlink.py")
    return root / "tree"


def snapshot(root: Path, skip: set[str]) -> dict[str, tuple[object, ...]]:
    """Every entry under root (links not followed): kind, mode, content hash or target."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [
            d for d in dirnames if os.path.normpath(os.path.join(rel_dir, d)) not in skip
        ]
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.relpath(p, root))
            if rel in skip:
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                data = Path(p).read_bytes()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(data).hexdigest())
    return out


def make_series(root: Path, diffs: dict[str, bytes], toml: bool = True) -> Path:
    series = root / "series"
    (series / "diffs").mkdir(parents=True)
    if toml:
        (series / "series.toml").write_text('strip = 1\nroot = ""\n')
    for name, data in diffs.items():
        (series / "diffs" / name).write_bytes(data)
    return series


def bake(root: Path, series: Path, tree: Path) -> Result:
    from bakery.cli.app import app

    return CliRunner().invoke(
        app,
        [
            "apply",
            str(series),
            "--vllm",
            str(tree),
            "--out",
            str(root / "out"),
            "--json",
            str(root / "report.json"),
        ],
        env={"COLUMNS": "200"},
        catch_exceptions=False,
    )


def git_out(tree: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr!r}"
    return proc.stdout.decode("utf-8", "surrogateescape")


def error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def assert_no_traceback(result: Result) -> None:
    both = result.stdout + result.stderr
    assert "Traceback" not in both and 'File "' not in both, both[-2000:]


def assert_refused(
    result: Result, diff_name: str, line: int | None, message: str | None, code: int = 2
) -> str:
    """The contract's refusal: the exit code, one error line naming the diff and the line."""
    assert_no_traceback(result)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    errors = error_lines(result)
    assert len(errors) == 1, result.stderr
    where = f"{diff_name}:{line}: " if line is not None else f"{diff_name}: "
    assert where in errors[0], errors[0]
    if message:
        assert message in errors[0], errors[0]
    return errors[0]


def assert_baked_tree(out: Path) -> None:
    """A complete bake: the manifest's head is HEAD, nothing changed since, git agrees."""
    manifest = json.loads((out / ".bakery" / "manifest.json").read_text())
    assert git_out(out, "rev-parse", "HEAD").strip() == manifest["head"]
    assert git_out(out, "status", "--porcelain", "--untracked-files=all") == ""
    git_out(out, "fsck", "--no-progress")


def no_escape() -> None:
    for p in ESCAPES:
        assert not p.exists() and not p.is_symlink(), f"{p} was written"


# --- the catalogue ---------------------------------------------------------------------------


def _params() -> list[Any]:
    params = []
    for case in CASES:
        marks = [pytest.mark.xfail(reason=case["xfail"], strict=True)] if "xfail" in case else []
        # Without series.toml, bakery stats the diff's names to detect the layout first:
        # the path cases run both ways.
        layouts = ("toml", "detected") if case["id"].startswith("path-") else ("toml",)
        for layout in layouts:
            params.append(pytest.param(case, layout, id=f"{case['id']}-{layout}", marks=marks))
    return params


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("case", "layout"), _params())
def test_catalogue(case: dict[str, Any], layout: str, tmp_path: Path) -> None:
    """Each hostile input, with strip/root from series.toml (and for names, detected)."""
    root = tmp_path / "w"
    root.mkdir()
    tree = base_tree(root)
    name = f"01-{case['id']}.diff"
    series = make_series(
        root, {name: (HOSTILE / "diffs" / f"{case['id']}.diff").read_bytes()}, toml=layout == "toml"
    )
    skip = {"out", "report.json"}
    before = snapshot(tmp_path, {"w/out", "w/report.json"})

    result = bake(root, series, tree)

    assert_no_traceback(result)
    no_escape()
    report = json.loads((root / "report.json").read_text())
    # the cache is bakery's own place (it keeps the last-bake record there)
    after = snapshot(tmp_path, {"w/out", "w/report.json", "cache"})
    assert after == before, "something outside --out changed"
    assert not [p for p in root.iterdir() if p.name not in skip | {"tree", "outside", "series"}]
    code = case["exit"]
    if code == 2:
        err = assert_refused(result, name, case.get("line"), case.get("message"))
        assert report["status"] == "error"
        assert report["error"] and report["error"] in err
        assert not (root / "out").exists()
    elif code == 1:
        assert result.exit_code == 1, (result.stdout, result.stderr)
        assert report["status"] == "conflict"
        assert not (root / "out").exists()
    else:
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert report["status"] == "baked"
        out = root / "out"
        assert_baked_tree(out)
        for rel, text in case.get("files", {}).items():
            assert (out / rel).read_bytes() == text.encode(), rel
        for rel, hexdata in case.get("hex", {}).items():
            assert (out / rel).read_bytes() == bytes.fromhex(hexdata), rel
        for rel, mode in case.get("modes", {}).items():
            assert stat.S_IMODE((out / rel).stat().st_mode) == mode, rel
            assert git_out(out, "ls-files", "-s", "--", rel).startswith(f"100{mode:o} "), rel
        for rel in case.get("absent", []):
            assert not (out / rel).exists() and not (out / rel).is_symlink(), rel
            assert git_out(out, "ls-files", "--", rel) == "", rel
        for link, target in LINKS.items():  # copied as links, loops and all
            assert os.readlink(out / "vllm" / link) == target


def test_catalogue_is_complete() -> None:
    """Every diff in tests/hostile/diffs has a case, and every case its diff."""
    files = {p.stem for p in (HOSTILE / "diffs").glob("*.diff")}
    assert files == set(BY_ID)
    assert len(CASES) == len(BY_ID)
    readme = (HOSTILE / "README.md").read_text()
    missing = [c["id"] for c in CASES if f"`{c['id']}`" not in readme]
    assert not missing, f"not in tests/hostile/README.md: {missing}"


# --- through a real process: stderr as a terminal user sees it ----------------------------------


@pytest.mark.parametrize(
    "case_id",
    [
        "path-dotdot-new",
        "path-symlink-outside-dir",
        "hunk-truncated",
        "ed-script-shell",
        "binary-git",
    ],
)
def test_real_process_one_line(case_id: str, tmp_path: Path) -> None:
    case = BY_ID[case_id]
    tree = base_tree(tmp_path)
    name = f"01-{case_id}.diff"
    series = make_series(tmp_path, {name: (HOSTILE / "diffs" / f"{case_id}.diff").read_bytes()})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bakery",
            "apply",
            str(series),
            "--vllm",
            str(tree),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and f"{name}:{case['line']}: " in errors[0], proc.stderr
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*"))


# --- several diffs: the refusal names the right file, and nothing is written ------------------


def test_second_diff_bad_first_good(tmp_path: Path) -> None:
    tree = base_tree(tmp_path)
    good = (HOSTILE / "diffs" / "ok-two-files.diff").read_bytes()
    bad = (HOSTILE / "diffs" / "path-symlink-outside-file.diff").read_bytes()
    series = make_series(tmp_path, {"01-good.diff": good, "02-bad.diff": bad})
    before = snapshot(tmp_path, {"out", "report.json"})
    result = bake(tmp_path, series, tree)
    assert_refused(result, "02-bad.diff", 1, "symlink vllm/outlink.py")
    assert snapshot(tmp_path, {"out", "report.json"}) == before
    assert (tmp_path / "outside" / "target.py").read_bytes() == b"outside\n"


def test_later_diff_nests_in_file_created_earlier(tmp_path: Path) -> None:
    """A file created by one diff cannot become a folder in the next."""
    tree = base_tree(tmp_path)
    first = b"--- /dev/null\n+++ b/vllm/made.py\n@@ -0,0 +1 @@\n+x\n"
    second = b"--- /dev/null\n+++ b/vllm/made.py/inner.py\n@@ -0,0 +1 @@\n+y\n"
    series = make_series(tmp_path, {"01-a.diff": first, "02-b.diff": second})
    result = bake(tmp_path, series, tree)
    assert_refused(result, "02-b.diff", 1, "is a file, not a folder")
    assert not (tmp_path / "out").exists()


def test_diff_creates_file_over_folder_it_filled(tmp_path: Path) -> None:
    tree = base_tree(tmp_path)
    first = b"--- /dev/null\n+++ b/vllm/pkg/mod.py\n@@ -0,0 +1 @@\n+x\n"
    second = b"--- /dev/null\n+++ b/vllm/pkg\n@@ -0,0 +1 @@\n+y\n"
    series = make_series(tmp_path, {"01-a.diff": first, "02-b.diff": second})
    result = bake(tmp_path, series, tree)
    assert_refused(result, "02-b.diff", 1, "is a folder")


# --- pristine trees with traps ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_git_checkout_with_symlink_loop_bakes(tmp_path: Path) -> None:
    """A local git checkout holding symlink loops is copied link for link, never followed."""
    tree = base_tree(tmp_path)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "upstream"]):
        git(tree, *args)
    series = make_series(
        tmp_path, {"01-x.diff": (HOSTILE / "diffs" / "ok-two-files.diff").read_bytes()}
    )
    before = snapshot(tree, set())
    result = bake(tmp_path, series, tree)
    assert result.exit_code == 0, result.stderr
    assert snapshot(tree, set()) == before
    out = tmp_path / "out"
    assert_baked_tree(out)
    for link, target in LINKS.items():
        assert os.readlink(out / "vllm" / link) == target


def test_symlink_to_outside_as_root_folder(tmp_path: Path) -> None:
    """The vllm folder itself is a symlink out of the tree: refused, not followed."""
    tree = tmp_path / "tree"
    elsewhere = tmp_path / "elsewhere" / "vllm"
    elsewhere.mkdir(parents=True)
    (elsewhere / "x.py").write_text("".join(f"{c}\n" for c in X_LINES))
    tree.mkdir()
    os.symlink(elsewhere, tree / "vllm")
    series = make_series(
        tmp_path, {"01-x.diff": (HOSTILE / "diffs" / "bytes-no-final-newline.diff").read_bytes()}
    )
    result = bake(tmp_path, series, tree)
    assert_refused(result, "01-x.diff", 1, "symlink vllm")
    assert (elsewhere / "x.py").read_text().startswith("a\nb\n")


# --- too big to keep as files: bounded time and memory -----------------------------------------


def _huge_cases() -> dict[str, tuple[bytes, int | None, str | None]]:
    """name -> (diff, line named, part of the message)."""
    head = b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n"
    return {
        # 50 MB on one line, inside a hunk: refused in linear time.
        "line-50mb": (head + b"+" + b"B" * (50 << 20) + b"\n c\n", 6, "line longer than"),
        # 5 MB "Binary files " line: unidiff's binary pattern is quadratic on it.
        "binary-5mb": (b"Binary files " + b"a" * (5 << 20) + b"\n", 1, None),
        # 100 000 ed-like command lines: a forward scan from each was quadratic.
        "ed-lines-100k": (b"1a\n" * 100_000, 1, "no unified diff found"),
        # 100 000 hunks of prose-like "@@" lookalikes after a file header.
        "many-hunks": (
            b"--- a/vllm/x.py\n+++ b/vllm/x.py\n"
            + b"".join(b"@@ -%d,1 +%d,1 @@\n-x\n+y\n" % (i, i) for i in range(1, 100_001))
            + b"@@ -1,1 +1,1 @@\n-x\n+y\n",
            300_003,
            "overlaps or precedes",
        ),
        # 2 000 000 empty lines.
        "blank-2m": (b"\n" * 2_000_000, 1, "no unified diff found"),
    }


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(_huge_cases()))
def test_huge_inputs_refused_in_bounded_time(name: str, tmp_path: Path) -> None:
    from bakery.errors import DiffError
    from bakery.patch.parse import read_diff

    data, line, message = _huge_cases()[name]
    path = tmp_path / "01-huge.diff"
    path.write_bytes(data)
    with pytest.raises(DiffError) as info:
        read_diff(path)
    assert info.value.line == line
    if message:
        assert message in info.value.problem
    assert len(str(info.value)) < 400  # one short line, not the 50 MB


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_huge_line_through_cli(tmp_path: Path) -> None:
    """The 50 MB line through the whole CLI: one line on stderr, nothing written."""
    tree = base_tree(tmp_path)
    data, line, _ = _huge_cases()["line-50mb"]
    series = make_series(tmp_path, {"01-huge.diff": data})
    result = bake(tmp_path, series, tree)
    err = assert_refused(result, "01-huge.diff", line, "line longer than")
    assert len(err) < 400
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(60)
def test_big_but_valid_diff_applies(tmp_path: Path) -> None:
    """20 000 hunks against a 60 000-line file: linear enough to finish quickly."""
    from bakery.patch.engine import apply_file
    from bakery.patch.parse import read_diff

    n = 20_000
    old = [f"line {i}" for i in range(3 * n)]
    new = list(old)
    hunks = []
    for k in range(n):
        i = 3 * k + 1  # 0-based index of the changed line
        new[i] = f"LINE {i}"
        hunks.append(
            f"@@ -{i},3 +{i},3 @@\n {old[i - 1]}\n-{old[i]}\n+{new[i]}\n {old[i + 1]}\n"
            if i + 1 < len(old)
            else ""
        )
    text = "--- a/vllm/big.py\n+++ b/vllm/big.py\n" + "".join(hunks)
    diff = read_diff(tmp_path / "big.diff", text.encode())
    diff.resolve_paths(1, "")
    res = apply_file(diff.files[0], "".join(f"{t}\n" for t in old).encode())
    assert res.ok
    assert res.content == "".join(f"{t}\n" for t in new).encode()


# --- where --out may not go ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        "tree/vllm/baked",
        "tree/vllm/new/deeper/baked",
        "tree",
        "tree/vllm",
        "outside/target.py",
        "w",
    ],
)
def test_out_never_inside_the_pristine_tree_or_over_files(where: str, tmp_path: Path) -> None:
    """--out inside the pristine tree, on it, or on a file or a folder of other things: one
    line, exit 2, and nothing created or changed anywhere (not even the parents of --out)."""
    tree = base_tree(tmp_path)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "keep.txt").write_text("mine\n")
    series = make_series(
        tmp_path, {"01-x.diff": (HOSTILE / "diffs" / "ok-two-files.diff").read_bytes()}
    )
    before = snapshot(tmp_path, set())
    from bakery.cli.app import app

    result = CliRunner().invoke(
        app,
        ["apply", str(series), "--vllm", str(tree), "--out", str(tmp_path / where)],
        env={"COLUMNS": "200"},
        catch_exceptions=False,
    )
    assert_no_traceback(result)
    assert result.exit_code == 2, result.stderr
    assert len(error_lines(result)) == 1, result.stderr
    assert snapshot(tmp_path, set()) == before
