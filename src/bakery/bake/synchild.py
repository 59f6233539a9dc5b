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
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import signal
import struct
import time

from bakery.bake.synmerge import SyntaxConflict, SyntaxMerge, merge_python

#: CPU seconds (and wall seconds waited) for one file's syntax merge.
SYNTAX_SECONDS = 30
#: Bytes the child may allocate beyond the parent's address space at the fork.
SYNTAX_MEMORY = 1 << 30


class Bounded(Exception):
    """The syntax merge did not finish: why, in words (the fallback's note)."""


def _address_space() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _child(w: int, base: bytes, ours: bytes, theirs: bytes) -> None:
    try:
        import faulthandler

        faulthandler.disable()  # a crash here is expected data, not the bake's: silent
        mem = _address_space() + SYNTAX_MEMORY
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (SYNTAX_SECONDS, SYNTAX_SECONDS + 1))
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


def _read_all(r: int, pid: int) -> bytes:
    deadline = time.monotonic() + SYNTAX_SECONDS + 5
    chunks: list[bytes] = []
    import select

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise Bounded(f"it ran past {SYNTAX_SECONDS} s")
        ready, _, _ = select.select([r], [], [], left)
        if not ready:
            continue
        chunk = os.read(r, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def merge_bounded(base: bytes, ours: bytes, theirs: bytes) -> SyntaxMerge:
    """merge_python in a bounded child: its merge, SyntaxConflict as it raised it, or
    Bounded where the child crashed or passed a bound."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its coverage is not collected)
        os.close(r)
        _child(w, base, ours, theirs)
    os.close(w)
    try:
        data = _read_all(r, pid)
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
