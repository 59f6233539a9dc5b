"""``python -m bakery.testing.pytest_main ARGS``: ``python -m pytest ARGS`` (what verify
runs), with a quick exit once pytest is done.

pytest's own entry point returns its exit code to Python's normal exit. In a process that
imported torch and Triton that exit is slow: 0.4-0.5 s of finalizing modules and objects
on this project's 2-core CI host (``python -c "import torch, triton"``: 1.63-1.74 s
against 1.18-1.24 s ending with ``os._exit``, BENCHMARKS.md), on the path of every verify,
matrix row, port candidate and mutant. Nothing in it is needed by then: pytest has written
every report (the terminal's, JUnit XML, bakery's results file) in its hooks before
``pytest.main`` returns, and bakery's plugin has stopped the rank processes. So the
streams and logging's handlers are flushed, and the process ends with ``os._exit`` and
pytest's exit code. What does not run: ``atexit`` handlers and the wait for non-daemon
threads a test left behind (which would otherwise hold the run open).

Hand-written because no library offers it: the standard library's exit is the slow part.

The run gets its own temp folder, which becomes TMPDIR for pytest, its xdist workers and
the ranks, and is removed before the quick exit. Two reasons. The quick exit skips
``multiprocessing``'s own cleanup, which left a ``pymp-*`` folder in TMPDIR after every
multi-rank verify. And the forkserver that starts the ranks listens on an AF_UNIX socket
in that folder (``pymp-XXXXXXXX/listener-XXXXXXXX``, 40 bytes past TMPDIR, at most 107
in all): under a TMPDIR deeper than about 70 characters every multi-rank verify stopped
with pytest's INTERNALERROR. The folder is private (0700) and short whatever TMPDIR is:
under TMPDIR when that is short enough, else under ``/tmp``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile

#: multiprocessing's resource tracker outlives a verify that bakery ended (its group gets
#: SIGTERM on Ctrl-C, which the tracker ignores): it frees the semaphores the killed ranks
#: held, as it should, and would say so in a UserWarning on the user's terminal after
#: bakery's "interrupted". Its processes inherit this filter through the environment.
QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"
#: The longest TMPDIR under which the run's own folder is made (AF_UNIX paths: see above).
SHORT_TMP = 60


def private_tmp() -> str:
    """A new private (0700) folder for this run's temp files, short enough for AF_UNIX
    socket paths inside it whatever TMPDIR is."""
    base = tempfile.gettempdir()
    if len(base) > SHORT_TMP and os.path.isdir("/tmp"):
        base = "/tmp"
    return tempfile.mkdtemp(prefix="bakery-", dir=base)


def main() -> None:
    import pytest

    warned = os.environ.get("PYTHONWARNINGS", "")
    if QUIET_TRACKER not in warned:
        os.environ["PYTHONWARNINGS"] = f"{warned},{QUIET_TRACKER}" if warned else QUIET_TRACKER

    own = private_tmp()
    os.environ["TMPDIR"] = tempfile.tempdir = own  # workers and ranks inherit it
    # pytest.main(), not console_main(): pytest 9.1 deprecates console_main for programs
    # (a PytestRemovedIn10Warning at the top of every verify); both read sys.argv's
    # arguments and return the exit code, and a broken pipe is handled below
    try:
        code = pytest.main()
    except BrokenPipeError:
        code = 1
    finally:
        shutil.rmtree(own, ignore_errors=True)  # what multiprocessing's exit would remove
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # a closed or broken pipe: nothing left to say
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(int(code))


if __name__ == "__main__":
    main()
