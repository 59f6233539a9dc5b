"""Reading a vLLM checkout's history (the cached mirror of a ``git+`` source): the last
release before a commit, and the commits since then that touched given lines of a file.

Through cmd.py, the one git door (its configuration policy and clean environment: no
user or system config, no program a repository configures, no prompts), with
``diff.external`` forced off as well, so that a foreign repository's config or hooks never
run; the mirror read is one remote.mirror_intact accepts (gitsource.git_mirror). GitPython
did this once (issue 13); it only launched git, so it went.
Lines are followed through history by ``git log -L``, which moves a range with the edits
above it: a commit counts when it changed the range as it stood at that commit, not only
the lines as they are now.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bakery.git import cmd as gitutil


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str


def _git(repo: Path, *args: str) -> str:
    if args[0] == "log":  # -L diffs file versions: no textconv or external diff runs
        args = ("log", "--no-textconv", "--no-ext-diff", *args[1:])
    proc = gitutil.git(repo, *args, extra={"diff.external": ""}, raw=True)
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        raise gitutil.GitError(f"git {args[0]}: {lines[-1] if lines else 'failed'}")
    return proc.stdout.decode("utf-8", errors="surrogateescape")


def last_release(repo: Path, commit: str) -> str | None:
    """The newest release tag (``vX.Y.Z``) that the commit contains, or None."""
    try:
        return _git(repo, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", commit).strip()
    except gitutil.GitError:
        return None


def exists(repo: Path, rev: str) -> bool:
    try:
        _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except gitutil.GitError:
        return False
    return True


def _parse(out: str) -> list[Commit]:
    commits = []
    for line in out.splitlines():
        sha, _, subject = line.partition("\t")
        if len(sha) == 40:
            commits.append(Commit(sha, subject))
    return commits


def touching(
    repo: Path, since: str, until: str, path: str, lines: tuple[int, int] | None = None
) -> list[Commit]:
    """Commits in since..until that changed the file, or only lines (a, b) of it as they
    are at ``until``; oldest first."""
    spec = f"{since}..{until}"
    fmt = "--format=%H%x09%s"
    if lines is None:
        out = _git(repo, "log", "--reverse", fmt, spec, "--", path)
    else:
        a, b = lines
        # -L does not take --reverse; the order is put right below
        out = _git(repo, "log", fmt, "--no-patch", f"-L{a},{b}:{path}", spec)
        return list(reversed(_parse(out)))
    return _parse(out)


def release_ref(repo: Path, version: str) -> str:
    """The tag of a release in an upstream checkout (v0.34.0, or 0.34.0); a commit id (a
    port to a ref: ``bakery port --vllm git+URL@REF``) is itself."""
    commit = len(version) == 40 and all(c in "0123456789abcdef" for c in version)
    if commit and exists(repo, version):
        return version
    for name in (f"v{version}", version):
        if exists(repo, f"refs/tags/{name}"):
            return name
    raise gitutil.GitError(f"{repo}: no tag v{version} (fetch the release tags)")


def line(c: Commit) -> str:
    return f"{c.sha[:12]} {c.subject}"
