"""``--vllm git+URL@REF`` against local repositories (file:// and plain paths): the
commit is recorded, a pinned commit rebakes with the remote gone, and every failure is one
readable line without credentials."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from bakery.sources.gitsource import split_spec
from tests.support.repos import git
from tests.support.trees import Tiny

SECRET = "s3cret-Pa55"


@pytest.fixture
def upstream(tiny: Tiny) -> Path:
    """The tiny tree as a git repository with one commit on main."""
    git(tiny.src, "init", "-q")
    git(tiny.src, "add", "-A")
    git(tiny.src, "commit", "-q", "-m", "upstream")
    return tiny.src


def manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / ".bakery" / "manifest.json").read_text())


def one_error_line(r: Result) -> str:
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    # GitPython's wrapping (stderr: '...') is gone: no stray quote, no "stderr"
    assert "Traceback" not in r.output and "stderr" not in r.output
    assert not lines[0].endswith((".'", "\\n'"))
    return lines[0]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("ssh://git@host.invalid/repo", ("ssh://git@host.invalid/repo", "HEAD")),
        ("ssh://git@host.invalid/repo@v1", ("ssh://git@host.invalid/repo", "v1")),
        (
            "https://me:pw@host.invalid/r.git@feature/x",
            ("https://me:pw@host.invalid/r.git", "feature/x"),
        ),
        ("git@host.invalid:org/repo", ("git@host.invalid:org/repo", "HEAD")),
        ("git@host.invalid:org/repo@feature/x", ("git@host.invalid:org/repo", "feature/x")),
        ("/p/repo@abc1234", ("/p/repo", "abc1234")),
        ("file:///p/repo", ("file:///p/repo", "HEAD")),
    ],
)
def test_split_spec(spec: str, want: tuple[str, str]) -> None:
    assert split_spec(spec) == want


@pytest.mark.parametrize("scheme", ["file://", ""])
def test_git_source_records_the_commit(
    scheme: str, upstream: Path, cli: Callable[..., Result]
) -> None:
    head = git(upstream, "rev-parse", "HEAD").strip()
    r = cli("apply", "demo", "--vllm", f"git+{scheme}{upstream}@main", "--out", "out")
    assert r.exit_code == 0, r.output
    vllm = manifest(Path("out"))["vllm"]
    ident = vllm.pop("identity")
    assert vllm == {
        "version": None,
        "source": f"{scheme}{upstream}@{head}",
        "sha256": ident["tree_sha256"],  # its files' listing (sources/identity.py)
        "commit": head,
    }
    # no release tag, no PKG-INFO: the commit is its own identity
    assert ident["version"] == f"0+g{head[:12]}" and ident["pristine"] is False


def test_local_checkout_records_its_commit(upstream: Path, cli: Callable[..., Result]) -> None:
    r = cli("apply", "demo", "--vllm", upstream, "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    head = git(upstream, "rev-parse", "HEAD").strip()
    assert manifest(Path("out"))["vllm"]["commit"] == head
    assert json.loads(Path("r.json").read_text())["vllm"]["commit"] == head


def test_pinned_commit_rebakes_offline(
    upstream: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    head = git(upstream, "rev-parse", "HEAD").strip()
    spec = f"git+file://{upstream}@{head}"
    assert cli("apply", "demo", "--vllm", spec, "--out", "one").exit_code == 0
    shutil.rmtree(upstream)  # the remote is gone: nothing can be fetched
    r = cli("apply", "demo", "--vllm", spec, "--out", "two")
    assert r.exit_code == 0, r.output
    assert manifest(Path("two"))["head"] == manifest(Path("one"))["head"]
    # a branch must be fetched: with the remote gone, that is one clear line
    line = one_error_line(cli("apply", "demo", "--vllm", f"git+file://{upstream}@main"))
    assert line.startswith(f"error: git+file://{upstream}@main: ")
    assert "does not appear to be a git repository" in line or "does not exist" in line


def test_abbreviated_commit_known_to_the_mirror_is_not_fetched(
    upstream: Path, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    head = git(upstream, "rev-parse", "HEAD").strip()
    assert cli("apply", "demo", "--vllm", f"git+{upstream}@main", "--out", "one").exit_code == 0
    shutil.rmtree(tmp_path / "cache" / "trees")  # only the mirror is left
    moved = upstream.with_name("gone")
    upstream.rename(moved)
    r = cli("apply", "demo", "--vllm", f"git+{upstream}@{head[:10]}", "--out", "two")
    assert r.exit_code == 0, r.output
    assert manifest(Path("two"))["vllm"]["commit"] == head


def test_missing_repository_is_one_readable_line(
    tmp_path: Path, tiny: Tiny, cli: Callable[..., Result]
) -> None:
    line = one_error_line(cli("apply", "demo", "--vllm", f"git+{tmp_path}/nowhere@main"))
    assert (
        line
        == f"error: git+{tmp_path}/nowhere@main: repository '{tmp_path}/nowhere' does not exist"
    )


def test_unknown_ref_is_one_line(upstream: Path, cli: Callable[..., Result]) -> None:
    line = one_error_line(cli("apply", "demo", "--vllm", f"git+{upstream}@no-such-branch"))
    assert (
        line
        == f"error: git+{upstream}@no-such-branch: the repository has no commit 'no-such-branch'"
    )


def test_credentials_in_a_git_url_are_not_printed(tiny: Tiny, cli: Callable[..., Result]) -> None:
    spec = f"git+http://me:{SECRET}@127.0.0.1:9/repo.git@main"
    line = one_error_line(cli("apply", "demo", "--vllm", spec))
    assert SECRET not in line
    assert line.startswith("error: git+http://***@127.0.0.1:9/repo.git@main: ")


def test_transports_that_run_commands_are_refused(
    tiny: Tiny, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    lines = []
    for spec in (f"ext::sh -c touch% {tmp_path}/pwned", f"--upload-pack=touch {tmp_path}/pwned"):
        lines.append(one_error_line(cli("apply", "demo", "--vllm", f"git+{spec}")))
        assert lines[-1].startswith(f"error: git+{spec}@HEAD: ")
    assert not (tmp_path / "pwned").exists()
    refused = "refused: that transport or option runs commands (ext::, --upload-pack)"
    assert lines[0].endswith(refused)
    assert lines[1].endswith("does not exist")  # a path, never an option
