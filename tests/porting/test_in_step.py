"""Ports stay in step with the series (issue 25): a port records the series diffs it was
made from; a fix to the series makes the port stale, loudly; ``port --update`` carries the
fix into the port, proven by verify, or leaves a conflict tree and writes nothing.

The whole story runs through the CLI on a series built here: two diffs over two files,
two tiny releases on a local index, the project a git repository (the old series text is
read back from its history)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from bakery.cli.app import app
from tests.support.archives import sdist
from tests.support.index import Index, serve_index
from tests.support.pick import A_BASE, K_BASE, K_OURS, K_THEIRS, TAIL, TESTS, A, K, udiff
from tests.support.repos import git

# the fix to diff 02, made on the base release: size counts distinct items
FIXED_TAIL = TAIL.replace("return len(xs)", "return len(set(xs))")
FIX_TEST = "\n\ndef test_size_counts_distinct():\n    assert k.size([1, 1, 2]) == 2\n"


def _sdist(version: str, k: str) -> bytes:
    return sdist(version, files=2, modules={K: k, A: A_BASE})


WHEEL = "vllm-1.1.0-cp38-abi3-manylinux_2_28_x86_64.whl"


def _wheel(version: str, k: str) -> bytes:
    """The release's upstream wheel: its .py files as the sdist has them, a dist-info."""
    info = f"vllm-{version}.dist-info"
    members = {
        K: k.encode(),
        A: A_BASE.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp38-abi3-x\n",
    }
    rows = [f"{n},sha256={_b64(d)},{len(d)}\n" for n, d in members.items()]
    members[f"{info}/RECORD"] = "".join([*rows, f"{info}/RECORD,,\n"]).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Index]]:
    home = tmp_path / "home"
    series = home / "launcher" / "s"
    (series / "diffs").mkdir(parents=True)
    (series / "tests").mkdir()
    (series / "series.toml").write_text('base = "1.0.0"\nstrip = 1\nroot = ""\n')
    (series / "diffs" / "01-a.diff").write_text(udiff(A, A_BASE, "A = 2\n"))
    (series / "diffs" / "02-rev.diff").write_text(udiff(K, K_BASE, K_OURS))
    (series / "tests" / "test_k.py").write_text(TESTS)
    (home / ".gitignore").write_text("build/\n*.json\n")
    monkeypatch.setenv("BAKERY_HOME", str(home))
    monkeypatch.chdir(home)
    git(home, "init", "-q")
    _commit(home, "the series")
    with serve_index() as idx:
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        idx.add("vllm-1.0.0.tar.gz", _sdist("1.0.0", K_BASE))
        idx.add("vllm-1.1.0.tar.gz", _sdist("1.1.0", K_THEIRS))
        yield home, idx


def _commit(home: Path, message: str) -> None:
    git(home, "add", "-A")
    git(home, "commit", "-qm", message)


def _cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def _fix_02_on_the_base(home: Path, tail: str, test: str) -> str:
    """Bake the base release, edit diff 02's file there, refresh: the series' diff 02
    changes (as a person fixes a series). The printed next step then bakes as it is."""
    assert _cli("apply", "s").exit_code == 0
    tree = home / "build" / "s-1.0.0"
    (tree / K).write_text((tree / K).read_text().replace(TAIL, tail))
    res = _cli("refresh", "s", "--tree", str(tree))
    assert res.exit_code == 0, res.output
    tests = home / "launcher" / "s" / "tests" / "test_k.py"
    tests.write_text(tests.read_text() + test)
    # refresh's next step (apply on the base, into the refreshed tree) needs no --force
    assert "bakery apply s --vllm 1.0.0" in res.output
    again = _cli("apply", "s", "--vllm", "1.0.0")
    assert again.exit_code == 0, again.output
    diff02 = (home / "launcher" / "s" / "diffs" / "02-rev.diff").read_text()
    assert "+    return len(set(xs))" in diff02 or "+    return len(xs) + 0" in diff02
    return diff02


def _port_on_b(home: Path) -> Path:
    res = _cli("port", "s", "--vllm", "1.1.0")
    assert res.exit_code == 0, res.output
    port = home / "patches" / "s" / "1.1.0"
    record = (port / "FROM.toml").read_text()
    assert '"02-rev.diff" = { sha256 = ' in record and 'made_by = "port"' in record
    _commit(home, "the port to 1.1.0")
    # the review: what 1.1.0 needed beyond the series (diff 02's hunk, changed)
    review = _cli("diff-ports", "s", "--json", "r.json")
    assert review.exit_code == 0, review.output
    (view,) = json.loads(Path("r.json").read_text())["ports"]
    assert view["counts"] == {"=": 1, "!": 1, "<": 0, ">": 0}
    assert "+def pick(xs, k, key=None, *, rev=False):" in review.output  # the interdiff
    return port


def test_a_fix_to_the_series_reaches_the_port(project: tuple[Path, Index]) -> None:
    home, idx = project
    port = _port_on_b(home)
    _fix_02_on_the_base(home, FIXED_TAIL, FIX_TEST)
    _commit(home, "fix 02: size counts distinct items")

    # the port is stale, and every report says so; apply and check carry the series'
    # fix onto it (issue 45: never the old series, silently), unverified, the port left
    before = {p.name: p.read_bytes() for p in port.iterdir()}
    applied = _cli("apply", "s", "--vllm", "1.1.0", "--json", "apply.json")
    assert applied.exit_code == 0, applied.output
    report = json.loads(Path("apply.json").read_text())
    stale = report["port_stale"]
    assert len(stale) == 1 and stale[0].startswith("port stale: made from 02-rev.diff @ ")
    assert ", the series now has " in stale[0]
    assert "port stale: made from 02-rev.diff" in applied.output
    assert "Carrying the series' change into the stale port patches/s/1.1.0" in applied.output
    assert (
        report["port"] == "patches/s/1.1.0" and "carried onto the stale port" in report["carried"]
    )
    assert report["proof"]["state"] == "unverified"
    assert "unverified: " in applied.output and "run `bakery verify s`" in applied.output
    baked_k = (home / "build" / "s-1.1.0" / K).read_text()
    assert "return len(set(xs))" in baked_k  # the fix, carried
    assert "def pick(xs, k, key=None, *, rev=False):" in baked_k  # the port's own merge
    assert {p.name: p.read_bytes() for p in port.iterdir()} == before
    checked = _cli("check", "s", "--vllm", "1.1.0", "--json", "check.json")
    assert checked.exit_code == 0, checked.output
    assert json.loads(Path("check.json").read_text())["proof"]["state"] == "unverified"
    assert "carried onto the stale port" in checked.output
    # --up-to-date and --strict keep their meaning: the committed port is stale
    checked = _cli("check", "s", "--vllm", "1.1.0", "--up-to-date")
    assert checked.exit_code == 1
    assert "port stale: made from 02-rev.diff" in checked.output
    assert _cli("check", "s", "--vllm", "1.1.0", "--strict").exit_code == 1
    # bakery wheel too: it carries the fix, verifies the carried bake, and ships the fix
    idx.add(WHEEL, _wheel("1.1.0", K_THEIRS))
    wheel = _cli("wheel", "s", "--vllm", "1.1.0", "--platform", "x86_64", "--interpret")
    assert wheel.exit_code == 0, wheel.output
    (made,) = (home / "dist").glob("vllm-1.1.0+s.*.whl")
    with zipfile.ZipFile(made) as zf:
        assert "return len(set(xs))" in zf.read(K).decode()
        (info,) = [n for n in zf.namelist() if n.endswith(".dist-info/bakery.json")]
        recorded = json.loads(zf.read(info))
    assert recorded["port"] == "1.1.0" and recorded["proof"]["state"] == "verified"
    assert {p.name: p.read_bytes() for p in port.iterdir()} == before

    # a dry run proves it and writes nothing
    before = {p.name: p.read_bytes() for p in port.iterdir()}
    dry = _cli("port", "s", "--update", "--dry-run", "--json", "update.json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(Path("update.json").read_text())["ports"][0]["state"] == "carried"
    assert {p.name: p.read_bytes() for p in port.iterdir()} == before

    res = _cli("port", "s", "--update", "--json", "update.json")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(Path("update.json").read_text())["ports"]
    assert row["state"] == "written" and row["verify"].startswith("passed (3 passed")
    new02 = (port / "02-rev.diff").read_text()
    assert "+    return len(set(xs))" in new02  # the fix, carried
    assert "+def pick(xs, k, key=None, *, rev=False):" in new02  # the port's own merge, kept
    assert (port / "PROVENANCE.md").is_file()
    # the review: the port against itself at the last commit shows the fix as a new hunk
    review = _cli("diff-ports", "s", "--vllm", "1.1.0", "--since", "HEAD", "--json", "r.json")
    assert review.exit_code == 0, review.output
    (view,) = json.loads(Path("r.json").read_text())["ports"]
    marks = {(f["diff"], f["path"]): [p["mark"] for p in f["pairs"]] for f in view["files"]}
    assert marks == {("01-a.diff", A): ["="], ("02-rev.diff", K): ["=", ">"]}
    assert "1 only in the port" in review.output

    # now in step: apply bakes the fix, check --up-to-date passes
    baked = _cli("apply", "s", "--vllm", "1.1.0", "--json", "apply.json")
    assert baked.exit_code == 0, baked.output
    assert json.loads(Path("apply.json").read_text())["port_stale"] == []
    text = (home / "build" / "s-1.1.0" / K).read_text()
    assert "return len(set(xs))" in text and "def pick(xs, k, key=None, *, rev=False):" in text
    assert _cli("check", "s", "--vllm", "1.1.0", "--up-to-date").exit_code == 0


def test_a_fix_that_conflicts_with_the_port_leaves_a_tree_and_writes_nothing(
    project: tuple[Path, Index],
) -> None:
    home, _ = project
    port = _port_on_b(home)
    before = {p.name: p.read_bytes() for p in port.iterdir()}
    # the fix rewrites the very line the release and the port changed
    conflicting = TAIL.replace("return len(xs)", "return len(xs) + 0")
    diffs = home / "launcher" / "s" / "diffs" / "02-rev.diff"
    diffs.write_text(
        udiff(
            K,
            K_BASE,
            K_OURS.replace(
                "ys = sorted(xs, reverse=rev)", "ys = list(reversed(xs)) if rev else xs"
            ).replace(TAIL, conflicting),
        )
    )
    _commit(home, "fix 02 differently")
    res = _cli("port", "s", "--update", "--json", "update.json")
    assert res.exit_code == 1, res.output
    (row,) = json.loads(Path("update.json").read_text())["ports"]
    assert row["state"] == "conflict", row
    assert [(c["diff"], c["path"]) for c in row["conflicts"]] == [("02-rev.diff", K)]
    tree = home / row["conflict_tree"]
    assert "<<<<<<< " in (tree / K).read_text()
    assert "02-rev.diff: vllm/k.py:" in res.output
    assert {p.name: p.read_bytes() for p in port.iterdir()} == before  # nothing written
    assert _cli("check", "s", "--vllm", "1.1.0", "--up-to-date").exit_code == 1
    # apply and check never bake the stale port as it is: exit 1, and the next command
    for cmd in ("apply", "check"):
        stopped = _cli(cmd, "s", "--vllm", "1.1.0", "--json", f"{cmd}.json")
        assert stopped.exit_code == 1, stopped.output
        assert "does not merge into it (02-rev.diff: vllm/k.py)" in stopped.output
        assert (
            "run `bakery port s --update --vllm 1.1.0` (it proves the carried port, or leaves "
            "the conflicts to resolve)"
        ) in stopped.output
        assert json.loads(Path(f"{cmd}.json").read_text())["status"] == "error"
    wheel = _cli("wheel", "s", "--vllm", "1.1.0", "--platform", "x86_64", "--unverified")
    assert wheel.exit_code == 1, wheel.output
    assert "bakery port s --update --vllm 1.1.0" in wheel.output
    assert not (home / "build" / "s-1.1.0").exists() and not (home / "dist").exists()


def test_a_port_without_a_record_is_said(project: tuple[Path, Index]) -> None:
    home, _ = project
    port = _port_on_b(home)
    (port / "FROM.toml").unlink()
    res = _cli("check", "s", "--vllm", "1.1.0", "--json", "check.json")
    assert res.exit_code == 0
    assert json.loads(Path("check.json").read_text())["port_stale"] == [
        "port has no provenance record"
    ]
    assert "port has no provenance record" in res.output
    assert _cli("check", "s", "--vllm", "1.1.0", "--strict").exit_code == 1


def test_where_the_series_applies_as_it_is_no_port_is_written(
    project: tuple[Path, Index],
) -> None:
    home, idx = project
    # 1.2.0 leaves the files the series changes as they were: its own diffs apply
    idx.add("vllm-1.2.0.tar.gz", _sdist("1.2.0", K_BASE + "\n\nLATER = 1\n"))
    res = _cli("port", "s", "--vllm", "1.2.0", "--json", "port.json")
    assert res.exit_code == 0, res.output
    report = json.loads(Path("port.json").read_text())
    assert report["no_port_needed"] is True and report["port"] is None, (
        report["candidates"],
        report["tried"],
    )
    assert "no port needed" in res.output
    assert not (home / "patches" / "s" / "1.2.0").exists()


def test_a_stale_port_is_never_a_start(project: tuple[Path, Index]) -> None:
    home, idx = project
    _port_on_b(home)
    _fix_02_on_the_base(home, FIXED_TAIL, FIX_TEST)
    idx.add("vllm-1.2.0.tar.gz", _sdist("1.2.0", K_THEIRS + "\n\nLATER = 1\n"))
    res = _cli("port", "s", "--vllm", "1.2.0", "--dry-run", "--json", "port.json")
    starts = [c["start"] for c in json.loads(Path("port.json").read_text())["candidates"]]
    assert starts == ["series"], res.output
    assert "not starting from port 1.1.0: port stale: made from 02-rev.diff" in res.output


def test_a_rerun_keeps_the_attempt_the_user_edited(project: tuple[Path, Index]) -> None:
    home, idx = project
    # 1.3.0 rewrites the line diff 02 changes: no merge keeps both, an attempt is left
    idx.add("vllm-1.3.0.tar.gz", _sdist("1.3.0", K_BASE.replace("sorted(xs)", "sorted(set(xs))")))
    first = _cli("port", "s", "--vllm", "1.3.0", "--json", "port.json")
    assert first.exit_code == 1, first.output
    attempt = home / json.loads(Path("port.json").read_text())["failed_out"]
    notes = attempt / "NOTES.txt"
    notes.write_text("resolved half of it\n")
    again = _cli("port", "s", "--vllm", "1.3.0")
    assert again.exit_code == 2, again.output
    assert "bakery will not remove it" in again.output
    assert notes.read_text() == "resolved half of it\n"


# --- what port --update writes, varied (issue 50) -----------------------------------------------

#: diff 01's file: 1.1.0 leaves vllm/a.py as 1.0.0 has it
A_FIXED = "A = 2\n\n\ndef a_twice():\n    return 2 * A\n"
A_FIX_TEST = "\n\ndef test_a_twice():\n    assert a.a_twice() == 4\n"


def _fix_01(home: Path, after: str, test: str) -> None:
    """Diff 01 changed in the series (its file is one the release did not change), with a
    test of the change; committed, so that the old diff is in the history."""
    series = home / "launcher" / "s"
    (series / "diffs" / "01-a.diff").write_text(udiff(A, A_BASE, after))
    tests = series / "tests" / "test_k.py"
    tests.write_text(tests.read_text() + test)
    _commit(home, "fix 01")


def test_a_fix_to_a_file_the_release_did_not_change_reaches_the_port(
    project: tuple[Path, Index],
) -> None:
    home, _ = project
    port = _port_on_b(home)
    _fix_01(home, A_FIXED, A_FIX_TEST)
    stale = _cli("check", "s", "--vllm", "1.1.0", "--up-to-date")
    assert stale.exit_code == 1 and "made from 01-a.diff" in stale.output
    res = _cli("port", "s", "--update", "--json", "update.json")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(Path("update.json").read_text())["ports"]
    assert row["state"] == "written" and row["verify"].startswith("passed (3 passed"), row
    # the fix is in the port, and the port bakes it: not only its record rewritten
    assert "+def a_twice():" in (port / "01-a.diff").read_text()
    baked = _cli("apply", "s", "--vllm", "1.1.0", "--out", "b")
    assert baked.exit_code == 0, baked.output
    assert (home / "b" / A).read_text() == A_FIXED
    assert "def pick(xs, k, key=None, *, rev=False):" in (home / "b" / K).read_text()
    assert _cli("check", "s", "--vllm", "1.1.0", "--up-to-date").exit_code == 0


def _tests_fail(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fix_01(home, A_FIXED, A_FIX_TEST.replace("== 4", "== 5"))


def _no_tests(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fix_01(home, A_FIXED, "")
    tests = home / "launcher" / "s" / "tests"
    for f in tests.iterdir():
        f.unlink()
    tests.rmdir()
    _commit(home, "no tests")


def _does_not_bake(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered port names a file the release lacks (a stand-in for a renderer bug:
    what update writes must bake from its own diffs, whatever rendered them)."""
    from bakery.porting import update, writer

    real = writer.render_port

    def broken(*args: object, **kwargs: object) -> list[bytes]:
        texts = real(*args, **kwargs)  # type: ignore[arg-type]
        return [t.replace(b"/vllm/a.py", b"/vllm/gone.py") for t in texts]

    monkeypatch.setattr(update, "render_port", broken)
    _fix_01(home, A_FIXED, A_FIX_TEST)


@pytest.mark.parametrize(
    ("break_it", "verify"),
    [
        (_tests_fail, "failed (1 failed"),
        (_no_tests, "not run: the series has no tests/ folder"),
        (_does_not_bake, "not run: the updated diffs do not bake"),
    ],
    ids=["tests-fail", "no-tests", "does-not-bake"],
)
def test_a_port_whose_update_is_not_proven_is_never_written(
    project: tuple[Path, Index], monkeypatch: pytest.MonkeyPatch, break_it, verify: str
) -> None:
    home, _ = project
    port = _port_on_b(home)
    before = {p.name: p.read_bytes() for p in port.iterdir()}
    break_it(home, monkeypatch)
    res = _cli("port", "s", "--update", "--json", "update.json")
    assert res.exit_code == 1, res.output
    (row,) = json.loads(Path("update.json").read_text())["ports"]
    assert row["state"] == "failed" and row["verify"].startswith(verify), row
    assert "next: bakery port s --vllm 1.1.0" in res.output  # nothing to resolve: anew
    assert {p.name: p.read_bytes() for p in port.iterdir()} == before  # FROM.toml too
    # the run that failed left its log beside the attempt
    log = home / "build" / "port" / "s-1.1.0-update" / "verify.log"
    assert log.is_file() is verify.startswith("failed"), log
    assert _cli("check", "s", "--vllm", "1.1.0", "--up-to-date").exit_code == 1


@pytest.mark.parametrize("carries", [True, False], ids=["update-tree", "tree-without-record"])
def test_a_resolved_conflict_is_no_longer_stale(project: tuple[Path, Index], carries: bool) -> None:
    """The conflict tree update leaves, resolved and refreshed into the port, records the
    series as it is now: the port is in step. The same tree without update's record of the
    series it carries (a tree baked from the old port) keeps the port stale."""
    home, _ = project
    port = _port_on_b(home)
    conflicting = TAIL.replace("return len(xs)", "return len(xs) + 0")
    diffs = home / "launcher" / "s" / "diffs" / "02-rev.diff"
    new_k = K_OURS.replace(
        "ys = sorted(xs, reverse=rev)", "ys = list(reversed(xs)) if rev else xs"
    ).replace(TAIL, conflicting)
    diffs.write_text(udiff(K, K_BASE, new_k))
    _commit(home, "fix 02 differently")
    res = _cli("port", "s", "--update", "--json", "update.json")
    (row,) = json.loads(Path("update.json").read_text())["ports"]
    assert row["state"] == "conflict", res.output
    tree = home / row["conflict_tree"]
    # the conflict resolved: the release's `key`, the series' new tail
    resolved = K_THEIRS.replace(
        "def pick(xs, k, key=None):", "def pick(xs, k, key=None, *, rev=False):"
    ).replace("ys = sorted(xs, key=key)", "ys = sorted(xs, key=key, reverse=rev)")
    (tree / K).write_text(resolved.replace(TAIL, conflicting))
    if not carries:
        manifest = tree / ".bakery" / "manifest.json"
        data = json.loads(manifest.read_text())
        del data["carries_series"]
        manifest.write_text(json.dumps(data))
    refreshed = _cli("refresh", "s", "--tree", str(tree))
    assert refreshed.exit_code == 0, refreshed.output
    assert "return len(xs) + 0" in (port / "02-rev.diff").read_text()
    checked = _cli("check", "s", "--vllm", "1.1.0", "--up-to-date", "--json", "c.json")
    if carries:
        assert checked.exit_code == 0, checked.output
        assert json.loads(Path("c.json").read_text())["port_stale"] == []
        assert 'made_by = "update"' in (port / "FROM.toml").read_text()
    else:
        assert checked.exit_code == 1, checked.output
        assert "port stale: made from 02-rev.diff" in checked.output


# --- what port --update says and keeps, varied (issue 50: the survivors of `make mutate`) -------


def _conflicting_fix(home: Path) -> str:
    """Diff 02 rewritten where the release and the port changed the same line; committed.
    Returns the series' new line there."""
    theirs = "ys = list(reversed(xs)) if rev else xs"
    new_k = K_OURS.replace("ys = sorted(xs, reverse=rev)", theirs).replace(
        TAIL, TAIL.replace("return len(xs)", "return len(xs) + 0")
    )
    (home / "launcher" / "s" / "diffs" / "02-rev.diff").write_text(udiff(K, K_BASE, new_k))
    _commit(home, "fix 02 differently")
    return theirs


def _update_row(*args: str) -> tuple[Result, dict[str, object]]:
    res = _cli("port", "s", "--update", *args, "--json", "update.json")
    (row,) = json.loads(Path("update.json").read_text())["ports"]
    return res, row


def test_a_conflict_tree_holds_both_sides_at_the_lines_it_names(
    project: tuple[Path, Index],
) -> None:
    home, _ = project
    _port_on_b(home)
    theirs = _conflicting_fix(home)
    res, row = _update_row()
    assert res.exit_code == 1 and row["state"] == "conflict", res.output
    text = (home / str(row["conflict_tree"]) / K).read_text()
    ours = "ys = sorted(xs, key=key, reverse=rev)"  # the port's own merge of the line
    assert theirs in text and ours in text, text  # the series' change beside the port's
    lines = text.splitlines()
    conflicts = row["conflicts"]
    assert isinstance(conflicts, list) and conflicts
    for c in conflicts:
        assert lines[c["line"] - 1].startswith("<<<<<<< "), (c, text)
    assert len(conflicts) == sum(line.startswith("<<<<<<< ") for line in lines)


def test_a_rerun_of_update_redoes_its_own_conflict_tree_and_keeps_one_the_user_edited(
    project: tuple[Path, Index],
) -> None:
    home, _ = project
    _port_on_b(home)
    _conflicting_fix(home)
    first, row = _update_row()
    assert row["state"] == "conflict", first.output
    tree = home / str(row["conflict_tree"])
    # untouched since update wrote it: the rerun makes it again
    again, row = _update_row()
    assert again.exit_code == 1 and row["state"] == "conflict", again.output
    assert "<<<<<<< " in (tree / K).read_text()
    # a person resolved a file in it: the rerun refuses, and the edit stays
    resolved = (tree / K).read_text().split("<<<<<<< ")[0] + "# resolved\n"
    (tree / K).write_text(resolved)
    edited = _cli("port", "s", "--update")
    assert edited.exit_code == 2, edited.output
    assert "holds changes made since bakery wrote it; bakery will not overwrite" in edited.output
    assert (tree / K).read_text() == resolved


def test_an_unchanged_attempt_beside_the_update_is_removed_and_an_edited_one_refused(
    project: tuple[Path, Index],
) -> None:
    """An attempt bakery left at the update's scratch (``tree.failed``, a ``--keep-failed``
    bake there) goes when nobody changed it; one a person edited stops the update."""
    from bakery.errors import UsageError
    from bakery.porting import update

    home, idx = project
    idx.add("vllm-1.3.0.tar.gz", _sdist("1.3.0", K_BASE.replace("sorted(xs)", "sorted(set(xs))")))
    scratch = home / "build" / "port" / "s-1.1.0-update"
    attempt = scratch / "tree.failed"

    def leave_attempt() -> None:
        res = _cli("apply", "s", "--vllm", "1.3.0", "--out", str(scratch / "tree"), "--keep-failed")
        assert res.exit_code == 1 and attempt.is_dir(), res.output

    leave_attempt()
    update._clear(scratch)
    assert scratch.is_dir() and not any(scratch.iterdir())
    leave_attempt()
    (attempt / K).write_text("# a person's resolution\n")
    with pytest.raises(UsageError, match=r"tree\.failed: it holds changes made since bakery"):
        update._clear(scratch)
    assert (attempt / K).read_text() == "# a person's resolution\n"


@pytest.mark.parametrize("change", ["removed", "reordered"])
def test_update_cannot_carry_a_series_whose_diffs_were_removed_or_reordered(
    project: tuple[Path, Index], change: str
) -> None:
    home, _ = project
    port = _port_on_b(home)
    before = {p.name: p.read_bytes() for p in port.iterdir()}
    diffs = home / "launcher" / "s" / "diffs"
    if change == "removed":
        (diffs / "01-a.diff").unlink()
    else:
        (diffs / "01-a.diff").rename(diffs / "03-a.diff")
    _commit(home, f"01 {change}")
    res, row = _update_row()
    assert res.exit_code == 1, res.output
    assert "Carrying the series' change into patches/s/1.1.0" in res.output
    assert row["state"] == "cannot", row
    assert str(row["why"]).startswith(
        "the series' diffs were removed or reordered since the port was made"
    ), row
    assert {p.name: p.read_bytes() for p in port.iterdir()} == before


def test_update_says_why_it_cannot_carry_into_a_port_without_a_record(
    project: tuple[Path, Index],
) -> None:
    home, _ = project
    port = _port_on_b(home)
    (port / "FROM.toml").unlink()
    res, row = _update_row()
    assert res.exit_code == 1, res.output
    assert (row["state"], row["why"]) == (
        "cannot",
        "no record of the series diffs it was made from",
    ), row
    # with the record back, the port is in step: nothing to carry
    remade = _cli("port", "s", "--vllm", "1.1.0")  # remade from the series as it is
    assert remade.exit_code == 0, remade.output
    res, row = _update_row()
    assert res.exit_code == 0 and row["state"] == "current", res.output


@pytest.mark.parametrize("where", ["tree", "history", "nowhere"])
def test_the_old_series_is_read_from_the_tree_where_unchanged_else_from_history(
    project: tuple[Path, Index], tmp_path: Path, where: str
) -> None:
    """The series as a port was made from it: a diff unchanged since is read from the
    series (it needs no commit), a changed one from the project's git history by its blob
    id; one in neither is refused by name."""
    from bakery.errors import BakeryError
    from bakery.patch import provenance
    from bakery.patch.series import load_series
    from bakery.porting import update

    home, _ = project
    series_dir = home / "launcher" / "s"
    diff02 = series_dir / "diffs" / "02-rev.diff"
    made_from = udiff(K, K_BASE, K_OURS.replace("return ys[:k]", "return ys[:k]  # made"))
    diff02.write_text(made_from)  # the text the port was made from: never committed
    if where == "history":
        _commit(home, "02 as the port was made from it")
    record = provenance.of_series(series_dir, "port")
    if where != "tree":
        diff02.write_text(udiff(K, K_BASE, K_OURS))  # changed since
    series = load_series("s", home)
    scratch = tmp_path / "scratch"
    if where == "nowhere":
        with pytest.raises(BakeryError) as e:
            update._old_series(series, record, home, scratch)
        short = provenance.short(record.diffs["02-rev.diff"].sha256)
        assert e.value.message == (
            f"02-rev.diff @ {short} is not in the project's git history: its change cannot "
            "be computed (make the port again: bakery port)"
        )
        return
    old = update._old_series(series, record, home, scratch)
    texts = {d.name: d.path.read_text() for d in old.load_diffs()}
    assert texts["02-rev.diff"] == made_from
    assert texts["01-a.diff"] == (series_dir / "diffs" / "01-a.diff").read_text()


@pytest.mark.parametrize("dropped", ["02-rev.diff", "02-rev.patch"])
def test_update_replaces_the_ports_diffs_as_a_whole_and_keeps_its_other_files(
    tmp_path: Path, dropped: str
) -> None:
    """A diff the updated port no longer has (the carried change left it empty: update
    writes no empty diff) is gone from the port, whichever diff suffix it has; the port's
    other files stay, and its record is the new one."""
    from bakery.patch import provenance
    from bakery.porting import update

    port = tmp_path / "patches" / "s" / "1.1.0"
    port.mkdir(parents=True)
    for name, text in [("01-a.diff", "old 01\n"), (dropped, "old 02\n"), ("NOTES.md", "n\n")]:
        (port / name).write_text(text)
    (port / provenance.FILE).write_text("old record\n")
    new = tmp_path / "new"
    new.mkdir()
    (new / "01-a.diff").write_text("new 01\n")
    (new / provenance.FILE).write_text("new record\n")
    update._replace(port, new)
    got = {p.name: p.read_text() for p in port.iterdir()}
    assert got == {"01-a.diff": "new 01\n", "NOTES.md": "n\n", provenance.FILE: "new record\n"}
