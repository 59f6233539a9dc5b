"""The one wrapper through which bakery runs git: a clean GIT_* environment, a fixed
identity and fixed dates (so the same inputs give the same commit ids), and errors that
show the command, its exit code and its output."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from bakery.errors import BakeryError

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

    when = datetime.datetime.strptime(IDENTITY[f"GIT_{who}_DATE"], "%Y-%m-%dT%H:%M:%S%z")
    return (
        f"{IDENTITY[f'GIT_{who}_NAME']} <{IDENTITY[f'GIT_{who}_EMAIL']}> "
        f"{int(when.timestamp())} {when.strftime('%z')}"
    ).encode()


class GitError(BakeryError):
    pass


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(IDENTITY)
    # Neither the user's nor the system's config may change what bakery writes.
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    return env


# --literal-pathspecs: a path from a diff is a name, never pathspec magic (":/x", "*").
_BASE = [
    "--literal-pathspecs",
    "-c",
    "safe.directory=*",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.fileMode=true",
    "-c",
    "core.symlinks=true",
    "-c",
    "gc.auto=0",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "core.quotePath=false",
]


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while a child process starts: a KeyboardInterrupt inside
    Popen() leaves the child running, known to no one (subprocess.run cannot kill it), still
    writing into a staging folder that is being removed. The held signal is raised after."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are only ever handled in the main thread
        return
    held: list[int] = []
    saved = {
        sig: signal.signal(sig, lambda signum, frame: held.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if held:
            signal.raise_signal(held[0])


def run(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """subprocess.run(capture_output=True) that never leaves its child behind: on an
    interruption the child is killed and waited for before the exception goes on."""
    proc: subprocess.Popen[bytes] | None = None
    try:
        with signals_held():
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.PIPE if input is not None else None,
            )
        out, err = proc.communicate(input)
    except BaseException:
        if proc is not None:
            proc.kill()
            proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_all(
    cmds: list[list[str]], *, cwd: Path | None = None
) -> list[subprocess.CompletedProcess[bytes]]:
    """run() for several commands at once (they run in parallel); on an interruption every
    child is killed and waited for before the exception goes on."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with signals_held():
            for cmd in cmds:
                procs.append(
                    subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                )
        done = []
        for p in procs:
            out, err = p.communicate()
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        return done
    except BaseException:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        raise


def _git(cwd: Path, args: tuple[str, ...], input: bytes | None, check: bool) -> bytes:
    cmd = ["git", *_BASE, *args]  # args may start with global options (--no-optional-locks)
    try:
        proc = run(cmd, cwd=cwd, env=clean_env(), input=input)
    except FileNotFoundError:
        raise GitError("git is not installed (bakery needs it on PATH)") from None
    if check and proc.returncode != 0:
        out = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
        tail = out[-1] if out else ""
        raise GitError(f"`git {' '.join(args[:3])}` failed ({proc.returncode}) in {cwd}: {tail}")
    return proc.stdout


def git(cwd: Path, *args: str, input: bytes | None = None, check: bool = True) -> str:
    return _git(cwd, args, input, check).decode("utf-8", errors="surrogateescape")


def git_bytes(cwd: Path, *args: str) -> bytes:
    """git's standard output as bytes (git archive)."""
    return _git(cwd, args, None, True)


def init_commit_all(tree: Path, message: str) -> str:
    """git init the tree and commit everything in it; returns the commit id."""
    git(tree, "init", "-q")
    git(tree, "add", "-A", "--", ".")
    git(tree, "commit", "-q", "--allow-empty", "-m", message)
    return head(tree)


def head(tree: Path) -> str:
    return git(tree, "rev-parse", "HEAD").strip()


class Pending:
    """A git command started in the background (it runs while bakery does other work);
    result() waits for it, cancel() kills it if nobody waits."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.cwd, self.args = cwd, args
        with signals_held():
            try:
                self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                    ["git", *_BASE, *args],
                    cwd=cwd,
                    env=clean_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            except FileNotFoundError:
                raise GitError("git is not installed (bakery needs it on PATH)") from None

    def result(self) -> tuple[int, str]:
        """(exit code, standard output)."""
        proc = self._proc
        if proc is None:
            raise GitError(f"`git {' '.join(self.args[:3])}` was cancelled")
        try:
            out, _ = proc.communicate()
        except BaseException:
            self.cancel()
            raise
        return proc.returncode, out.decode("utf-8", errors="surrogateescape")

    def cancel(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.kill()
            proc.communicate()


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
    return [*lock, "status", "--porcelain", "--untracked-files=normal"]


def dirty(path: Path, *, refresh: bool = False) -> list[str]:
    """Uncommitted changes. A source checkout is only read (its index is not refreshed);
    with refresh (a repository bakery owns), git writes back the stat data it had to
    read files to confirm, so that the next look is fast again (a cache restored by a CI
    job, or copied, has new inodes and ctimes: every file would be hashed each time)."""
    out = git(path, *status_args(refresh=refresh))
    return [line for line in out.splitlines() if line.strip()]
