"""The syntax merge (synmerge.py, libcst) run in a child process with a time and a memory
bound.

The merged files are release content, i.e. data: libcst's native parser dies of SIGSEGV
on a deeply nested literal, and a file of long expressions keeps it busy for minutes. So
each merge runs in a forked child (cheap: libcst is imported once, before the fork) whose
address space is capped at what the parent uses plus ``SYNTAX_MEMORY`` and whose CPU time
is capped at ``SYNTAX_SECONDS``; the parent waits at most that long (wall clock) and
kills it. A child that crashes, runs out of time or memory gives :class:`Bounded`, and
the caller falls back to the line merge with a note saying why; nothing the child did
reaches the bake but its pickled answer.

A command that merges many files (``port``: every start, every candidate; ``port
--update``) runs them under one :func:`budget` of ``SYNTAX_TOTAL_SECONDS`` of wall time:
each file gets at most what is left, and once it is spent the remaining files are merged
by lines at once, so a port of hundreds of hostile files ends in minutes, not hours.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import resource
import signal
import struct
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from bakery.bake.synmerge import SyntaxConflict, SyntaxMerge, merge_python

#: CPU seconds (and wall seconds waited) for one file's syntax merge.
SYNTAX_SECONDS = 30
#: Bytes the child may allocate beyond the parent's address space at the fork.
SYNTAX_MEMORY = 1 << 30
#: Wall seconds one command's syntax merges may take together (four files at the bound).
SYNTAX_TOTAL_SECONDS = 120


@dataclass
class Budget:
    """What is left of one command's time for syntax merges, and how it was spent."""

    total: float
    left: float
    #: merges run in a child, and merges refused because the budget was spent
    runs: int = 0
    refused: int = 0


_BUDGET: ContextVar[Budget | None] = ContextVar("bakery_syntax_budget", default=None)


@contextlib.contextmanager
def budget(seconds: float | None = None) -> Iterator[Budget]:
    """One bound for every syntax merge inside (default ``SYNTAX_TOTAL_SECONDS``); an
    enclosing budget is kept (a port to a ref runs inside ``port``'s)."""
    outer = _BUDGET.get()
    if outer is not None:
        yield outer
        return
    total = SYNTAX_TOTAL_SECONDS if seconds is None else seconds
    mine = Budget(total, total)
    token = _BUDGET.set(mine)
    try:
        yield mine
    finally:
        _BUDGET.reset(token)


class Bounded(Exception):
    """The syntax merge did not finish: why, in words (the fallback's note)."""


def _address_space() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _child(w: int, base: bytes, ours: bytes, theirs: bytes, seconds: int) -> None:
    try:
        import faulthandler

        faulthandler.disable()  # a crash here is expected data, not the bake's: silent
        mem = _address_space() + SYNTAX_MEMORY
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
        try:
            answer: object = merge_python(base, ours, theirs)
        except SyntaxConflict as e:
            answer = ("conflict", e.where)
        except MemoryError:
            answer = ("bounded", f"it needed more than {SYNTAX_MEMORY >> 20} MiB")
        except RecursionError:
            answer = ("bounded", "the file is nested too deeply")
        data = pickle.dumps(answer)
        os.write(w, struct.pack("<Q", len(data)))
        view = memoryview(data)
        while view:
            view = view[os.write(w, view) :]
    finally:
        os._exit(0)


def _read_all(r: int, pid: int, seconds: int, wall: float) -> bytes:
    deadline = time.monotonic() + wall
    chunks: list[bytes] = []
    import select

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise Bounded(f"it ran past {seconds} s")
        ready, _, _ = select.select([r], [], [], left)
        if not ready:
            continue
        chunk = os.read(r, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def merge_bounded(base: bytes, ours: bytes, theirs: bytes) -> SyntaxMerge:
    """merge_python in a bounded child: its merge, SyntaxConflict as it raised it, or
    Bounded where the child crashed or passed a bound (its own, or what is left of the
    command's :func:`budget`)."""
    spend = _BUDGET.get()
    seconds, wall = SYNTAX_SECONDS, SYNTAX_SECONDS + 5.0  # CPU, and wall with a grace
    if spend is not None:
        if spend.left < 1:
            spend.refused += 1
            raise Bounded(f"this command's syntax merges used their {spend.total:g} s")
        seconds, wall = min(seconds, math.floor(spend.left)), min(wall, spend.left)
        spend.runs += 1
    started = time.monotonic()
    try:
        return _run(base, ours, theirs, seconds, wall)
    finally:
        if spend is not None:
            spend.left -= time.monotonic() - started


def _run(base: bytes, ours: bytes, theirs: bytes, seconds: int, wall: float) -> SyntaxMerge:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its coverage is not collected)
        os.close(r)
        _child(w, base, ours, theirs, seconds)
    os.close(w)
    try:
        data = _read_all(r, pid, seconds, wall)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        why = "it ran past its CPU time" if sig in (signal.SIGXCPU, signal.SIGKILL) else None
        raise Bounded(why or f"the parser crashed ({signal.Signals(sig).name})")
    if len(data) < 8 or len(data) != 8 + struct.unpack("<Q", data[:8])[0]:
        raise Bounded("the parser stopped without an answer")
    answer = pickle.loads(data[8:])  # our own child's answer
    if isinstance(answer, SyntaxMerge):
        return answer
    kind, text = answer
    if kind == "conflict":
        raise SyntaxConflict(text)
    raise Bounded(text)
