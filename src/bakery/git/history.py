"""Reading upstream history, for the porter: which upstream commits between two releases
touched the lines a hunk needed (what ``git log -L`` answers).

Read through GitPython (the design card's library for repository work), with the same
environment policy as every other git process (:func:`bakery.git.cmd.clean_env`): the
checkout is the user's, so nothing of its configuration that runs code is honoured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakery.errors import SourceError
from bakery.git import cmd

#: Configuration of the checkout that would run code while git reads history.
_NO_FOREIGN_CODE = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "diff.external=")


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str

    def line(self) -> str:
        return f"{self.sha[:12]} {self.subject}"


def _repo(path: Path) -> Any:
    import git as gitpython  # GitPython, imported lazily: it is slow to import

    try:
        repo = gitpython.Repo(path)
    except (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError):
        raise SourceError(f"--upstream {path}: not a git checkout of vLLM") from None
    repo.git.update_environment(**cmd.clean_env())
    return repo


def release_ref(repo_path: Path, version: str) -> str:
    """The tag of a release in an upstream checkout (v0.34.0 or 0.34.0)."""
    repo = _repo(repo_path)
    names = {t.name for t in repo.tags}
    for name in (f"v{version}", version):
        if name in names:
            return name
    raise SourceError(f"--upstream {repo_path}: no tag v{version} (fetch the release tags)")


def touching(
    repo_path: Path, path: str, first: int, last: int, since: str, until: str
) -> list[Commit]:
    """Commits in since..until that changed lines first..last (1-based, as of ``since``)
    of path, newest first."""
    import git as gitpython

    repo = _repo(repo_path)
    a, b = release_ref(repo_path, since), release_ref(repo_path, until)
    try:
        # -L diffs file versions: no textconv or external diff driver of the checkout runs
        out = repo.git(c=list(_NO_FOREIGN_CODE)).log(
            "--no-textconv",
            "--no-ext-diff",
            f"-L{first},{max(first, last)}:{path}",
            "-s",
            "--format=%H%x09%s",
            f"{a}..{b}",
        )
    except gitpython.GitCommandError as e:
        lines = str(e.stderr).strip().splitlines()
        why = lines[-1] if lines else "git log failed"
        raise SourceError(f"--upstream {repo_path}: {why.strip(chr(39))}") from None
    commits = []
    for line in out.splitlines():
        sha, _, subject = line.partition("\t")
        if len(sha) == 40:
            commits.append(Commit(sha, subject))
    return commits
