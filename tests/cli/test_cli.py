"""bakery's command line on tiny trees and local git repos (typer's CliRunner)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery import __version__
from tests.support.repos import commits, git, git_repo
from tests.support.series import make_series, udiff
from tests.support.trees import Tiny, make_tiny, tree_digest, write_files

Cli = Callable[..., Result]

HUNK_KEYS = {"index", "status", "line", "offset", "fuzz"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def hunks(report: dict) -> list[tuple[str, str, int, str, int]]:
    return [
        (d["name"], f["path"], h["index"], h["status"], h["line"])
        for d in report["diffs"]
        for f in d["files"]
        for h in f["hunks"]
    ]


def no_staging_left(parent: Path) -> None:
    assert [p.name for p in parent.iterdir() if ".bakery-" in p.name] == []


def names_hunk(output: str, path: str, index: int, line: int) -> bool:
    """Some line of the output names the file, the hunk and its line."""
    pattern = re.compile(rf"{re.escape(path)}\b.*\bhunks? {index}\b.*\b{line}\b")
    return any(pattern.search(ln) for ln in output.splitlines())


def break_hunk(tiny: Tiny) -> None:
    """Change the source so that the kernel diff's second hunk no longer applies."""
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("    return 14\n", "    return 14  # upstream\n"))


# --- apply -------------------------------------------------------------------------------------


def test_apply_bakes_a_git_tree(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", out)
    assert r.exit_code == 0, r.output
    assert "baked" in r.stdout
    for rel, content in tiny.baked.items():
        assert (
            (out / rel).read_bytes() == content if content is not None else not (out / rel).exists()
        )
    # modes: the git mode change applied, others kept
    assert stat.S_IMODE((out / "vllm/tools/run.sh").stat().st_mode) == 0o644
    assert stat.S_IMODE((out / "vllm/model_executor/new.py").stat().st_mode) == 0o644
    # untouched files are copied as they are
    assert (out / "setup.py").read_bytes() == (tiny.src / "setup.py").read_bytes()

    log = commits(out)
    assert [s for _, s, _ in log] == ["pristine vLLM tree", *tiny.diffs]
    for (_, _, body), name in zip(log[1:], tiny.diffs, strict=True):
        assert body == f"Bakery-Diff-Sha256: {sha256(tiny.series / 'diffs' / name)}"
    # the first commit is the pristine tree, byte for byte
    first = log[0][0]
    assert (
        git(out, "show", f"{first}:vllm/model_executor/k.py")
        == (tiny.src / "vllm/model_executor/k.py").read_text()
    )
    assert git(out, "ls-tree", "-r", "--name-only", first).split() == sorted(
        str(p.relative_to(tiny.src)) for p in tiny.src.rglob("*") if p.is_file()
    )
    assert "100644 " in git(out, "ls-tree", "HEAD", "vllm/tools/run.sh")
    assert git(out, "status", "--porcelain") == ""  # the manifest is not an untracked file

    manifest = load(out / ".bakery" / "manifest.json")
    assert manifest["status"] == "baked"
    assert manifest["series"]["name"] == "demo"
    assert manifest["bakery"] == __version__
    vllm = manifest["vllm"]
    assert {k: vllm[k] for k in ("version", "source")} == {
        "version": None,
        "source": str(tiny.src.resolve()),
    }
    # a local tree's sha256 is its file listing's; it declares no release, so it is its own
    ident = vllm["identity"]
    assert vllm["sha256"] == ident["tree_sha256"] and len(vllm["sha256"]) == 64
    assert ident["pristine"] is False and ident["claims"] is None
    assert ident["version"] == f"0+local.{vllm['sha256'][:12]}"
    assert manifest["head"] == log[-1][0] and manifest["pristine_commit"] == first
    assert [d["sha256"] for d in manifest["diffs"]] == [
        sha256(tiny.series / "diffs" / n) for n in tiny.diffs
    ]
    assert [d["commit"] for d in manifest["diffs"]] == [c for c, _, _ in log[1:]]
    assert all(h[3] == "applied" for h in hunks(manifest))
    no_staging_left(tmp_path)


def test_apply_json_report_has_the_contract_shape(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    rep = load(tmp_path / "r.json")
    assert {"status", "error", "series", "vllm", "port", "out", "diffs"} <= set(rep)
    assert rep["status"] == "baked" and rep["error"] is None and rep["port"] is None
    assert rep["out"] == "out"
    assert rep["series"]["name"] == "demo"
    assert Path(rep["series"]["path"]).resolve() == tiny.series.resolve()
    assert set(rep["vllm"]) == {"version", "source", "sha256", "identity"}
    assert {"version", "claims", "pristine", "compared_with", "differs", "paths"} <= set(
        rep["vllm"]["identity"]
    )
    assert [d["name"] for d in rep["diffs"]] == tiny.diffs
    for d in rep["diffs"]:
        assert {"name", "sha256", "status", "files"} <= set(d)
        for f in d["files"]:
            assert {"path", "status", "hunks"} <= set(f)
            for h in f["hunks"]:
                assert set(h) >= HUNK_KEYS
    assert hunks(rep) == [
        ("01-kernel.diff", "vllm/model_executor/k.py", 1, "applied", 3),
        ("01-kernel.diff", "vllm/model_executor/k.py", 2, "applied", 51),
        ("2-files.diff", "vllm/model_executor/new.py", 1, "applied", 1),
        ("2-files.diff", "vllm/old.py", 1, "applied", 1),
        ("2-files.diff", "vllm/tools/run.sh", 1, "applied", 1),
        ("10-again.diff", "vllm/model_executor/k.py", 1, "applied", 3),
    ]


def test_apply_reports_offsets(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text("# header\n# lines\n" + k.read_text())
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    rep = load(tmp_path / "r.json")
    kernel = rep["diffs"][0]["files"][0]
    assert kernel["status"] == "offset"
    assert [(h["status"], h["line"], h["offset"]) for h in kernel["hunks"]] == [
        ("offset", 5, 2),
        ("offset", 53, 2),
    ]
    assert "offset" in r.stdout


def test_default_out_is_build_series_label(cli: Cli, tiny: Tiny, home: Path) -> None:
    r = cli("apply", "demo", "--vllm", tiny.src)
    assert r.exit_code == 0, r.output
    assert (home / "build" / "demo-src" / ".bakery" / "manifest.json").is_file()


def test_conflict_writes_nothing_and_names_every_failed_hunk(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    break_hunk(tiny)
    (tiny.src / "vllm/old.py").write_text("changed upstream\n")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--json", "r.json")
    assert r.exit_code == 1, r.output
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "out.failed").exists()
    no_staging_left(tmp_path)
    assert names_hunk(r.stdout, "vllm/model_executor/k.py", 2, 51)
    assert names_hunk(r.stdout, "vllm/old.py", 1, 1)
    assert "does not apply" in r.stdout
    rep = load(tmp_path / "r.json")
    assert rep["status"] == "conflict" and rep["out"] is None
    failed = [h for h in hunks(rep) if h[3] == "failed"]
    assert failed == [
        ("01-kernel.diff", "vllm/model_executor/k.py", 2, "failed", 51),
        ("2-files.diff", "vllm/old.py", 1, "failed", 1),
    ]
    assert rep["diffs"][0]["status"] == "failed"


def test_keep_failed_writes_the_attempt_with_rej_files(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    break_hunk(tiny)
    r = cli(
        "apply", "demo", "--vllm", tiny.src, "--out", "out", "--keep-failed", "--json", "r.json"
    )
    assert r.exit_code == 1, r.output
    assert not (tmp_path / "out").exists()
    failed = tmp_path / "out.failed"
    k = (failed / "vllm/model_executor/k.py").read_text()
    # stopped as git am stops: the failing diff's hunks that applied are in place, the
    # diffs after it are not applied (10-again would make it "2 + 1")
    assert "return 2 + 0\n" in k and "return 2 + 1\n" not in k
    assert '"""Fourteen."""' not in k
    assert [s for _, s, _ in commits(failed)] == ["pristine vLLM tree"]
    manifest = load(failed / ".bakery" / "manifest.json")
    assert manifest["stopped_at"] == "01-kernel.diff"
    rej = (failed / "vllm/model_executor/k.py.rej").read_text()
    assert rej.startswith("--- vllm/model_executor/k.py\n+++ vllm/model_executor/k.py\n@@ -51,6")
    assert '+    """Fourteen."""\n' in rej
    assert load(failed / ".bakery" / "manifest.json")["status"] == "conflict"
    assert "out.failed" in " ".join(r.stdout.split())
    assert load(tmp_path / "r.json")["failed_out"] == "out.failed"
    no_staging_left(tmp_path)
    # once the series applies, a bake removes the old attempt
    (tiny.src / "vllm/model_executor/k.py").write_text(
        (tiny.src / "vllm/model_executor/k.py").read_text().replace("  # upstream", "")
    )
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--keep-failed")
    assert r.exit_code == 0, r.output
    assert not failed.exists() and (tmp_path / "out").is_dir()


def test_already_applied_upstream_is_a_conflict(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("def f14():\n", 'def f14():\n    """Fourteen."""\n'))
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--json", "r.json")
    assert r.exit_code == 1, r.output
    assert ("01-kernel.diff", "vllm/model_executor/k.py", 2, "already-applied", 51) in hunks(
        load(tmp_path / "r.json")
    )
    assert not (tmp_path / "out").exists()


def test_fuzz_only_with_the_option(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("def f3():\n", "def f3():  # moved on\n"))
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 1
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--fuzz", "1", "--json", "r.json")
    assert r.exit_code == 0, r.output
    rep = load(tmp_path / "r.json")
    first = rep["diffs"][0]["files"][0]["hunks"][0]
    assert (first["status"], first["fuzz"]) == ("fuzz", 1)
    assert cli("apply", "demo", "--vllm", tiny.src, "--fuzz", "4").exit_code == 2


# --- bad input ---------------------------------------------------------------------------------


def _one_error_line(r: Result, only: bool = True) -> str:
    """The one error line on stderr (``only``: and nothing else there, not even progress)."""
    assert "Traceback" not in r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1, r.stderr
    if only:
        assert lines == errors, r.stderr
    return errors[0]


def test_bad_diff_is_one_line_naming_file_and_line(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    bad = tiny.diff_path(2)
    bad.write_text(bad.read_text() + " one line too many\n")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--json", "r.json")
    assert r.exit_code == 2
    line = _one_error_line(r)
    n = len(bad.read_text().splitlines())
    assert f"{bad.name}:{n}: line beyond the counts" in line
    assert not (tmp_path / "out").exists()
    rep = load(tmp_path / "r.json")
    assert rep["status"] == "error" and f"{bad.name}:{n}:" in rep["error"]
    assert rep["diffs"] == []


def test_unsafe_diff_is_refused_before_anything_is_written(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    tiny.diff_path(0).write_text(
        "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-root\n+toor\n"
    )
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out")
    assert r.exit_code == 2
    assert "'..' component" in _one_error_line(r)
    assert not (tmp_path / "out").exists()


def test_unknown_series(cli: Cli, tiny: Tiny) -> None:
    r = cli("apply", "nope", "--vllm", tiny.src)
    assert r.exit_code == 2
    assert "unknown series 'nope' (known: demo)" in _one_error_line(r)


def test_bad_series_folder(cli: Cli, tiny: Tiny, home: Path) -> None:
    (tiny.series / "diffs" / "fix.diff").write_text("x")
    r = cli("check", "demo", "--vllm", tiny.src)
    assert r.exit_code == 2
    assert "lacks a numeric prefix" in _one_error_line(r)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("does/not/exist", "does/not/exist"),
        ("not-a-version", "not-a-version"),
        ("9.9.9", "on the package index"),
    ],
)
def test_unreadable_source(cli: Cli, tiny: Tiny, spec: str, words: str, tmp_path: Path) -> None:
    """A source that cannot be read (no such folder, no such spec, an index that does not
    answer): one line naming it, exit 2, and the --json report says the same."""
    r = cli("apply", "demo", "--vllm", spec, "--out", "out", "--json", "r.json")
    assert r.exit_code == 2
    line = _one_error_line(r)
    assert words in line
    rep = load(tmp_path / "r.json")
    assert (rep["status"], rep["out"], rep["diffs"]) == ("error", None, [])
    assert rep["error"] and rep["error"] in line
    assert rep["series"]["name"] == "demo"
    assert not (tmp_path / "out").exists()


def test_no_base_release_and_no_vllm(cli: Cli, tiny: Tiny) -> None:
    r = cli("apply", "demo")
    assert r.exit_code == 2
    assert "pass --vllm" in _one_error_line(r)


# --- check and list ----------------------------------------------------------------------------


def test_check_writes_nothing(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    before = tree_digest(tmp_path)
    r = cli("check", "demo", "--vllm", tiny.src)
    assert r.exit_code == 0, r.output
    assert "applies" in r.stdout
    assert tree_digest(tmp_path) == before
    break_hunk(tiny)
    before = tree_digest(tmp_path)
    r = cli("check", "demo", "--vllm", tiny.src)
    assert r.exit_code == 1
    assert names_hunk(r.stdout, "vllm/model_executor/k.py", 2, 51)
    assert tree_digest(tmp_path) == before


def test_check_json(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    r = cli("check", "demo", "--vllm", tiny.src, "--json", "c.json")
    assert r.exit_code == 0, r.output
    rep = load(tmp_path / "c.json")
    assert rep["status"] == "checked" and rep["out"] is None
    assert len(hunks(rep)) == 6


def test_list(cli: Cli, tiny: Tiny, home: Path) -> None:
    (tiny.series / "series.toml").write_text(
        'base = "0.30.0"\nroot = "vllm"\nstrip = 1\ndescription = "A tiny series"\n'
    )
    (home / "patches" / "demo" / "0.31.0").mkdir(parents=True)
    r = cli("list")
    assert r.exit_code == 0, r.output
    out = r.stdout
    for words in [
        "demo",
        "base 0.30.0",
        "A tiny series",
        "ports: 0.31.0",
        "01-kernel.diff",
        "(2 hunks)",
        "strip 1",
        "    vllm/model_executor/k.py\n",  # as bakery reads them: strip off, root on
        "    vllm/model_executor/new.py\n",
        "    vllm/old.py\n",
        "10-again.diff",
    ]:
        assert words in out, words
    assert out.index("01-kernel.diff") < out.index("2-files.diff") < out.index("10-again.diff")
    r = cli("list", "demo", "--json")
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert (row["name"], row["base"], row["ports"]) == ("demo", "0.30.0", ["0.31.0"])
    assert [d["name"] for d in row["diffs"]] == tiny.diffs
    assert cli("list", "nope").exit_code == 2


# --- sources -----------------------------------------------------------------------------------


def test_pristine_source_is_never_changed(cli: Cli, tiny: Tiny) -> None:
    before = tree_digest(tiny.src)
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 0
    assert tree_digest(tiny.src) == before  # a bake that applies
    break_hunk(tiny)
    before = tree_digest(tiny.src)
    assert (
        cli(
            "apply",
            "demo",
            "--vllm",
            tiny.src,
            "--out",
            "o2",
            "--keep-failed",
        ).exit_code
        == 1
    )
    assert tree_digest(tiny.src) == before  # a bake that does not


def test_git_checkout_source_is_never_changed(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "co", home)
    git_repo(tiny.src, {})
    before = tree_digest(tiny.src)
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 0
    assert cli("check", "demo", "--vllm", tiny.src).exit_code == 0
    assert tree_digest(tiny.src) == before


def test_checkout_index_is_not_refreshed(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "co", home)
    git_repo(tiny.src, {})
    setup = tiny.src / "setup.py"
    os.utime(setup, (setup.stat().st_atime, setup.stat().st_mtime + 5))  # same content
    before = tree_digest(tiny.src)
    assert cli("check", "demo", "--vllm", tiny.src).exit_code == 0
    assert tree_digest(tiny.src) == before


def test_dirty_checkout_refused_unless_allowed(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "co", home)
    git_repo(tiny.src, {})
    (tiny.src / "setup.py").write_text("print('local change')\n")
    (tiny.src / "untracked.txt").write_text("new\n")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out")
    assert r.exit_code == 2
    assert "uncommitted changes" in _one_error_line(r)
    assert "--allow-dirty" in r.stderr
    assert not (tmp_path / "out").exists()
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--allow-dirty")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out/setup.py").read_text() == "print('local change')\n"
    assert (tmp_path / "out/untracked.txt").is_file()
    assert (
        not (tmp_path / "out" / ".git" / "refs" / "remotes").exists()
        or git(tmp_path / "out", "remote") == ""
    )


def test_ignored_files_of_a_checkout_are_left_out(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "co", home)
    write_files(tiny.src, {".gitignore": "*.so\n"})
    git_repo(tiny.src, {})
    write_files(tiny.src, {"vllm/_C.so": "binary"})
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out")
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "out/vllm/_C.so").exists()


def test_git_url_source(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "upstream", home)
    git_repo(tiny.src, {})
    tag_commit = git(tiny.src, "rev-parse", "HEAD").strip()
    git(tiny.src, "tag", "v1")
    before = tree_digest(tiny.src)
    r = cli(
        "apply", "demo", "--vllm", f"git+file://{tiny.src}@v1", "--out", "out", "--json", "r.json"
    )
    assert r.exit_code == 0, r.output
    rep = load(tmp_path / "r.json")
    assert rep["vllm"]["source"] == f"file://{tiny.src}@{tag_commit}"
    assert (tmp_path / "out/vllm/model_executor/new.py").is_file()
    assert tree_digest(tiny.src) == before
    assert (tmp_path / "cache" / "trees").is_dir()  # cached under BAKERY_CACHE_DIR


def test_installed_package_folder_source(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "site-packages", home)
    write_files(
        tiny.src, {"vllm/_version.py": "version = '0.99.0'\n", "vllm/__pycache__/x.pyc": "junk"}
    )
    r = cli("apply", "demo", "--vllm", tiny.src / "vllm", "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    assert (out / "vllm/model_executor/k.py").read_bytes() == tiny.baked["vllm/model_executor/k.py"]
    assert not (out / "vllm/__pycache__").exists()
    assert not (out / "setup.py").exists()  # only the package folder is copied
    assert load(tmp_path / "r.json")["vllm"]["version"] == "0.99.0"


def test_symlink_in_the_source_is_not_written_through(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "src", home)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.py").write_text((tiny.src / "vllm/model_executor/k.py").read_text())
    (tiny.src / "vllm/model_executor/k.py").unlink()
    os.symlink(outside / "k.py", tiny.src / "vllm/model_executor/k.py")
    before = tree_digest(outside)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out")
    assert r.exit_code == 2
    assert "symlink" in _one_error_line(r, only=False)
    assert tree_digest(outside) == before


# --- repeated bakes ----------------------------------------------------------------------------


def test_same_inputs_same_commit_ids(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "a").exit_code == 0
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "b").exit_code == 0
    a, b = commits(tmp_path / "a"), commits(tmp_path / "b")
    assert a == b and len(a) == 4
    ma, mb = load(tmp_path / "a/.bakery/manifest.json"), load(tmp_path / "b/.bakery/manifest.json")
    assert ma["head"] == mb["head"] and ma["files"] == mb["files"]


def test_same_commit_ids_from_a_checkout(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "co", home)
    git_repo(tiny.src, {})
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "a").exit_code == 0
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "b").exit_code == 0
    assert commits(tmp_path / "a") == commits(tmp_path / "b")


def test_rebake_replaces_an_unchanged_bake(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    first = commits(out)
    d = tiny.diff_path(2)
    d.write_text(d.read_text().replace("return 2 + 1", "return 2 + 2"))
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", out)
    assert r.exit_code == 0, r.output
    assert "return 2 + 2\n" in (out / "vllm/model_executor/k.py").read_text()
    again = commits(out)
    assert again[:3] == first[:3] and again[3] != first[3]
    no_staging_left(tmp_path)


@pytest.mark.parametrize("how", ["edit", "untracked", "commit"])
def test_local_changes_in_a_baked_tree_are_not_overwritten(
    cli: Cli, tiny: Tiny, tmp_path: Path, how: str
) -> None:
    out = tmp_path / "out"
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    k = out / "vllm/model_executor/k.py"
    if how == "untracked":
        (out / "notes.txt").write_text("mine\n")
    else:
        k.write_text(k.read_text() + "# my work\n")
        if how == "commit":
            git(out, "commit", "-qam", "my work")
    before = tree_digest(out)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", out)
    assert r.exit_code == 2
    assert "local changes" in _one_error_line(r)
    assert tree_digest(out) == before
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", out, "--force")
    assert r.exit_code == 0, r.output
    assert "# my work" not in k.read_text() and not (out / "notes.txt").exists()


def test_out_that_is_not_a_bake_is_refused(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    write_files(tmp_path / "precious", {"file.txt": "keep me\n"})
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "precious")
    assert r.exit_code == 2
    assert "not a baked tree" in _one_error_line(r)
    assert (tmp_path / "precious/file.txt").read_text() == "keep me\n"
    (tmp_path / "afile").write_text("x")
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "afile").exit_code == 2
    (tmp_path / "empty").mkdir()
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "empty").exit_code == 0


def test_conflict_keeps_an_earlier_bake_away_from_out(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    # A conflict leaves nothing at --out, so an earlier (now stale) bake is removed too.
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 0
    break_hunk(tiny)
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 1
    assert not (tmp_path / "out").exists()


# --- layout detection --------------------------------------------------------------------------


def test_detected_layout_is_printed(cli: Cli, tmp_path: Path, home: Path) -> None:
    tiny = make_tiny(tmp_path / "src", home, toml=None)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert "strip 1, root 'vllm'" in r.stderr
    assert load(tmp_path / "r.json")["layout"] == {"strip": 1, "root": "vllm", "detected": True}
    tiny.series.joinpath("series.toml").write_text('root = "vllm"\nstrip = 1\n')
    r = cli("check", "demo", "--vllm", tiny.src)
    assert "strip 1" not in r.stderr


def test_series_given_as_a_path(cli: Cli, tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "work" / "myseries"
    text = udiff("a.txt", "a\nb\n", "a\nB\n", "a", "b")
    make_series(tmp_path / "work", "x", {"1-a.diff": text})
    (tmp_path / "work" / "launcher" / "x").rename(folder)
    write_files(tmp_path / "plain", {"a.txt": "a\nb\n"})
    r = cli("apply", folder, "--vllm", "plain", "--out", "out")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out/a.txt").read_text() == "a\nB\n"
    assert commits(tmp_path / "out")[1][1] == "1-a.diff"


def test_version_option(cli: Cli) -> None:
    r = cli("--version")
    assert r.exit_code == 0 and __version__ in r.stdout
