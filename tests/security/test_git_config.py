"""Class 1: foreign code through git configuration.

git reads the configuration of every repository bakery runs it in: a local --vllm
checkout, an existing --out tree, refresh --tree, cache entries and cached git+ mirrors.
Each case plants a program in one of them (core.fsmonitor, a hook, a filter driver, an
include, an upload-pack) that would leave a marker file if it ran, then runs bakery:
the marker never appears; a foreign repository bakery cannot neutralise is refused with
one line; a cache entry or mirror that was changed is detected and built again.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.git import cmd
from bakery.git.repo import NEW_CONFIG
from tests.support.cli import refused
from tests.support.repos import git, git_repo, hook, trap
from tests.support.trees import Tiny

Cli = Callable[..., Result]
SRC = Path(__file__).resolve().parents[2] / "src" / "bakery"


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PWNED"


def poison(git_dir: Path, marker: Path) -> None:
    """Every fixed-name program git could start from this repository."""
    cfg = git_dir / "config"
    with cfg.open("a") as fh:
        fh.write(
            f"[core]\n\tfsmonitor = {trap(marker)}\n\tsshCommand = {trap(marker)}\n"
            f"\taskPass = {trap(marker)}\n"
            f"[credential]\n\thelper = !{trap(marker)}\n"
            f"[uploadpack]\n\tpackObjectsHook = {trap(marker)}\n"
        )
    for name in (
        "post-index-change",
        "reference-transaction",
        "pre-commit",
        "post-commit",
        "post-checkout",
        "pre-auto-gc",
    ):
        hook(git_dir, name, marker)


def test_local_checkout_fsmonitor_and_hooks_never_run(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path
) -> None:
    git_repo(tiny.src, {})
    poison(tiny.src / ".git", marker)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert not marker.exists()
    # the same from the issue: git -C R config core.fsmonitor 'touch P; false'
    r = cli("check", "demo", "--vllm", tiny.src)
    assert r.exit_code == 0, r.output
    assert not marker.exists()


def test_submodule_configuration_is_never_reached(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path
) -> None:
    """git status would recurse into a submodule, whose configuration bakery does not
    audit: it never goes into one."""
    other = git_repo(tmp_path / "other", {"f.py": "x = 1\n", ".gitattributes": "* filter=x\n"})
    git_repo(tiny.src, {})
    git(tiny.src, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(other), "sub")
    git(tiny.src, "commit", "-q", "-m", "sub")
    sub_git = tiny.src / ".git" / "modules" / "sub"
    poison(sub_git, marker)
    with (sub_git / "config").open("a") as fh:
        fh.write(f'[filter "x"]\n\tclean = {trap(marker)}\n')
    (tiny.src / "sub" / "f.py").write_text("x = 2\n")  # dirty: status would re-hash it
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert not marker.exists()


@pytest.mark.parametrize(
    "config",
    [
        '[filter "x"]\n\tclean = {trap}\n\tsmudge = {trap}\n',
        '[filter "lfs"]\n\tprocess = {trap}\n',
        "[include]\n\tpath = /tmp/elsewhere.gitconfig\n",
        '[includeIf "gitdir:/"]\n\tpath = /tmp/elsewhere.gitconfig\n',
        "[core]\n\tworktree = /\n",
    ],
)
def test_local_checkout_with_unneutralisable_config_is_refused(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path, config: str
) -> None:
    git_repo(tiny.src, {".gitattributes": "* filter=x\n"})
    with (tiny.src / ".git" / "config").open("a") as fh:
        fh.write(config.format(trap=trap(marker)))
    (tiny.src / "vllm" / "__init__.py").write_text("# touched: git status must re-hash it\n")
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out", "--allow-dirty")
    refused(r, "git configuration sets")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_hostile_cache_entry_runs_nothing_and_is_rebuilt(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path
) -> None:
    """The end-to-end scenario: a CI cache restored from elsewhere whose entry's
    .git/config sets core.fsmonitor (and hooks); the next bake runs none of it, detects
    the entry and builds it again."""
    git_repo(tiny.src, {})
    spec = f"git+file://{tiny.src}@main"
    r = cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "one")
    assert r.exit_code == 0, r.output
    cache = tmp_path / "cache"
    (entry,) = [p for p in (cache / "trees").iterdir() if p.is_dir()]
    poison(entry / ".git", marker)
    (mirror,) = [p for p in (cache / "git").iterdir() if p.is_dir()]
    poison(mirror, marker)
    r = cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert not marker.exists()
    assert "was changed since bakery built it" in r.stderr  # detected...
    # ... and rebuilt: the entry holds only what bakery writes
    assert (entry / ".git" / "config").read_text() == NEW_CONFIG
    assert not (entry / ".git" / "hooks" / "post-index-change").exists()
    assert not (mirror / "hooks" / "reference-transaction").exists()
    assert "fsmonitor" not in (mirror / "config").read_text()
    assert json.loads((tmp_path / "two/.bakery/manifest.json").read_text())["status"] == "baked"


def test_poisoned_mirror_cannot_redirect_the_fetch(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path
) -> None:
    git_repo(tiny.src, {})
    spec = f"git+file://{tiny.src}@main"
    assert cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "one").exit_code == 0
    (mirror,) = [p for p in (tmp_path / "cache" / "git").iterdir() if p.is_dir()]
    with (mirror / "config").open("a") as fh:
        fh.write(
            f'[remote "origin"]\n\turl = ext::sh -c "{trap(marker)}"\n'
            f"\tuploadpack = {trap(marker)}\n"
            f'[url "ext::sh -c touch% {marker}"]\n\tinsteadOf = file://\n'
        )
    r = cli("apply", "demo", "--vllm", spec, "--out", tmp_path / "two")
    assert r.exit_code == 0, r.output
    assert not marker.exists()


def test_existing_out_and_refresh_tree_run_nothing(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path
) -> None:
    out = tmp_path / "out"
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    poison(out / ".git", marker)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", out)  # looks at out's status
    assert not marker.exists()
    r = cli("refresh", "demo", "--tree", out, "--release", "1.0")
    assert not marker.exists(), r.output


@pytest.mark.parametrize(
    "url",
    [
        "git+ext::sh -c touch% {marker}",
        "git+ext::sh -c 'touch {marker}'@main",
        "git+fd::3",
        "git+ftp://127.0.0.1/x.git@main",
    ],
)
def test_remote_helpers_and_other_transports_refused(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path, url: str
) -> None:
    r = cli("apply", "demo", "--vllm", url.format(marker=marker), "--out", tmp_path / "out")
    refused(r)
    assert not marker.exists()


def test_policy_keeps_the_ownership_check_and_forces_programs_off() -> None:
    base = " ".join(cmd._BASE)
    assert "safe.directory" not in base
    for key in (
        "core.fsmonitor=false",
        f"core.hooksPath={cmd.os.devnull}",
        "protocol.ext.allow=never",
    ):
        assert key in base
    env = cmd.clean_env()
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == cmd.os.devnull
    assert env["GIT_PROTOCOL_FROM_USER"] == "0"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the checkout to another user")
def test_checkout_owned_by_another_user_is_refused(
    cli: Cli, tiny: Tiny, tmp_path: Path, marker: Path
) -> None:
    """git's ownership check stays on: a repository another user owns is refused."""
    git_repo(tiny.src, {})
    poison(tiny.src / ".git", marker)
    for dirpath, dirnames, filenames in os.walk(tiny.src):
        for n in [dirpath, *(os.path.join(dirpath, f) for f in dirnames + filenames)]:
            os.lchown(n, 4242, 4242)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    refused(r, "owned by another user")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_only_the_git_package_starts_git() -> None:
    """No module outside bakery/git/ starts a git process or imports GitPython."""
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.parent.name == "git":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names]
                mod = getattr(node, "module", None) or ""
                if "git" in names or mod == "git" or mod.startswith("git."):
                    offenders.append(f"{path.name}: imports GitPython")
            if isinstance(node, ast.Constant) and node.value == "git":
                parent_calls = [
                    n
                    for n in ast.walk(tree)
                    if isinstance(n, ast.List) and any(e is node for e in n.elts)
                ]
                if parent_calls:
                    offenders.append(f"{path.name}:{node.lineno}: a command list starting git")
    assert offenders == []


def test_merge_file_reads_no_repository(
    tmp_path: Path, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git merge-file runs in a new folder with discovery stopped: even a TMPDIR inside a
    hostile repository does not make git read its configuration."""
    evil = tmp_path / "evil"
    git_repo(evil, {"f": "x\n"})
    with (evil / ".git" / "config").open("a") as fh:
        fh.write(f"[core]\n\tfsmonitor = {trap(marker)}\n[include]\n\tpath = {marker}.cfg\n")
    git(evil, "config", "merge.conflictStyle", "diff3")
    (tmp_path / "PWNED.cfg").write_text("[merge]\n\tconflictStyle = diff3\n")
    monkeypatch.setenv("TMPDIR", str(evil))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    out, conflicts = cmd.merge_file(b"a\nB\nc\n", b"a\nb\nc\n", b"a\nb\nC\n", ("x", "y", "z"))
    assert conflicts == 1
    assert b"|||||||" not in out  # the repository's (included) conflictStyle was not read
    assert not marker.exists()
    git(evil, "status")  # the repository is intact
