"""The one door through which bakery starts a child process: git (through
:mod:`bakery.git.cmd`, which adds git's own policy), ``cp``, pytest, pip or uv, ``diff -u``
and the differential child.

Every child starts with SIGINT and SIGTERM held (:func:`signals_held`): a
KeyboardInterrupt inside ``Popen()`` would leave the child running, known to no one, still
writing into a folder that is being removed. Every child is killed and waited for when
its caller is interrupted or its time runs out, before the exception goes on. A child
that fails is one :class:`ProcessFailed` line that shows the command, the exit code and
the tail of its output, as pypa/build's ``run_subprocess`` and pre-commit's
``cmd_output_b`` do. (subprocess.run kills its child on an exception only after the
child started; the window in between is why this is hand-written.)

The bounded syntax merge's child is a worker of a ``ProcessPoolExecutor`` whose
initializer sets its limits (:mod:`bakery.bake.synmerge`): a library pool, not this door.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from bakery.errors import BakeryError

#: Lines of a failed child's output shown in its error.
TAIL_LINES = 5


class ProcessFailed(BakeryError):
    """A child process that could not start or exited with an unexpected code."""


class NotStarted(ProcessFailed):
    """The program (or the working folder) is not there."""


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while a child process starts; the held signal is raised
    after (only the main thread handles signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
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


def start(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = None,
    stdout: int | IO[bytes] | None = subprocess.PIPE,
    stderr: int | IO[bytes] | None = subprocess.PIPE,
    own_group: bool = False,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """A child started in the background, with signals held while it starts. The caller
    owns it: :func:`stop` it on every way out. ``own_group``: in a session of its own, so
    that a terminal's Ctrl-C reaches bakery alone (:func:`stop_group`); ``pass_fds``: the
    descriptors it inherits."""
    with signals_held():
        try:
            return subprocess.Popen(
                list(cmd),
                cwd=cwd,
                env=env,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                start_new_session=own_group,
                pass_fds=tuple(pass_fds),
            )
        except FileNotFoundError as exc:
            raise NotStarted(f"cannot start {_shown(cmd)}: {exc.strerror or exc}") from None
        except OSError as exc:
            raise ProcessFailed(f"cannot start {_shown(cmd)}: {exc.strerror or exc}") from None


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child (if it still runs) and wait for it."""
    if proc.returncode is None:
        proc.kill()
    proc.wait()


#: Seconds a child's group has to end on SIGTERM before it is killed.
GROUP_GRACE = 5.0


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """End a child started with ``own_group`` and what it started in its group (pytest's
    rank servers, ranks and workers): SIGTERM, which ends a Python process at once and
    quietly, where the terminal's SIGINT made each print a KeyboardInterrupt traceback
    (30 lines of one in a verify stopped while its fork server imported torch); SIGKILL
    after ``GROUP_GRACE`` seconds. Wait for it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=GROUP_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """The child run to its end, its output captured (bytes). On an interruption or a
    timeout (``subprocess.TimeoutExpired``) the child is killed and waited for first."""
    proc = start(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE if input is not None else None)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except BaseException:
        stop(proc)
        raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def run_all(
    cmds: Sequence[Sequence[str]], *, cwd: Path | None = None
) -> list[subprocess.CompletedProcess[bytes]]:
    """:func:`run` for several commands at once (they run in parallel); on an
    interruption every child is killed and waited for."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for cmd in cmds:
            procs.append(start(cmd, cwd=cwd))
        done = []
        for p in procs:
            out, err = p.communicate()
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        return done
    except BaseException:
        for p in procs:
            if p.returncode is None:
                p.kill()
        for p in procs:
            p.wait()
        raise


def run_shown(
    cmd: Sequence[str], *, env: Mapping[str, str] | None = None, log: Path | None = None
) -> int:
    """A child whose output the user reads: on the terminal, or (``log``) in that file.
    Its exit code. It runs in its own group: on an interruption bakery alone says
    ``interrupted``, and the child's group is ended quietly (:func:`stop_group`)."""
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(log, "wb")) if log is not None else None
        proc = start(
            cmd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT if sink is not None else None,
            own_group=True,
        )
        try:
            return proc.wait()
        except BaseException:
            stop_group(proc)
            raise


def check(proc: subprocess.CompletedProcess[bytes], what: str, ok: Sequence[int] = (0,)) -> bytes:
    """The child's standard output, or :class:`ProcessFailed`: what failed, the command,
    its exit code and the last lines of its output."""
    if proc.returncode in ok:
        return proc.stdout
    raise ProcessFailed(failure(what, proc))


def failure(what: str, proc: subprocess.CompletedProcess[bytes]) -> str:
    """One line: ``what failed (`command`, exit N): tail of the output``."""
    args = proc.args if isinstance(proc.args, list) else [str(proc.args)]
    return f"{what} failed (`{_shown(args)}`, exit {proc.returncode}): {tail(proc)}"


def tail(proc: subprocess.CompletedProcess[bytes], lines: int = TAIL_LINES) -> str:
    """The last non-empty lines of the child's output (stderr first), joined by `` | ``."""
    text = b"\n".join(x for x in (proc.stderr, proc.stdout) if x).decode(errors="replace")
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "no output"


def _shown(cmd: Sequence[str]) -> str:
    """The command as one line a shell would take (its first words; control characters
    such as a ``-c`` script's newlines escaped)."""
    words = [shlex.quote(os.fspath(c)).encode("unicode_escape").decode() for c in cmd[:6]]
    return " ".join(words) + (" ..." if len(cmd) > 6 else "")
