"""Class 7: never lose or replace the user's work.

bakery deletes or replaces only what it made and can prove unchanged. A --keep-failed
attempt is committed in its folder, so a later bake can prove it untouched; an attempt
with edits survives every later bake (a --keep-failed bake that would overwrite it is
refused with exit 2 naming the folder; a successful bake keeps it and says so). Outputs
go to what the user named, through one writer: ``-``, a FIFO, a symlink, /dev/stdout.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery import outputs
from tests.support.cli import refused
from tests.support.trees import Tiny

Cli = Callable[..., Result]


def break_hunk(tiny: Tiny) -> Path:
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("    return 14\n", "    return 14  # upstream\n"))
    return k


def mend(k: Path) -> None:
    k.write_text(k.read_text().replace("  # upstream", ""))


def attempt(cli: Cli, tiny: Tiny, out: Path) -> Path:
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", out, "--keep-failed")
    assert r.exit_code == 1, r.output
    return out.with_name(out.name + ".failed")


def test_edited_attempt_is_not_overwritten_by_keep_failed(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    break_hunk(tiny)
    failed = attempt(cli, tiny, tmp_path / "out")
    work = failed / "vllm/model_executor/k.py"
    work.write_text(work.read_text() + "# my resolution\n")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out", "--keep-failed")
    refused(r, str(failed), "changes made since bakery wrote it")
    assert work.read_text().endswith("# my resolution\n")


def test_new_file_in_attempt_counts_as_an_edit(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    break_hunk(tiny)
    failed = attempt(cli, tiny, tmp_path / "out")
    (failed / "NOTES.txt").write_text("half done\n")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out", "--keep-failed")
    refused(r, str(failed))
    assert (failed / "NOTES.txt").read_text() == "half done\n"


def test_edited_attempt_survives_a_successful_bake(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    k = break_hunk(tiny)
    failed = attempt(cli, tiny, tmp_path / "out")
    work = failed / "vllm/model_executor/k.py"
    work.write_text(work.read_text() + "# my resolution\n")
    mend(k)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert work.read_text().endswith("# my resolution\n")
    assert "kept" in r.stderr and "out.failed" in r.stderr


def test_unchanged_attempt_is_replaced_then_removed(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    k = break_hunk(tiny)
    failed = attempt(cli, tiny, tmp_path / "out")
    failed = attempt(cli, tiny, tmp_path / "out")  # bakery's own, untouched: replaced
    assert (failed / ".bakery/manifest.json").is_file()
    mend(k)
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out").exit_code == 0
    assert not failed.exists()


def test_refresh_still_works_from_a_committed_attempt(
    cli: Cli, tiny: Tiny, tmp_path: Path, home: Path
) -> None:
    break_hunk(tiny)
    failed = attempt(cli, tiny, tmp_path / "out")
    k = failed / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("def f14():\n", 'def f14():\n    """Fourteen."""\n'))
    (failed / "vllm/model_executor/k.py.rej").unlink()
    # a local tree is no release: its port is next/, never one a --release names (issue 45)
    r = cli("refresh", "demo", "--tree", failed, "--release", "1.0")
    assert r.exit_code == 2 and "patches/demo/next/" in r.output, r.output
    assert not (home / "patches/demo/1.0.0").exists()
    r = cli("refresh", "demo", "--tree", failed)
    assert r.exit_code == 0, r.output
    # the attempt stopped at 01-kernel.diff (as git am -3 stops): the resolution goes there
    port = home / "patches/demo/next"
    assert '"""Fourteen."""' in (port / "01-kernel.diff").read_text()
    assert ".rej" not in "".join(p.read_text() for p in port.iterdir())


@pytest.mark.parametrize("kind", ["folder", "file", "link"])
def test_a_failed_folder_bakery_did_not_make_is_kept(
    cli: Cli, tiny: Tiny, tmp_path: Path, kind: str
) -> None:
    failed = tmp_path / "out.failed"
    if kind == "folder":
        failed.mkdir()
        (failed / "thesis.tex").write_text("years of work\n")
    elif kind == "file":
        failed.write_text("years of work\n")
    else:
        (tmp_path / "real").mkdir()
        os.symlink(tmp_path / "real", failed)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert os.path.lexists(failed)
    if kind == "folder":
        assert (failed / "thesis.tex").read_text() == "years of work\n"


def test_out_inside_the_cache_is_refused(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    from tests.support.repos import git_repo

    git_repo(tiny.src, {})
    spec = f"git+file://{tiny.src}@main"
    assert cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "one").exit_code == 0
    (entry,) = [p for p in (tmp_path / "cache" / "trees").iterdir() if p.is_dir()]
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", entry / "inside")
    refused(r, "inside bakery's cache")
    assert not (entry / "inside").exists()


def test_apply_writes_nothing_in_the_working_directory(
    cli: Cli, tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("BAKERY_HOME")
    r = cli("apply", tiny.series, "--vllm", tiny.src, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert list(work.iterdir()) == []
    from bakery.commands.verify import last_tree
    from bakery.context import Context

    assert (
        last_tree(Context.here(), "demo") == tmp_path / "out"
    )  # verify's default, kept in the cache


# --- the one output writer ---------------------------------------------------------------------


def test_json_dash_is_stdout(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["status"] == "baked"  # the table went to stderr
    assert not (tmp_path / "-").exists()


def test_dev_stdout_is_written_not_replaced(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    before = os.lstat("/dev/stdout")
    r = cli("check", "demo", "--vllm", tiny.src, "--json", "/dev/stdout")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["status"] == "checked"
    after = os.lstat("/dev/stdout")
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_fifo_receives_the_report(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    r = cli("check", "demo", "--vllm", tiny.src, "--json", fifo)
    reader.join(30)
    assert r.exit_code == 0, r.output
    assert json.loads(got[0])["status"] == "checked"
    assert fifo.is_fifo()


def test_symlink_target_receives_the_report(cli: Cli, tiny: Tiny, tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    target = tmp_path / "reports" / "r.json"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "r.json"
    os.symlink(target, link)
    r = cli("check", "demo", "--vllm", tiny.src, "--json", link)
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["status"] == "checked"
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["r.json"]


def test_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "r.json"
    os.symlink(tmp_path / "made" / "r.json", link)
    outputs.write_json(link, {"a": 1})
    assert link.is_symlink()
    assert json.loads((tmp_path / "made" / "r.json").read_text()) == {"a": 1}


def test_regular_file_is_replaced_whole(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    p = tmp_path / "d" / "r.json"
    p.write_text("x" * 10_000)
    outputs.write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    assert [q.name for q in (tmp_path / "d").iterdir()] == ["r.json"]
