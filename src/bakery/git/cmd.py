"""The one door through which bakery runs git: a clean environment, configuration that
never starts a program, a fixed identity and fixed dates (so the same inputs give the same
commit ids), and errors that show the command, its exit code and its output.

git runs in repositories bakery did not make: a local ``--vllm`` checkout, an existing
``--out`` tree, ``refresh --tree``, cache entries and mirrors restored from another CI run.
git reads each repository's own ``.git/config``, and several keys there name programs git
then runs. The policy, using git's own switches and environment only:

- Configuration read: never the system's (``GIT_CONFIG_NOSYSTEM=1``) nor the user's
  (``GIT_CONFIG_GLOBAL=/dev/null``): neither may change what bakery writes. A repository's
  own config is read by git (it has to: format version, extensions), but:
- every key that starts a program and has a fixed name is forced off with ``-c``, which
  wins over every file (``FORCED``): ``core.fsmonitor``, ``core.hooksPath`` (``/dev/null``:
  no hook runs), ``core.sshCommand``, ``core.askPass``, ``credential.helper``; git's own
  rule already ignores ``uploadpack.packObjectsHook`` outside system/global/``-c`` config,
  which bakery never reads; pagers and editors are ``cat`` and ``true`` by environment;
- keys whose names the repository chooses (``filter.<driver>.clean/smudge/process``), or
  that pull in other files or move the work tree (``include.path``, ``includeIf``,
  ``core.worktree``, ``core.gitProxy``) cannot be forced off by name: ``audit()`` finds
  them, and a foreign repository holding one is refused (exit 2), a cached one rebuilt;
- protocols: everything is refused (``protocol.allow=never``) but ``file`` for bakery's
  own local clones; a remote source (remote.py) allows exactly the one scheme the user
  typed, never ``ext``; ``GIT_PROTOCOL_FROM_USER=0``; replace refs are not followed
  (``GIT_NO_REPLACE_OBJECTS``), so a cache cannot swap the content behind a commit id;
- git's ownership check stays on (no ``safe.directory``): a repository owned by another
  user is refused by git itself, and that refusal is one error line. bakery's own cache
  entries and baked trees are made by the user who runs it.

Two entry points start git: ``git()`` runs a command to its end (its output as text,
checked, or with ``raw=True`` the finished process as bytes), and ``Pending`` starts one in
the background, read whole later or streamed up to a cap (``git_capped``). No other module
starts git (tests/security/test_git_config.py checks the imports; tests/git/test_cmd.py
the doors).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Literal, overload

from bakery.errors import BakeryError
from bakery.process import NotStarted, run, run_all, signals_held, start

__all__ = ["run", "run_all", "signals_held"]  # the door's, for git's callers

#: Fixed identity and date of every commit bakery makes.
IDENTITY = {
    "GIT_AUTHOR_NAME": "bakery",
    "GIT_AUTHOR_EMAIL": "bakery@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "bakery",
    "GIT_COMMITTER_EMAIL": "bakery@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def identity(who: str) -> bytes:
    """The author or committer line's value ("name <email> seconds +zone") of IDENTITY."""
    import datetime

    stamp = IDENTITY[f"GIT_{who}_DATE"]  # ...+0000; fromisoformat (3.10) wants +00:00
    when = datetime.datetime.fromisoformat(f"{stamp[:-2]}:{stamp[-2:]}")  # no _strptime
    return (
        f"{IDENTITY[f'GIT_{who}_NAME']} <{IDENTITY[f'GIT_{who}_EMAIL']}> "
        f"{int(when.timestamp())} {when.strftime('%z')}"
    ).encode()


class GitError(BakeryError):
    """git failed; the message quotes git's last line (URLs redacted, as in every error)."""


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENTITY)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_PROTOCOL_FROM_USER"] = "0"
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    env["GIT_ATTR_NOSYSTEM"] = "1"
    env["GIT_PAGER"] = "cat"
    env["GIT_EDITOR"] = "true"
    env["GIT_SEQUENCE_EDITOR"] = "true"
    env["LC_ALL"] = "C"
    return env


#: Forced on every git command: ``-c`` wins over every configuration file.
FORCED = {
    # keys that start a program
    "core.fsmonitor": "false",
    "core.hooksPath": os.devnull,
    "core.sshCommand": "ssh",
    "core.askPass": "",
    "credential.helper": "",  # the empty value empties the list of helpers
    "log.showSignature": "false",
    "commit.gpgSign": "false",
    "fetch.recurseSubmodules": "false",
    "submodule.recurse": "false",
    # a submodule's own configuration is never audited: git never goes into one
    "diff.ignoreSubmodules": "all",
    "status.submoduleSummary": "false",
    "protocol.allow": "never",
    "protocol.ext.allow": "never",
    "protocol.file.allow": "always",  # bakery's own clones; remote.py narrows it
    "gc.auto": "0",
    "maintenance.auto": "false",
    # what bakery writes must not depend on the repository's settings
    "core.autocrlf": "false",
    "core.fileMode": "true",
    "core.symlinks": "true",
    "init.defaultBranch": "main",
    "core.quotePath": "false",
}


def config_args(extra: dict[str, str] | None = None) -> list[str]:
    out: list[str] = []
    for key, value in {**FORCED, **(extra or {})}.items():
        out += ["-c", f"{key}={value}"]
    return out


# --literal-pathspecs: a path from a diff is a name, never pathspec magic (":/x", "*").
_BASE = ["--literal-pathspecs", *config_args()]

#: Keys a repository names itself, or that reach outside it: they cannot be forced off
#: by name (see the module docstring), so a repository that sets one is not used.
_UNSAFE_KEY = re.compile(
    r"^(include\.path|includeif\..*\.path|filter\..*\.(clean|smudge|process)"
    r"|core\.worktree|core\.gitproxy)$"
)


def audit(git_dir: Path) -> list[str]:
    """The keys of a repository's own configuration files (``config``,
    ``config.worktree``) that bakery cannot neutralise (see _UNSAFE_KEY)."""
    found: list[str] = []
    for name in ("config", "config.worktree"):
        path = git_dir / name
        if not path.is_file():
            continue
        proc = _run_git(
            Path("/"), ["config", "--file", str(path), "--no-includes", "--name-only", "--list"]
        )
        if proc.returncode != 0:
            found.append(f"{name} (unreadable)")
            continue
        for key in proc.stdout.decode(errors="replace").splitlines():
            if _UNSAFE_KEY.match(key.strip().lower()):
                found.append(key.strip())
    return found


def check_foreign(tree: Path, what: str) -> None:
    """Refuse a repository bakery did not make whose configuration would start a
    program bakery cannot switch off (one line, exit 2)."""
    out = git(tree, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir")
    dirs = [Path(p) for p in out.splitlines() if p]
    keys = sorted({k for d in dict.fromkeys(dirs) for k in audit(d)})
    if keys:
        raise GitError(
            f"{what}: its git configuration sets {', '.join(keys)}, which would make git run "
            "a program or read outside the repository; bakery does not use such a repository "
            "(remove the setting, or pass a copy of the tree without .git)"
        )


def _run_git(
    cwd: Path,
    args: list[str],
    *,
    input: bytes | None = None,
    extra: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    base = _BASE if extra is None else ["--literal-pathspecs", *config_args(extra)]
    try:
        return run(["git", *base, *args], cwd=cwd, env={**clean_env(), **(env or {})}, input=input)
    except NotStarted:
        if not cwd.is_dir():
            raise GitError(f"{cwd}: no such folder") from None
        raise GitError("git is not installed (bakery needs it on PATH)") from None


@overload
def git(
    cwd: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    extra: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    raw: Literal[False] = False,
) -> str: ...
@overload
def git(
    cwd: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    extra: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    raw: Literal[True],
) -> subprocess.CompletedProcess[bytes]: ...
def git(
    cwd: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    extra: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    raw: bool = False,
) -> str | subprocess.CompletedProcess[bytes]:
    """Run git in cwd under the policy above: the one entry point (``Pending`` is the
    streaming one). Its standard output as text; GitError when it fails, unless check is
    false. raw: the finished process instead (its code, stdout and stderr as bytes), never
    checked, for callers that read bytes (``cat-file blob``) or git's own error lines.
    extra: more forced configuration (remote.py's protocol rules); env: more environment."""
    proc = _run_git(cwd, list(args), input=input, extra=extra, env=env)
    if raw:
        return proc
    if check and proc.returncode != 0:
        raise _failed(args, proc, cwd)
    return proc.stdout.decode("utf-8", errors="surrogateescape")


def stdout_of(proc: subprocess.CompletedProcess[bytes]) -> bytes | None:
    """A raw run's standard output, or None when git failed (cat-file of a path that is
    not there, a missing commit)."""
    return proc.stdout if proc.returncode == 0 else None


def git_capped(cwd: Path, *args: str, limit: int) -> bytes | None:
    """Run git; its standard output as bytes, read in chunks and stopped (the child killed)
    once it passes limit bytes: ``git archive`` of a commit holding a bomb never fills
    memory. None when git fails; GitError when the output passes limit."""
    return Pending(cwd, *args, stderr=False).capped(limit)


def _failed(
    args: tuple[str, ...] | list[str], proc: subprocess.CompletedProcess[bytes], cwd: Path
) -> GitError:
    out = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
    if any("dubious ownership" in line for line in out):
        return GitError(
            f"{cwd}: the repository is owned by another user, and git refuses to use it "
            "(bakery keeps git's ownership check; use a copy you own)"
        )
    tail = out[-1] if out else ""
    return GitError(f"`git {' '.join(args[:3])}` failed ({proc.returncode}) in {cwd}: {tail}")


def merge_file(
    current: bytes,
    base: bytes,
    other: bytes,
    labels: tuple[str, str, str],
    *,
    diff3: bool = False,
) -> tuple[bytes, int]:
    """git merge-file on three byte strings, outside any repository: (result, number of
    conflicts). It runs in a new temporary folder with discovery stopped above it, so no
    repository's configuration (merge drivers, attributes) is read."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bakery-merge-") as tmp:
        paths = []
        for name, data in (("current", current), ("base", base), ("other", other)):
            p = Path(tmp) / name
            p.write_bytes(data)
            paths.append(str(p))
        style = ["--diff3"] if diff3 else []
        args = ["merge-file", "-p", *style, "-L", labels[0], "-L", labels[1], "-L", labels[2]]
        args += paths
        proc = _run_git(Path(tmp), args, env={"GIT_CEILING_DIRECTORIES": str(Path(tmp).parent)})
    if proc.returncode < 0 or proc.returncode > 127:
        raise GitError(f"git merge-file failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout, proc.returncode


def init_commit_all(tree: Path, message: str) -> str:
    """git init the tree and commit everything in it; returns the commit id."""
    git(tree, "init", "-q")
    git(tree, "add", "-A", "--", ".")
    git(tree, "commit", "-q", "--allow-empty", "-m", message)
    return head(tree)


def head(tree: Path) -> str:
    return git(tree, "rev-parse", "HEAD").strip()


class Pending:
    """The streaming door: a git command started in the background (it runs while bakery
    does other work, or streams more than memory should hold). result() waits for all of
    its output, capped() reads it in chunks up to a limit, cancel() kills it if nobody
    waits. stderr=False: git's error lines are not kept (nobody reads them)."""

    def __init__(self, cwd: Path, *args: str, stderr: bool = True) -> None:
        self.cwd, self.args = cwd, args
        try:
            self._proc: subprocess.Popen[bytes] | None = start(
                ["git", *_BASE, *args],
                cwd=cwd,
                env=clean_env(),
                stderr=subprocess.PIPE if stderr else subprocess.DEVNULL,
            )
        except NotStarted:
            raise GitError("git is not installed (bakery needs it on PATH)") from None

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise GitError(f"`git {' '.join(self.args[:3])}` was cancelled")
        return self._proc

    def result(self) -> tuple[int, str]:
        """(exit code, standard output)."""
        proc = self._started()
        try:
            out, _ = proc.communicate()
        except BaseException:
            self.cancel()
            raise
        return proc.returncode, out.decode("utf-8", errors="surrogateescape")

    def capped(self, limit: int) -> bytes | None:
        """Its standard output, or None when git fails; GitError (the child killed) once
        the output passes limit bytes."""
        proc = self._started()
        chunks: list[bytes] = []
        total = 0
        try:
            assert proc.stdout is not None
            while chunk := proc.stdout.read(1 << 20):
                total += len(chunk)
                if total > limit:
                    verb = next((a for a in self.args if not a.startswith("-")), "")
                    raise GitError(f"git {verb}: its output is larger than {limit} bytes")
                chunks.append(chunk)
            code = proc.wait()
        finally:
            self.cancel()
        return b"".join(chunks) if code == 0 else None

    def cancel(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.returncode is None:
            proc.kill()
            proc.communicate()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def read_head(git_dir: Path) -> tuple[str, str] | None:
    """(the branch HEAD names, its commit id) read from the files of a repository, with no
    git process; None where HEAD is detached or the ref is not plainly stored (ask git)."""
    try:
        head = (git_dir / "HEAD").read_text().strip()
        if not head.startswith("ref: refs/heads/"):
            return None
        ref = head[5:]
        loose = git_dir / ref
        if loose.is_file():
            commit = loose.read_text().strip()
        else:
            packed = (git_dir / "packed-refs").read_text().splitlines()
            found = [
                line.split(" ", 1)[0]
                for line in packed
                if line.endswith(" " + ref) and not line.startswith("#")
            ]
            if len(found) != 1:
                return None
            commit = found[0]
    except (OSError, UnicodeDecodeError):
        return None
    if len(commit) != 40 or not all(c in "0123456789abcdef" for c in commit):
        return None
    return ref, commit


def status_args(*, refresh: bool) -> list[str]:
    lock = [] if refresh else ["--no-optional-locks"]
    return [*lock, "status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=all"]


def dirty(path: Path, *, refresh: bool = False) -> list[str]:
    """Uncommitted changes. A source checkout is only read (its index is not refreshed);
    with refresh (a repository bakery owns), git writes back the stat data it had to
    read files to confirm, so that the next look is fast again (a cache restored by a CI
    job, or copied, has new inodes and ctimes: every file would be hashed each time)."""
    out = git(path, *status_args(refresh=refresh))
    return [line for line in out.splitlines() if line.strip()]
