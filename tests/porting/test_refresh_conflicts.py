"""Refresh the way quilt refresh works, and conflict trees that git understands (issue 16).

Releases are put into the test's own cache (tests.support.releases.release); git is the real
git, asked what it sees: ``git status``, ``git ls-files -u``, ``git mergetool``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from tests.support.paths import SAMPLES
from tests.support.releases import BASE, release, series
from tests.support.repos import commits, git
from tests.support.series import make_series, udiff
from tests.support.trees import write_files

Cli = Callable[..., Result]
TOML = 'base = "1.0.0"\nroot = "vllm"\nstrip = 1\n'
OTHER = "".join(f"other{i}\n" for i in range(1, 11))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


# --- refresh ------------------------------------------------------------------------------------


def test_a_tree_of_another_release_than_release_is_refused(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": BASE.replace("line13\n", "thirteen\n")})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    assert cli("apply", "s", "--vllm", "1.1.0", "--out", "out").exit_code == 0
    before = snapshot(home)
    r = cli("refresh", "s", "--tree", "out", "--release", "1.0.0")
    assert r.exit_code == 2
    assert "out was baked from vLLM 1.1.0, not --release 1.0.0" in r.stderr
    assert snapshot(home) == before  # nothing written: no port, the series' diff as it was
    # the tree's own release, spelled another way, is accepted: a port for 1.1.0
    r = cli("refresh", "s", "--tree", "out", "--release", "v1.1")
    assert r.exit_code == 0, r.output
    assert (home / "patches/s/1.1.0/01-change.diff").is_file()
    assert "bakery apply s --vllm 1.1.0" in r.stdout


def test_edits_to_files_no_diff_touches_need_a_home(cli: Cli, home: Path, tmp_path: Path) -> None:
    release("1.0.0", {"vllm/mod.py": BASE, "vllm/other.py": OTHER})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    own = home / "launcher/s/diffs/01-change.diff"
    original = own.read_bytes()
    assert cli("apply", "s", "--vllm", "1.0.0", "--out", "out").exit_code == 0
    write_files(
        tmp_path / "out",
        {"vllm/other.py": OTHER.replace("other5\n", "FIVE\n"), "vllm/new.py": "N = 1\n"},
    )
    before = snapshot(home)
    r = cli("refresh", "s", "--tree", "out")
    assert r.exit_code == 2
    assert "vllm/new.py, vllm/other.py changed, but no diff touches them" in r.stderr
    assert "--into NN-name.diff or --new-diff NAME" in r.stderr
    assert snapshot(home) == before
    # --new-diff: a diff of their own, numbered after the last; 01 keeps its bytes
    r = cli("refresh", "s", "--tree", "out", "--new-diff", "extras")
    assert r.exit_code == 0, r.output
    new = (home / "launcher/s/diffs/02-extras.diff").read_text()
    assert "+FIVE" in new and "+N = 1" in new and "FIFTEEN" not in new
    assert own.read_bytes() == original
    assert "01-change.diff  unchanged" in r.stdout and "02-extras.diff  2 files, +2 -1" in r.stdout
    (home / "launcher/s/diffs/02-extras.diff").unlink()
    # --into: into a diff the user names
    r = cli("refresh", "s", "--tree", "out", "--into", "01-change.diff")
    assert r.exit_code == 0, r.output
    text = own.read_text()
    assert "+FIFTEEN" in text and "+FIVE" in text and "+N = 1" in text
    assert cli("refresh", "s", "--tree", "out", "--into", "09-nope.diff").exit_code == 2


def test_an_unchanged_diff_keeps_its_bytes_and_a_rewritten_one_its_header(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    release("1.0.0", {"vllm/mod.py": BASE, "vllm/other.py": OTHER})
    header = "From: Ann <ann@example.invalid>\nSubject: [PATCH] the change\n\nWhy.\n---\n"
    first = "header line kept\n" + udiff("mod.py", BASE, BASE.replace("line3\n", "THREE\n"))
    second = header + udiff("other.py", OTHER, OTHER.replace("other2\n", "TWO\n"))
    make_series(home, "s", {"01-a.diff": first, "02-b.diff": second}, TOML)
    assert cli("apply", "s", "--vllm", "1.0.0", "--out", "out").exit_code == 0
    other = tmp_path / "out/vllm/other.py"
    other.write_text(other.read_text().replace("other9\n", "NINE\n"))
    r = cli("refresh", "s", "--tree", "out")
    assert r.exit_code == 0, r.output
    assert (home / "launcher/s/diffs/01-a.diff").read_text() == first
    b = (home / "launcher/s/diffs/02-b.diff").read_text()
    assert b.startswith(header) and "+TWO" in b and "+NINE" in b
    assert not (home / "patches").exists()


# --- conflict trees -------------------------------------------------------------------------------


def conflicting_series(home: Path) -> None:
    """01 applies on 1.1.0; 02 conflicts there (both changed line15); 03 would apply."""
    release("1.0.0", {"vllm/mod.py": BASE, "vllm/other.py": OTHER, "vllm/third.py": OTHER})
    release(
        "1.1.0",
        {
            "vllm/mod.py": BASE.replace("line15\n", "fifteen\n"),
            "vllm/other.py": OTHER,
            "vllm/third.py": OTHER,
        },
    )
    make_series(
        home,
        "s",
        {
            "01-other.diff": udiff("other.py", OTHER, OTHER.replace("other1\n", "ONE\n")),
            "02-mod.diff": udiff("mod.py", BASE, BASE.replace("line15\n", "FIFTEEN\n")),
            "03-third.diff": udiff("third.py", OTHER, OTHER.replace("other3\n", "THREE\n")),
        },
        TOML,
    )


def test_a_conflict_tree_is_one_git_understands(cli: Cli, home: Path, tmp_path: Path) -> None:
    conflicting_series(home)
    r = cli("apply", "s", "--vllm", "1.1.0", "--out", "out", "--keep-failed")
    assert r.exit_code == 1
    failed = tmp_path / "out.failed"
    # stopped as git am stops: 01 is a commit, 02 is left to resolve, 03 is not applied
    assert [s for _, s, _ in commits(failed)] == ["pristine vLLM 1.1.0", "01-other.diff"]
    assert (failed / "vllm/third.py").read_text() == OTHER
    # the conflict is in git's index: UU, three stages; .bakery/ is not shown
    assert git(failed, "status", "--porcelain") == "UU vllm/mod.py\n"
    stages = {
        int(line.split()[2]): git(failed, "cat-file", "blob", line.split()[1])
        for line in git(failed, "ls-files", "-u", "--", "vllm/mod.py").splitlines()
    }
    assert stages == {
        1: BASE,
        2: BASE.replace("line15\n", "fifteen\n"),
        3: BASE.replace("line15\n", "FIFTEEN\n"),
    }
    # markers with a diff3 base section
    text = (failed / "vllm/mod.py").read_text()
    assert (
        "<<<<<<< release\nfifteen\n||||||| base\nline15\n=======\nFIFTEEN\n>>>>>>> series\n" in text
    )
    # git mergetool finds the three sides (a tool that takes the series' side)
    git(
        failed,
        "-c",
        'mergetool.take.cmd=cp "$REMOTE" "$MERGED"',
        "-c",
        "mergetool.take.trustExitCode=true",
        "-c",
        "mergetool.keepBackup=false",
        "mergetool",
        "--no-prompt",
        "--tool=take",
        "vllm/mod.py",
    )
    assert git(failed, "status", "--porcelain") == "M  vllm/mod.py\n"
    # refresh: a port with 01 and the resolved 02; 03 kept as it is, for the next apply
    r = cli("refresh", "s", "--tree", failed)
    assert r.exit_code == 0, r.output
    port = home / "patches/s/1.1.0"
    assert sorted(p.name for p in port.iterdir()) == [
        "01-other.diff",
        "02-mod.diff",
        "03-third.diff",
        "FROM.toml",
    ]
    assert (port / "03-third.diff").read_bytes() == (
        home / "launcher/s/diffs/03-third.diff"
    ).read_bytes()
    r = cli("apply", "s", "--vllm", "1.1.0", "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out/vllm/mod.py").read_text() == BASE.replace("line15\n", "FIFTEEN\n")
    assert (tmp_path / "out/vllm/third.py").read_text() == OTHER.replace("other3\n", "THREE\n")
    assert json.loads((tmp_path / "r.json").read_text())["port"].endswith("patches/s/1.1.0")


def test_commits_keep_a_format_patch_subject_and_author(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    src = write_files(
        tmp_path / "src",
        {
            "pkg/app.py": "import os\n\n\ndef main():\n    return 1\n",
            "pkg/old.py": "obsolete\nstuff\n",
            "tools/run.sh": "#!/bin/sh\n",
        },
    )
    folder = make_series(
        home,
        "fp",
        {"01-change.diff": "", "02-plain.diff": udiff("pkg/app.py", "import os\n", "import os\n")},
        'root = ""\nstrip = 1\n',
    )
    shutil.copyfile(SAMPLES / "format_patch.diff", folder / "diffs/01-change.diff")
    (folder / "diffs/02-plain.diff").write_text(
        udiff("pkg/old2.py", "", "x\n", old="a", new="b").replace(
            "--- a/pkg/old2.py", "--- /dev/null"
        )
    )
    r = cli("apply", "fp", "--vllm", src, "--out", "out")
    assert r.exit_code == 0, r.output
    log = git(tmp_path / "out", "log", "--reverse", "--format=%s|%an <%ae>|%aI|%cn|%b%x00")
    entries = [e.strip() for e in log.split("\0") if e.strip()]
    first, plain = entries[1], entries[2]
    subject, author, date, committer, body = first.split("|", 4)
    assert (subject, author, date, committer) == (
        "change",
        "t <t@x>",
        "2026-12-02T13:23:49+00:00",
        "bakery",
    )
    assert "Bakery-Diff: 01-change.diff" in body and "Bakery-Diff-Sha256: " in body
    assert plain.split("|")[:2] == ["02-plain.diff", "bakery <bakery@localhost>"]
