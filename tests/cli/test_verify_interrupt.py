"""Ctrl-C during ``bakery verify``: ``interrupted``, exit 130, and nothing else (issue 48).

A terminal's Ctrl-C is SIGINT to its foreground process group. Before, that group held
pytest, the processes it started and multiprocessing's helpers: each printed its own
KeyboardInterrupt traceback (30 lines of one from a fork server importing torch), and the
resource tracker a UserWarning about the semaphores it freed. Here a real ``bakery
verify`` runs a series test that starts a forkserver process holding a semaphore and
then waits; SIGINT goes to bakery's group as a terminal sends it, once the test runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.series import make_series, udiff
from tests.support.trees import cache_release

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

WAITS = """\
import multiprocessing
import os
import time
from pathlib import Path


def _hold(lock):
    with lock:
        time.sleep(120)


def test_waits_for_ctrl_c(baked_tree: Path) -> None:
    ctx = multiprocessing.get_context("forkserver")
    lock = ctx.Semaphore()
    child = ctx.Process(target=_hold, args=(lock,))
    child.start()
    Path(os.environ["MARK"]).write_text(f"{os.getpid()} {child.pid}")
    time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ctrl_c_during_verify_is_one_line_and_exit_130(
    cli: Callable[..., Result], home: Path, tmp_path: Path
) -> None:
    before = "".join(f"line {i}\n" for i in range(10))
    cache_release("1.0.0", {"vllm/__init__.py": "", "vllm/m.py": before})
    series = make_series(
        home,
        "s",
        {"01-m.diff": udiff("m.py", before, before.replace("line 4\n", "line four\n"))},
        'base = "1.0.0"\nroot = "vllm"\nstrip = 1\nenv = "light"\n',
    )
    (series / "tests").mkdir()
    (series / "tests" / "test_waits.py").write_text(WAITS)
    assert cli("apply", "s").exit_code == 0
    mark = tmp_path / "running"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bakery", "verify", "s", "--interpret", "--no-reuse"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MARK": str(mark)},
        start_new_session=True,  # its own group, as a shell's foreground job
        # as a shell starts it: Ctrl-C not ignored (a pytest-xdist worker ignores SIGINT,
        # and an ignored signal stays ignored in its children)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mark.exists(), proc.communicate()[0]
    time.sleep(0.5)  # the forkserver child holds its semaphore
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    # the last word, once (after pytest's line of dots, which the stop cut short)
    assert out.rstrip().endswith(" interrupted") and out.count("interrupted") == 1, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert "Warning" not in out, out
    # nothing left running: pytest and the process it started are gone
    pids = [int(p) for p in mark.read_text().split()]
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in pids), pids
