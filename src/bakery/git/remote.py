"""Talking to other repositories: clone and fetch, through GitPython (bakery's choice for
the network side of git); everything that reads a repository goes through cmd.py.

GitPython refuses unsafe transports (``ext::``) and options smuggled in a URL. Its errors
hold git's whole stderr quoted inside its own text; ``one_line`` takes git's own
``fatal:`` line back out of it, so that a failure reads as git said it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from bakery.git import cmd
from bakery.sources.urls import redact_text, split_userinfo


class RemoteError(cmd.GitError):
    """A clone or fetch that failed; the message is git's own line, credentials hidden."""


def one_line(stderr: str) -> str:
    """git's error out of GitPython's rendering of stderr (``  stderr: '...'``)."""
    text = stderr.strip()
    if text.startswith("stderr:"):
        text = text[len("stderr:") :].strip()
    text = text.strip("'\"")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for prefix in ("fatal:", "error:", "ERROR:"):
        picked = [line for line in lines if line.startswith(prefix)]
        if picked:
            return picked[0][len(prefix) :].strip()
    return lines[-1] if lines else "git failed"


def _git_error(url: str, e: Exception) -> RemoteError:
    import git as gitpython

    if isinstance(e, gitpython.GitCommandError):
        detail = one_line(str(e.stderr or ""))
    elif isinstance(e, gitpython.exc.UnsafeProtocolError | gitpython.exc.UnsafeOptionError):
        detail = "refused: that transport or option runs commands (ext::, --upload-pack)"
    else:  # UnsafeProtocolError, NoSuchPathError...
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return RemoteError(redact_text(detail, url))


def clone_bare(url: str, dest: Path) -> None:
    """A bare mirror of url at dest, built beside it and renamed into place. The mirror's
    configuration keeps the URL without its credentials (fetch gives them again)."""
    import git as gitpython  # slow to import: only a git+ source needs it

    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".clone-"))
    try:
        gitpython.Repo.clone_from(url, tmp, bare=True, env=cmd.clean_env())
        cmd.git(tmp, "config", "remote.origin.url", split_userinfo(url)[0])
        os.replace(tmp, dest)
    except (gitpython.exc.GitError, ValueError) as e:
        raise _git_error(url, e) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch(url: str, mirror: Path) -> None:
    """Every branch and tag of url into the mirror."""
    import git as gitpython

    try:
        gitpython.Repo(mirror).git.fetch(
            "--quiet", "--tags", "--", url, "+refs/heads/*:refs/heads/*", env=cmd.clean_env()
        )
    except (gitpython.exc.GitError, ValueError) as e:
        raise _git_error(url, e) from None
