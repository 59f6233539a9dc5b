"""Remote git sources (``--vllm git+URL@REF``): a bare mirror in the cache, fetched through
the one git door (cmd.py) under its policy, with protocols narrowed to the one scheme the
user typed.

The URL is passed on each fetch and never stored in the mirror (no ``remote.origin``), so
a token in it is never written to disk, and a mirror restored from another run cannot
redirect the fetch (``remote.*.url``, ``uploadpack``) or run anything: a mirror whose
configuration holds more than ``git init --bare`` writes is removed and fetched again.
Hand-written over GitPython: GitPython starts git its own way, outside this policy
(history.py reads history through cmd.py as well). A failure is git's own line
(its ``fatal:`` line, not the last one), with credentials hidden.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from bakery.git import cmd
from bakery.git.repo import real_store
from bakery.safety import cachepolicy, limits
from bakery.safety.urls import redact, redact_text

#: What a mirror's config may hold: what `git init --bare` writes.
_MIRROR_KEYS = {
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
}
_SCHEMES = ("https", "http", "ssh", "git", "file")
_SCP = re.compile(r"^[A-Za-z0-9._\-]+@[A-Za-z0-9._\-]+:")
_RUNS = "refused: that transport or option runs commands (ext::, --upload-pack)"


class RemoteError(cmd.GitError):
    """A transport refused, or a fetch that failed: git's own line, credentials hidden."""


def one_line(stderr: str) -> str:
    """git's error out of its stderr: the first ``fatal:``/``error:`` line (git prints the
    cause first and "Could not read from remote repository" after it)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for prefix in ("fatal:", "error:", "ERROR:"):
        picked = [line for line in lines if line.startswith(prefix)]
        if picked:
            return picked[0][len(prefix) :].strip()
    return lines[-1] if lines else "git failed"


def scheme(url: str) -> str:
    """The transport git would use for url; RemoteError for one bakery does not allow."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", url)
    if m:
        name = m.group(1).lower()
        if name.startswith("git+"):
            name = name[4:]
        if name in _SCHEMES:
            return name
        raise RemoteError(f"refused: the {name!r} transport is not allowed")
    if "::" in url.split("/", 1)[0]:  # ext::cmd, fd::, <transport>::<address>
        raise RemoteError(_RUNS)
    if _SCP.match(url):
        return "ssh"
    return "file"  # a plain path


def _rules(url: str) -> dict[str, str]:
    allowed = scheme(url)
    rules = {
        "protocol.allow": "never",
        "protocol.ext.allow": "never",
        "protocol.file.allow": "never",
    }
    rules[f"protocol.{allowed}.allow"] = "always"
    return rules


#: Files that make git read another repository than the mirror (its config, its objects):
#: a gitfile or repository in it (discovery looks for ``.git`` first), ``commondir``
#: (``$GIT_COMMON_DIR/config`` is read), alternates, grafts, a worktree's admin files.
_REDIRECTS = (
    ".git",
    "commondir",
    "gitdir",
    "config.worktree",
    "objects/info/alternates",
    "objects/info/http-alternates",
    "info/grafts",
    "worktrees",
)


def _layout_intact(mirror: Path) -> bool:
    """The mirror is a bare repository of real folders and files that sends git nowhere
    else: as git reads it (git/repo.intact is the same for a cache entry's .git)."""
    if not cachepolicy.is_real_dir(mirror):
        return False
    if any(os.path.lexists(mirror / name) for name in _REDIRECTS):
        return False
    if (
        cachepolicy.regular(mirror / "config") is None
        or cachepolicy.regular(mirror / "HEAD") is None
    ):
        return False
    if not real_store(mirror):
        return False
    hooks = mirror / "hooks"
    if os.path.lexists(hooks):
        if not cachepolicy.is_real_dir(hooks):
            return False
        if any(not p.name.endswith(".sample") for p in hooks.iterdir()):
            return False
    return True


def mirror_intact(mirror: Path) -> bool:
    """The mirror holds only what bakery wrote, as git will read it: no configuration
    beyond `init --bare`'s (an include is a key too, never followed), no hook, nothing
    that sends git to another repository (``commondir``, a ``.git`` gitfile, alternates),
    no link or special file where git reads (safety.cachepolicy)."""
    try:
        if not _layout_intact(mirror):
            return False
        cachepolicy.read_bytes(mirror / "config", 1 << 20, "mirror config")
    except (OSError, cachepolicy.CacheRefused):
        return False
    listed = cmd.git(
        Path("/"),
        "config",
        "--file",
        str(mirror / "config"),
        "--no-includes",
        "--name-only",
        "--list",
        raw=True,
    )
    if listed.returncode != 0:
        return False
    keys = {
        k.strip().lower() for k in listed.stdout.decode(errors="replace").splitlines() if k.strip()
    }
    return keys <= _MIRROR_KEYS


def in_mirror(mirror: Path) -> list[str]:
    """git's options to use exactly the mirror as its repository (no discovery: a
    missing or broken mirror never makes git look in the folders above it)."""
    return [f"--git-dir={mirror}"]


def _local_path(url: str) -> str | None:
    """The folder a file-transport url names (None for other transports)."""
    if scheme(url) != "file":
        return None
    return url[len("file://") :] if url.lower().startswith("file://") else url


def fetch(url: str, mirror: Path) -> None:
    """Bring the mirror at ``mirror`` up to date with url (made if missing or not intact):
    branches and tags. RemoteError: git's own line."""
    rules = _rules(url)
    local = _local_path(url)
    if local is not None and (not local or not Path(local).exists()):
        # a path (never an option: it goes after "--"); said the way git clone says it
        raise RemoteError(f"repository '{redact(local)}' does not exist")
    if os.path.lexists(mirror) and not mirror_intact(mirror):
        cachepolicy.remove(mirror)  # a link is unlinked, never followed
    made = None
    if not mirror.exists():
        made = Path(tempfile.mkdtemp(dir=mirror.parent, prefix=".clone-"))
        cmd.git(made, "init", "--bare", "-q")
    try:
        proc = cmd.git(
            made or mirror,
            *in_mirror(made or mirror),
            "fetch",
            "--quiet",
            "--tags",
            "--no-write-fetch-head",
            "--",
            url,
            "+refs/heads/*:refs/heads/*",
            extra=rules,
            raw=True,
        )
        if proc.returncode != 0:
            raise RemoteError(redact_text(one_line(proc.stderr.decode(errors="replace")), url))
        if made is not None:
            os.replace(made, mirror)
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def resolve(mirror: Path, ref: str) -> str | None:
    """The commit ref names in the mirror, or None (never read as an option)."""
    if ref.startswith("-"):
        return None
    out = cmd.git(
        mirror,
        *in_mirror(mirror),
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{ref}^{{commit}}",
        check=False,
    )
    commit = out.strip()
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def commit_by_id(mirror: Path, prefix: str) -> str | None:
    """The one commit whose id starts with prefix (4 to 40 hex digits), or None: never a
    branch or tag that happens to have that name (``rev-parse`` would prefer one)."""
    prefix = prefix.lower()
    if not re.fullmatch(r"[0-9a-f]{4,40}", prefix):
        return None
    out = cmd.git(mirror, *in_mirror(mirror), "rev-parse", f"--disambiguate={prefix}", check=False)
    ids = [i for i in out.split() if re.fullmatch(r"[0-9a-f]{40}", i) and i.startswith(prefix)]
    if not ids:
        return None
    kinds = cmd.git(
        mirror,
        *in_mirror(mirror),
        "cat-file",
        "--batch-check=%(objectname) %(objecttype)",
        input="\n".join(ids).encode() + b"\n",
        check=False,
    )
    commits = [ln.split()[0] for ln in kinds.splitlines() if ln.endswith(" commit")]
    return commits[0] if len(commits) == 1 else None


def archive(mirror: Path, commit: str) -> bytes:
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise RemoteError(f"{commit!r} is not a commit id")
    data = cmd.git_capped(
        mirror, *in_mirror(mirror), "archive", "--format=tar", commit, limit=limits.MAX_ARCHIVE
    )
    if data is None:
        raise RemoteError(f"git archive of {commit} failed")
    return data
